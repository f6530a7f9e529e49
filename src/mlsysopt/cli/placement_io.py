"""Helpers of ``mlsysopt placement ...``: shared options, loading problems and policies, running methods."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import _load_source, console, err_console, progress_bar  # noqa: F401 (re-exported)
from mlsysopt.errors import InvalidCluster, MlsysoptError

if TYPE_CHECKING:
    import numpy as np

    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.ir import CompGraph
    from mlsysopt.placement.base import PlacementResult
    from mlsysopt.placement.giph import GiPH

#: Every method ``place``/``compare`` know; ``giph_from_heft`` is GiPH started from HEFT's placement.
METHODS = ("heft", "random", "annealing", "eft_greedy", "giph", "giph_from_heft")
GIPH_METHODS = ("giph", "giph_from_heft")
SYNTHETIC = "synthetic training data (layered DAGs + random clusters)"

GraphArg = Annotated[
    str, typer.Argument(metavar="GRAPH", help="A graph: .npz, .onnx, WfCommons .json, recipe name or 'mod:factory'.")
]
ClusterOpt = Annotated[Path | None, typer.Option("--cluster", help="Device cluster JSON (or use --devices).")]
DevicesOpt = Annotated[
    int | None,
    typer.Option("--devices", min=1, help="Instead of --cluster: a random heterogeneous cluster of N devices."),
]
PolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="GiPH checkpoint from 'mlsysopt placement train', or 'pretrained' (shipped)."),
]
BudgetOpt = Annotated[
    int | None, typer.Option("--budget", min=1, help="Simulator evaluations per search (default: 2 x tasks).")
]
OutOpt = Annotated[Path, typer.Option("--out", help="Run directory for result.json and the plots.")]


# ---------------------------------------------------------------------------- loading
def load_problem(
    source: str,
    num_tasks: int,
    seed: int,
    input_shape: str | None,
    cluster_path: Path | None,
    devices: int | None,
) -> tuple[CompGraph, DeviceCluster, str]:
    """The graph, a cluster that can run every task of it, and a line saying where the cluster came from."""
    if cluster_path is not None and devices is not None:
        raise MlsysoptError("give either --cluster C.json or --devices N, not both")
    if cluster_path is None and devices is None:
        raise MlsysoptError(
            "no devices: give --cluster C.json, or --devices N for a random cluster in the graph's units"
        )
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.generate import cluster_for, graph_units

    graph = _load_source(source, num_tasks, seed, input_shape)
    if cluster_path is not None:
        cluster = DeviceCluster.load(cluster_path)
        how = f"from {cluster_path}"
    else:
        assert devices is not None
        cluster = cluster_for(graph, devices, seed)
        how = f"random {devices}-device cluster in {graph_units(graph)} units (seed {seed})"
    try:
        cluster.check_feasible(graph)
    except MlsysoptError as exc:
        raise type(exc)(f"cluster {how}: {exc}") from None
    return graph, cluster, how


def require_policy(policy: Path | None, why: str) -> Path:
    """The --policy path, or a clear error (before importing torch) when it is missing."""
    if policy is None:
        raise MlsysoptError(
            f"{why} needs --policy policy.pt (train one with 'mlsysopt placement train --out RUN') "
            "or --policy pretrained (the policy shipped with mlsysopt)"
        )
    policy = pretrained_or(policy)
    check_policy_file(policy)
    return policy


def pretrained_or(policy: Path) -> Path:
    """``--policy pretrained`` means the policy shipped with mlsysopt; any other value is a path."""
    if str(policy) == "pretrained":
        from mlsysopt.placement.checkpoint import PRETRAINED

        return PRETRAINED
    return policy


def load_giph(policy: Path | None, why: str) -> GiPH:
    """The GiPH placer of a checkpoint; a clear error when it is missing or unusable."""
    policy = require_policy(policy, why)
    from mlsysopt.placement.giph import GiPH

    return GiPH.load(policy)  # GiPH's search runs with one torch thread itself


def check_policy_file(policy: Path | None) -> None:
    """Fail fast (before importing torch) on a --policy path that is not a file."""
    if policy is not None and not pretrained_or(policy).is_file():
        raise MlsysoptError(f"--policy {policy}: no such checkpoint file")


def parse_methods(text: str | None, have_policy: bool) -> tuple[list[str], list[str]]:
    """(methods to run, GiPH methods skipped for want of a policy) from a comma list (default: all)."""
    if text is None:
        wanted = list(METHODS)
    else:
        wanted = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
        if not wanted:
            raise MlsysoptError(f"--methods is empty (choose from: {', '.join(METHODS)})")
    unknown = [m for m in wanted if m not in METHODS]
    if unknown:
        raise MlsysoptError(f"unknown method '{unknown[0]}' (choose from: {', '.join(METHODS)})")
    giph = [m for m in wanted if m in GIPH_METHODS]
    if giph and not have_policy:
        if text is not None:
            raise MlsysoptError(f"method '{giph[0]}' needs --policy policy.pt (or leave it out of --methods)")
        return [m for m in wanted if m not in GIPH_METHODS], giph
    return wanted, []


def check_backend(backend: str) -> None:
    """MlsysoptError for an unknown --backend, or for ``ray`` when Ray is not installed."""
    from mlsysopt.runtime import BACKENDS

    if backend not in BACKENDS:
        raise MlsysoptError(f"unknown --backend '{backend}' (choose from: {', '.join(BACKENDS)})")
    if backend == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise MlsysoptError("--backend ray needs Ray: pip install 'mlsysopt[ray]' (or use --backend local)")


def check_method(method: str) -> None:
    """MlsysoptError for a method name ``place`` does not know."""
    if method not in METHODS:
        raise MlsysoptError(f"unknown method '{method}' (choose from: {', '.join(METHODS)})")


# ---------------------------------------------------------------------------- running
def heft_placement(graph: CompGraph, cluster: DeviceCluster) -> np.ndarray:
    """HEFT's placement (no simulator evaluation)."""
    from mlsysopt.placement.baselines import heft_schedule

    return heft_schedule(graph, cluster)[0]


