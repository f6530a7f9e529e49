"""The end-to-end demo (``mlsysopt demo``): each registered builder adds a section to ``RUN_DIR/index.html``.

A builder is ``f(ctx: DemoContext) -> Section | list[Section]``. It writes its plots under ``ctx.out``, puts
its JSON-ready results in ``ctx.results[<its name>]`` and calls ``ctx.step(message)`` to report progress.
Register one in :data:`BUILDERS` either as a function or as a lazy ``"package.module:function"`` string, so
that heavy imports (torch, onnxruntime, ...) happen only when that section runs::

    BUILDERS["placement"] = "mlsysopt.demo.placement:demo_section"

Units: DNN graphs (torch.fx) have ``compute`` in FLOPs and edges in bytes, so their cluster is scaled to
FLOP/s, bytes/s and seconds (about 1-3 GFLOP/s per device, 0.4-0.7 GB/s links, ~10 µs latency). WfCommons
graphs have ``compute`` in seconds at speed 1 and files in bytes, so their cluster keeps relative speeds
around 1 and gets ~100 MB/s links with ~1 ms latency.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import scaled_cluster
from mlsysopt.graph.importers.wfcommons import from_recipe
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import placement_to_dict, random_placement
from mlsysopt.graph.simulator import cp_min, simulate, slr_from_bound
from mlsysopt.io import write_json_atomic
from mlsysopt.report.gantt import plot_gantt
from mlsysopt.report.html import Section, write_index
from mlsysopt.report.overview import glossary_section, headlines, summary_section
from mlsysopt.report.provenance import environment
from mlsysopt.report.summary import cluster_summary, graph_summary
from mlsysopt.store.records import record_headlines, store_links


@dataclass
class DemoContext:
    """What a section builder gets: the run directory, the seed, a results dict and a progress callback."""

    out: Path
    seed: int
    results: dict[str, Any] = field(default_factory=dict)
    step: Callable[[str], None] = field(default=lambda message: None)

    def rng(self, offset: int = 0) -> np.random.Generator:
        """A generator seeded from the demo seed (``offset`` keeps builders' streams apart)."""
        return np.random.default_rng([self.seed, offset])


SectionBuilder = Callable[[DemoContext], "Section | list[Section]"]


# ---------------------------------------------------------------------------- shared helpers
def fastest_placement(graph: CompGraph, cluster: DeviceCluster) -> np.ndarray:
    """Every task on the fastest device that supports all the graph's types (else each on its fastest)."""
    feas = cluster.check_feasible(graph)
    needed = np.unique(graph.hw_type)
    covers = cluster.supports[:, needed].all(axis=1) if needed.max() < cluster.num_types else None
    if covers is not None and covers.any():
        best = int(np.argmax(np.where(covers, cluster.speed, -np.inf)))
        return np.full(graph.num_nodes, best, dtype=np.int64)
    return np.argmax(np.where(feas, cluster.speed[None, :], -np.inf), axis=1).astype(np.int64)


def compare_placements(
    ctx: DemoContext,
    key: str,
    heading: str,
    text: str,
    graph: CompGraph,
    cluster: DeviceCluster,
    placements: dict[str, np.ndarray],
) -> Section:
    """Simulate each named placement, plot its Gantt chart, record results under ``key``; return a Section."""
    bound = cp_min(graph, cluster)
    rows: list[list[Any]] = []
    images: list[str] = []
    captions: list[str] = []
    res: dict[str, Any] = {
        "graph": graph_summary(graph),
        "cluster": cluster_summary(cluster),
        "cp_min": bound,
        "placements": {},
    }
    for label, placement in placements.items():
        ctx.step(f"{key}: simulating the {label} placement")
        sched = simulate(graph, cluster, placement)
        slug = "".join(c if c.isalnum() else "_" for c in label.lower())
        png = f"{key}_{slug}_gantt.png"
        plot_gantt(graph, cluster, sched, ctx.out / png, title=f"{heading}: {label} placement")
        used = len(np.unique(sched.placement))
        ratio = slr_from_bound(sched.makespan, bound)
        rows.append([label, sched.makespan, bound, ratio, used, len(sched.critical_path)])
        images.append(png)
        captions.append(f"{label} placement: makespan {sched.makespan:.4g} s, SLR {ratio:.3g}")
        res["placements"][label] = {
            "makespan": sched.makespan,
            "slr": ratio,
            "devices_used": used,
            "gantt": png,
            "placement": placement_to_dict(graph, cluster, sched.placement),
            "schedule": sched.to_dict(graph, cluster),
        }
    ctx.results[key] = res
    g, c = res["graph"], res["cluster"]
    facts = (
        f"{g['tasks']} tasks, {g['edges']} edges, depth {g['depth']}; "
        f"{c['devices']} devices ({c['hw_types']} hardware type(s))."
    )
    return Section(
        heading=heading,
        text=f"{text}\n\n{facts}",
        table=rows,
        columns=["placement", "makespan (s)", "CP_MIN (s)", "SLR", "devices used", "critical-path tasks"],
        images=images,
        captions=captions,
        anchor=key,
    )


# ---------------------------------------------------------------------------- built-in sections
def cnn_section(ctx: DemoContext) -> Section:
    """The zoo CNN traced with torch.fx, on a 6-device cluster in FLOP/s and bytes/s."""
    ctx.step("cnn: tracing the zoo CNN with torch.fx")
    from mlsysopt import zoo  # deferred: mlsysopt.zoo imports torch
    from mlsysopt.graph.importers.torch_fx import from_module  # deferred: torch_fx imports torch

    module, example_inputs = zoo.get("cnn")
    graph = from_module(module, example_inputs, name="cnn")
    cluster = scaled_cluster(graph, 6, ctx.seed, speed_scale=2e9, bandwidth_scale=5e8, delay_scale=1e-5)
    placements = {
        "random": random_placement(graph, cluster, ctx.rng(1)),
        "fastest device": fastest_placement(graph, cluster),
    }
    text = (
        "The zoo CNN, traced with torch.fx: one task per operation, compute = FLOPs, "
        "edges = activation bytes. Cluster: 6 devices of 1-3 GFLOP/s joined by 0.4-0.7 GB/s links with "
        "~10 µs latency. The CNN is a chain (one task per level), so there is nothing to run in parallel: a "
        "random placement only pays for moving activations between devices, and keeping the whole chain on the "
        "fastest device avoids all communication. Neither is an optimizer; the placement section compares those."
    )
    return compare_placements(ctx, "cnn", "DNN: zoo CNN (torch.fx)", text, graph, cluster, placements)


def montage_section(ctx: DemoContext) -> Section:
    """A 60-task WfCommons Montage workflow on an 8-device heterogeneous cluster."""
    ctx.step("montage: generating a WfCommons Montage workflow")

    graph = from_recipe("montage", 62, seed=ctx.seed)  # a size WfChef's montage builds exactly (60 gives 58)
    cluster = scaled_cluster(graph, 8, ctx.seed + 1, speed_scale=1.0, bandwidth_scale=1e8, delay_scale=1e-3)
    placements = {
        "random": random_placement(graph, cluster, ctx.rng(2)),
        "fastest device": fastest_placement(graph, cluster),
    }
    text = (
        f"A Montage astronomy-mosaic workflow (WfCommons recipe, {graph.num_nodes} tasks in {graph.depth} levels): "
        "compute = seconds at speed 1, edges = file bytes. Cluster: 8 devices with relative speeds 0.5-1.5, "
        "~100 MB/s links, ~1 ms latency. Montage is wide, so one device serializes its parallel stages while a "
        "random spread overlaps them, paying for the transfers (the CNN above is a chain: nothing to overlap). "
        "Neither is an optimizer; the placement section compares those."
    )
    return compare_placements(ctx, "montage", "Workflow: WfCommons Montage", text, graph, cluster, placements)


#: name -> builder (or a lazy "module:function" string). Order is the order of the report.
BUILDERS: dict[str, SectionBuilder | str] = {
    "cnn": cnn_section,
    "montage": montage_section,
    "placement": "mlsysopt.demo.placement:demo_section",
    "serving": "mlsysopt.demo.serving:demo_section",
    "nas": "mlsysopt.demo.nas:demo_section",
    "costmodel": "mlsysopt.demo.costmodel:demo_section",
}


def resolve(builder: SectionBuilder | str) -> SectionBuilder:
    """A builder function from a function or a ``"package.module:function"`` string."""
    if callable(builder):
        return builder
    module, _, attr = builder.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise MlsysoptError(f"demo section '{builder}' cannot be loaded: {exc}") from None


def select(only: Sequence[str] | None) -> list[str]:
    """Names of the builders to run (all of them, or ``only`` in registry order); unknown names are errors."""
    if not only:
        return list(BUILDERS)
    unknown = [s for s in only if s not in BUILDERS]
    if unknown:
        raise MlsysoptError(f"unknown demo section '{unknown[0]}' (have: {', '.join(BUILDERS)})")
    return [s for s in BUILDERS if s in only]


def run_demo(
    out: str | Path,
    seed: int = 0,
    only: Sequence[str] | None = None,
    on_step: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Run the selected builders, then write ``result.json``, ``summary.json`` and ``index.html`` (last, atomically).

    The page opens with the summary (every system's headline against its baseline), ends with a glossary and a
    footer of version, commit, machine and per-section timings; ``summary.json`` holds the same in JSON.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise MlsysoptError(f"--out {out} exists and is not a directory")
    names = select(only)
    sections: list[Section] = []
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name in names:
        ctx = DemoContext(out, seed, results, step=lambda msg, n=name: on_step and on_step(n, msg))
        ctx.step(f"{name}: starting")
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        built = resolve(BUILDERS[name])(ctx)
        timings[name] = time.perf_counter() - start
        sections.extend(built if isinstance(built, list) else [built])
    result = {"command": "demo", "seed": seed, "sections": names, **results, "timings_s": timings}
    write_json_atomic(out / "result.json", result)
    rows, errors = headlines(result)

    record_headlines(rows)  # the summary rows as trials of the demo's study (when a run folder and a store are open)
    env = environment()
    write_json_atomic(
        out / "summary.json",
        {"seed": seed, "sections": names, "summary": [h.to_dict() for h in rows], "summary_errors": errors,
         "environment": env, "timings_s": timings},
    )  # fmt: skip
    page = [summary_section(rows, errors), *sections, glossary_section(results)]
    footer = {
        "mlsysopt": env["mlsysopt"],
        "git commit": env["commit"] or "not a git checkout",
        "machine": f"{env['cpus']} CPUs · {env['platform']} · Python {env['python']} · torch {env['torch']}",
        "seed": seed,
        "section timings (s)": " · ".join(f"{n} {t:.1f}" for n, t in timings.items()),
        "total (s)": round(sum(timings.values()), 1),
        **store_links(),
    }
    write_index(out, "mlsysopt demo", page, subtitle=f"seed {seed} · sections: {', '.join(names)}", footer=footer)
    return result
