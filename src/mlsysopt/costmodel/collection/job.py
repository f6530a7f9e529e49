"""``costmodel collect``: a real cost-model dataset, measured on this machine, written in the TpuGraphs layout.

For each graph of the plan (:mod:`.families`, plus the user's ``--source`` models) the job draws configurations
(:mod:`.engines`), times every one of them ``rounds`` times (:func:`~.engines.time_configs`: rounds in random
order, warm-up before each visit) and writes ``OUT/{train,valid,test}/<graph>.npz`` with the published layout keys
plus measurement keys:

* ``config_runtime`` (c,) int64: the **fastest** round, in nanoseconds (the published unit): interference on a
  shared machine only ever adds time, so the least disturbed round is the best estimate (on this project's 2-core
  machine identical configurations agreed within a median 5.3% this way, 8.2% with the median of the rounds);
  ``config_runtime_median`` (c,) the median;
* ``config_runtime_repeats`` (c, rounds) float32 ns: every round's time;
* ``config_runtime_ci`` (c, 2) float32 ns: the smallest and largest round, a distribution-free interval for the
  median with coverage ``1 - 2 ** (1 - rounds)`` (99.2% for the default 8 rounds);
* ``config_choices`` (c, choices) int16: the raw choices (one memory format per convolution, then threads; or the
  ONNX Runtime level, threads and mode), ``graph_spec`` (JSON), ``engine`` and ``machine`` (strings).

The folder is a run folder (:class:`mlsysopt.io.RunDir`): inputs are checked first; each finished graph is
written atomically and recorded in ``checkpoint.json``; ``timeout`` stops between graphs and ``resume`` continues
with the graphs still missing (the plan is rebuilt from the same settings, so it is the same plan).
``collection.json`` describes the dataset (machine, date, settings, units, every graph, the noise floor measured
on repeats of the default configuration) and says in its ``data`` field: *real, measured on <machine>*.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shutil
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.costmodel.collection.families import FAMILIES, build, plan, spec_name
from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.io import RunDir, read_json
from mlsysopt.store.run import RunStore

MANIFEST = "collection.json"
CHECKPOINT = "checkpoint.json"
SPLITS = (("train", 0.7), ("valid", 0.15), ("test", 0.15))
MAX_GRAPHS = 20_000
MAX_CONFIGS = 4096
RESUMABLE = ("timeout",)


def machine() -> str:
    """One line naming this machine: CPU model, logical cores, memory, OS, torch and ONNX Runtime versions."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    import onnxruntime  # deferred: onnxruntime loads only when its version is recorded

    return (f"{cpu} ({os.cpu_count()} logical cores{mem}), {platform.system()} {platform.release()}, "
            f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}")  # fmt: skip


def _engine(spec: dict[str, Any], name: str, threads: tuple[int, ...] = (1, 2)) -> Any:
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.collection.engines import OrtEngine, TorchEngine

    if spec.get("family") == "source" and str(spec["source"]).lower().endswith(".onnx"):
        return OrtEngine(spec["source"], name, threads)
    module, inputs = build(spec)
    return TorchEngine(module, inputs, name, threads)