def run_method(
    method: str,
    graph: CompGraph,
    cluster: DeviceCluster,
    budget: int | None,
    seed: int,
    giph: GiPH | None = None,
    init: np.ndarray | None = None,
) -> PlacementResult:
    """One search by name; ``giph_from_heft`` is GiPH started from HEFT's placement."""
    if method in GIPH_METHODS:
        if giph is None:
            raise MlsysoptError(f"method '{method}' needs --policy policy.pt")
        if method == "giph_from_heft":
            init = heft_placement(graph, cluster)
        result = giph.place(graph, cluster, budget, seed, init)
        result.method = method
        return result
    from mlsysopt.placement.baselines import get_baseline

    return get_baseline(method).place(graph, cluster, budget, seed, init)


def changed_cluster(
    graph: CompGraph, cluster: DeviceCluster, remove: list[str], add: int, seed: int
) -> tuple[DeviceCluster, list[str]]:
    """``cluster`` without the ``remove``d devices and with ``add`` new ones; returns it and the new names.

    New devices are drawn like ``--devices`` clusters (:func:`cluster_for`, in the graph's units, seeded
    from ``seed``) and named ``devK`` with K past every old name, so no new device reuses a removed one's name.
    """
    import numpy as np

    from mlsysopt.graph.generate import cluster_for

    new = cluster
    remove = list(dict.fromkeys(remove))
    if len(remove) >= cluster.num_devices and set(remove) == set(cluster.names):
        raise InvalidCluster(f"--remove names every device of the cluster ({', '.join(remove)}): one must stay")
    for name in remove:
        if name not in cluster.names:
            raise InvalidCluster(f"--remove: no device named '{name}' (have: {', '.join(cluster.names)})")
        new = new.remove_device(name)
    if add <= 0:
        return new, []
    base = new.num_devices
    gen = cluster_for(graph, base + add, seed=seed + 7919)
    names: list[str] = []
    k = cluster.num_devices
    for j in range(add):
        while f"dev{k}" in cluster.names or f"dev{k}" in new.names:
            k += 1
        g = base + j  # the generated device standing in for the new one; 0..base-1 stand in for the kept ones
        supports = np.zeros(new.num_types, bool)
        m = min(new.num_types, gen.num_types)
        supports[:m] = gen.supports[g, :m]
        new = new.add_device(
            float(gen.speed[g]), supports, gen.bandwidth[g, :g].copy(), gen.delay[g, :g].copy(), name=f"dev{k}"
        )
        names.append(f"dev{k}")
    return new, names


def parse_names(text: str | None) -> list[str]:
    """Device names from a comma list."""
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def method_summary(runs: list[PlacementResult], heft_makespan: float, seconds: float) -> dict[str, Any]:
    """Mean/min makespan, ratio to HEFT and steps-to-best of one method over seeds."""
    import numpy as np

    from mlsysopt.report.search import mean_curve

    ms = np.array([r.makespan for r in runs], dtype=np.float64)
    steps = [r.steps_to_best for r in runs]
    return {
        "mean_makespan": float(ms.mean()),
        "min_makespan": float(ms.min()),
        "std_makespan": float(ms.std()),
        "mean_ratio_to_heft": float((ms / heft_makespan).mean()) if heft_makespan > 0 else float("nan"),
        "mean_steps_to_best": float(np.mean(steps)),
        "steps_to_best": steps,
        "makespans": ms.tolist(),
        "evaluations": [r.evaluations for r in runs],
        "seconds": seconds,
        "curve": mean_curve([r.history for r in runs]),
    }


# ---------------------------------------------------------------------------- progress and output
def resume_config(ckpt: Path, given: dict[str, Any], config_type: Any) -> tuple[Any, int]:
    """The saved TrainConfig with --updates/--workers/--backend applied, and the first update to run."""
    from mlsysopt.placement.checkpoint import load_checkpoint

    data = load_checkpoint(ckpt)
    saved = data.get("train_config")
    if not isinstance(saved, dict) or "update" not in data:
        raise MlsysoptError(f"--resume: {ckpt} holds a policy but no training state to continue")
    known = {f.name for f in fields(config_type)}
    merged = {k: v for k, v in saved.items() if k in known}
    for key, value in given.items():
        if key in ("updates", "workers", "backend"):
            merged[key] = value
        elif merged.get(key) != value:
            raise MlsysoptError(
                f"--resume keeps the saved settings: --{key.replace('_', '-')} was {merged.get(key)}, not {value}"
            )
    return config_type(**merged), int(data["update"]) + 1


def print_training(history: list[dict[str, float]], out: Path) -> None:
    from rich.table import Table

    table = Table(title="training", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("data", SYNTHETIC)
    table.add_row("updates", str(len(history)))
    if history:
        k = max(1, min(5, len(history) // 2))
        first = sum(h["improvement"] for h in history[:k]) / k
        last = sum(h["improvement"] for h in history[-k:]) / k
        table.add_row(f"improvement, first {k} updates", f"{first:.1%}")
        table.add_row(f"improvement, last {k} updates", f"{last:.1%}")
        table.add_row("entropy, last update", f"{history[-1]['entropy']:.3f}")
    console.print(table)
    files = ", ".join(escape(str(out / f)) for f in ("policy.pt", "result.json", "training.png"))
    console.print(f"wrote {files}")


def print_compare(result: dict[str, Any], out: Path) -> None:
    from rich.table import Table

    table = Table(
        title=f"{len(result['seeds'])} seed(s), budget {result['budget']} evaluations, CP_MIN {result['cp_min']:.4g}",
        title_justify="left",
    )
    for col in ("method", "mean makespan", "min makespan", "x HEFT", "steps to best", "seconds"):
        table.add_column(col, justify="left" if col == "method" else "right")
    best = min(r["mean_makespan"] for r in result["results"].values())
    for name, r in result["results"].items():
        style = "bold green" if r["mean_makespan"] == best else None
        table.add_row(
            name,
            f"{r['mean_makespan']:.5g}",
            f"{r['min_makespan']:.5g}",
            f"{r['mean_ratio_to_heft']:.3f}",
            f"{r['mean_steps_to_best']:.1f}",
            f"{r['seconds']:.2f}",
            style=style,
        )
    console.print(table)
    for name, why in result["skipped"].items():
        console.print(f"skipped {name}: {why}")
    console.print(f"wrote result.json and search.png to {escape(str(out))}")


def print_adapt(result: dict[str, Any], before: int, after: int, out: Path) -> None:
    from rich.table import Table

    change = ", ".join(
        part
        for part in (
            f"removed {', '.join(result['removed'])}" if result["removed"] else "",
            f"added {', '.join(result['added'])}" if result["added"] else "",
        )
        if part
    )
    table = Table(title=f"{before} -> {after} devices ({change})", title_justify="left")
    table.add_column("placement")
    table.add_column("makespan", justify="right")
    labels = {"giph_adapt": "GiPH adapt", "heft_rerun": "HEFT re-run", "keep": "keep (carry over, no search)"}
    best = min(result["makespans"].values())
    for key, ms in result["makespans"].items():
        table.add_row(labels[key], f"{ms:.5g}", style="bold green" if ms == best else None)
    table.add_row("before the change", f"{result['old_makespan']:.5g}", style="dim")
    console.print(table)
    console.print(f"{len(result['orphaned_tasks'])} task(s) lost their device")
    console.print(f"wrote result.json, placement.json, cluster.json, gantt.png to {escape(str(out))}")