def _mflops(spec: dict[str, Any]) -> float:
    """Million FLOPs of the convolutions and linear layers of one forward pass (counted by hooks on the meta
    device: shapes only, nothing is computed)."""

    with torch.device("meta"):  # built with meta tensors: no weight initialisation either
        module, inputs = build(spec)
    total = [0.0]

    def count(mod: nn.Module, _inp: Any, out: torch.Tensor) -> None:
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            total[0] += 2.0 * out.numel() * k
        elif isinstance(mod, nn.Linear):
            total[0] += 2.0 * out.numel() * mod.in_features

    hooks = [m.register_forward_hook(count) for m in module.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return total[0] / 1e6


def assign_splits(n: int, seed: int) -> list[str]:
    """The split of each of ``n`` items: a seeded permutation cut by :data:`SPLITS`' fractions (70/15/15)."""
    rank = np.empty(n, np.int64)
    rank[np.random.default_rng([seed, 1]).permutation(n)] = np.arange(n)
    cuts = np.cumsum([f for _, f in SPLITS]) * n
    return [next((s for (s, _), cut in zip(SPLITS, cuts, strict=True) if r < cut), "test") for r in rank]


def make_plan(graphs: int, seed: int, families: Sequence[str], sources: Sequence[str]) -> list[dict[str, Any]]:
    """Every graph the job measures, with its ``name`` and ``split`` (deterministic in the arguments)."""
    specs = plan(graphs, seed, tuple(families), mflops=_mflops) if graphs else []
    specs += [{"family": "source", "source": str(s)} for s in sources]
    out = []
    for spec, split in zip(specs, assign_splits(len(specs), seed), strict=True):
        name = f"real_{spec_name(spec)}" if spec["family"] != "source" else f"real_source_{Path(spec['source']).stem}"
        out.append({"name": name, "split": split, "spec": spec})
    names = [p["name"] for p in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InvalidOption(f"--source: two sources give the graph name '{dup}': rename one of the files")
    return out


def check_options(graphs: int, configs: int, rounds: int, families: Sequence[str], sources: Sequence[str],
                  timeout: float | None) -> None:  # fmt: skip
    """InvalidOption naming the first bad option (nothing is built or written)."""
    for name, value, lo, hi in (("--graphs", graphs, 0, MAX_GRAPHS), ("--configs", configs, 4, MAX_CONFIGS),
                                ("--rounds", rounds, 3, 1000)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidOption(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise InvalidOption(f"--families: unknown family '{bad[0]}' (choose from: {', '.join(FAMILIES)})")
    if graphs and not families:
        raise InvalidOption("--families is empty: name at least one family, or pass --graphs 0 with --source")
    if graphs == 0 and not sources:
        raise InvalidOption("nothing to collect: --graphs 0 and no --source")
    if timeout is not None and not (0 < timeout < float("inf")):
        raise InvalidOption(f"--timeout must be a positive number of seconds, got {timeout}")


def measure_graph(item: dict[str, Any], configs: int, rounds: int, seed: int,
                  threads: tuple[int, ...] = (1, 2)) -> tuple[dict[str, np.ndarray], dict]:  # fmt: skip
    """Build, configure and time one graph: its ``.npz`` arrays and its summary row."""
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.collection.engines import time_configs

    rng = np.random.default_rng([seed, zlib.crc32(item["name"].encode())])
    load_before = os.getloadavg()[0]
    engine = _engine(item["spec"], item["name"], threads)
    arrays = engine.arrays()
    choices = engine.draw(configs, rng)
    t0 = time.perf_counter()
    times = time_configs(engine, choices, rounds, rng) * 1e9  # ns
    median, fastest = np.median(times, axis=1), times.min(axis=1)
    arrays |= {
        "node_config_feat": engine.features(choices),
        "config_runtime": np.maximum(1, np.rint(fastest)).astype(np.int64),
        "config_runtime_median": median,
        "config_runtime_repeats": times.astype(np.float32),
        "config_runtime_ci": np.stack([times.min(1), times.max(1)], axis=1).astype(np.float32),
        "config_choices": choices.astype(np.int16),
        "graph_spec": np.array(json.dumps(item["spec"], sort_keys=True)),
        "engine": np.array(engine.name),
    }
    dup = np.flatnonzero((choices == choices[0]).all(axis=1))
    noise = float(np.median(np.abs(fastest[dup[1:]] / fastest[0] - 1))) if dup.size > 1 else float("nan")
    row = {"name": item["name"], "split": item["split"], "family": item["spec"]["family"], "engine": engine.name,
           "nodes": int(arrays["node_feat"].shape[0]), "configurable": int(arrays["node_config_ids"].size),
           "configs": int(configs), "fastest_ms": float(fastest.min() / 1e6),
           "slowest_ms": float(fastest.max() / 1e6), "default_ms": float(fastest[0] / 1e6),
           "median_ci_rel": float(np.median((times.max(1) - times.min(1)) / median)),
           "repeat_of_default_rel_diff": noise, "seconds": time.perf_counter() - t0,
           "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]}  # fmt: skip
    return arrays, row


def collect(
    out: str | Path,
    graphs: int = 240,
    configs: int = 48,
    rounds: int = 8,
    seed: int = 0,
    families: Sequence[str] = FAMILIES,
    sources: Sequence[str] = (),
    timeout: float | None = None,
    resume: bool = False,
    threads: Sequence[int] = (1, 2),
    progress: Callable[[int, int, str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure ``graphs`` generated graphs (and ``sources``) x ``configs`` configurations x ``rounds`` rounds on this
    machine into the data root ``out`` (see the module docstring); returns the manifest (``complete`` False when the
    ``timeout`` stopped it: ``resume=True`` continues).

    Args:
        out: Data root to write.
        graphs: Generated graphs to measure, >= 0.
        configs: Configurations per graph.
        rounds: Timing rounds per configuration.
        seed: Seed of the graphs and configurations.
        families: Model families to generate from (``zoo``, ``nas``, ``vgg``, ``resnet``, ``mobilenet``,
            ``inception``).
        sources: Your own models (ONNX or PyTorch sources) measured besides.
        timeout: Seconds after which collection stops, > 0 (None: no limit).
        resume: Continue an interrupted collection in ``out``.
        threads: Thread counts the configurations choose from, each in 1..cpu count.
        progress: Called with ``(done, total, graph name)`` after each graph (None: not called).
        log: Called with one line of progress text (None: silent).

    Returns:
        dict[str, Any]: The manifest; ``complete`` is False when ``timeout`` stopped it.

    Raises:
        InvalidOption: For counts, families, threads or timeout out of range, or nothing to collect.
    """
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.data.tpugraphs import save_npz

    families, sources = list(families), [str(s) for s in sources]
    check_options(graphs, configs, rounds, families, sources, timeout)
    cpus = os.cpu_count() or 1
    if not threads or any(isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= cpus for t in threads):
        raise InvalidOption(f"--threads {list(threads)}: thread counts must be integers in 1..{cpus} (this machine)")
    threads = tuple(sorted(set(threads)))
    settings = {"command": "costmodel collect", "graphs": graphs, "configs": configs, "rounds": rounds, "seed": seed,
                "families": families, "sources": sources, "threads": list(threads), "timeout": timeout}  # fmt: skip
    run = RunDir(out, settings, resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT, sink=RunStore).check()
    saved = run.load_checkpoint() if resume else {}
    for src in sources:  # a user's model that cannot be measured fails now, before the plan and the folder exist
        _engine({"family": "source", "source": src}, f"real_source_{Path(src).stem}", threads)
    # the plan is drawn once (it traces every candidate graph to bound its FLOPs) and kept in the checkpoint
    items = saved["plan"] if isinstance(saved.get("plan"), list) else make_plan(graphs, seed, families, sources)
    deadline = None if timeout is None else time.monotonic() + timeout
    with run:
        state = saved or {"done": {}, "started": _now()}
        state["plan"] = items
        done: dict[str, Any] = state["done"]
        started_with = len(done)
        if log is not None:
            log(f"{len(items)} graphs x {configs} configurations x {rounds} rounds on {machine()}; "
                f"{len(done)} already measured")  # fmt: skip
        for k, item in enumerate(items):
            if item["name"] in done:
                continue
            if deadline is not None and time.monotonic() > deadline and len(done) > started_with:
                break  # checked before each new graph, so every start measures at least one
            try:
                arrays, row = measure_graph(item, configs, rounds, seed, threads)
            except MlsysoptError as exc:
                raise MlsysoptError(f"graph {item['name']} ({json.dumps(item['spec'])}): {exc}") from None
            arrays["machine"] = np.array(machine())
            save_npz(run.file(item["split"]) / f"{item['name']}.npz", arrays)
            done[item["name"]] = row
            run.save_checkpoint(state | {"done": done})
            if progress is not None:
                progress(len(done), len(items), item["name"])
            if log is not None and k % 10 == 0:
                log(f"{len(done)}/{len(items)} {item['name']}: {row['nodes']} nodes, fastest "
                    f"{row['fastest_ms']:.3f} ms, slowest {row['slowest_ms']:.3f} ms")  # fmt: skip
        manifest = _manifest(settings, items, done, state)
        run.write_json(MANIFEST, manifest)
    return manifest


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _manifest(settings: dict[str, Any], items: list[dict[str, Any]], done: dict[str, Any],
              state: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    rows = [done[i["name"]] for i in items if i["name"] in done]
    noise = [r["repeat_of_default_rel_diff"] for r in rows if np.isfinite(r["repeat_of_default_rel_diff"])]
    loads = [r["load_1min"][0] for r in rows if "load_1min" in r]
    rounds = settings["rounds"]
    return {
        "data": f"real, measured on {machine()}",
        "format": "TpuGraphs layout (.npz per graph in {train,valid,test}/) plus measurement keys",
        "machine": machine(),
        "started": state.get("started"),
        "updated": _now(),
        "complete": len(rows) == len(items),
        "settings": {k: v for k, v in settings.items() if k != "timeout"},
        "units": {
            "config_runtime": "ns (fastest of the rounds)",
            "config_runtime_median": "ns",
            "config_runtime_repeats": "ns",
            "config_runtime_ci": "ns",
        },
        "interval": f"[min, max] over {rounds} rounds: covers the median with probability "
        f"{1 - 2.0 ** (1 - rounds):.4f}",
        "noise_floor": {
            "repeat_of_default_rel_diff_median": float(np.median(noise)) if noise else None,
            "graphs": len(noise),
        },
        "interval_width_rel_median": float(np.median([r["median_ci_rel"] for r in rows])) if rows else None,
        "load_1min": {
            "median": float(np.median(loads)) if loads else None,
            "range": [float(min(loads)), float(max(loads))] if loads else None,
            "note": "1-minute load average when each graph's measurement started (the machine has 2 cores)",
        },
        "splits": {s: sum(r["split"] == s for r in rows) for s, _ in SPLITS},
        "graphs": rows,
    }


def ship(src: str | Path, dst: str | Path, max_mb: float = 6.0) -> dict[str, Any]:
    """Copy a finished collection's data (splits and ``collection.json``, not the run folder's bookkeeping) to
    ``dst``, refusing one bigger than ``max_mb``: how the ``real:cpu`` copy shipped with mlsysopt is made."""

    src, dst = Path(src), Path(dst)
    manifest = read_json(src / MANIFEST, InvalidOption)
    if not manifest.get("complete"):
        raise InvalidOption(f"{src}: the collection is not complete (run it again with --resume)")
    files = [p for split, _ in SPLITS for p in sorted((src / split).glob("*.npz"))]
    size = sum(p.stat().st_size for p in files) / 2**20
    if size > max_mb:
        raise InvalidOption(f"{src}: {size:.1f} MB of graphs, above the {max_mb:g} MB the shipped copy may take")
    if dst.exists():
        shutil.rmtree(dst)
    for p in files:
        (dst / p.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, dst / p.parent.name / p.name)
    shutil.copy2(src / MANIFEST, dst / MANIFEST)
    return {"graphs": len(files), "mb": round(size, 2), "to": str(dst)}
