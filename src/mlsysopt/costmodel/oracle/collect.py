"""``costmodel collect-latency``: a real latency collection measured on this machine, resumable.

Each model of :func:`~mlsysopt.costmodel.oracle.families.plan` is exported to ONNX (TorchScript exporter, dynamic
batch), read into the project's graph IR (:func:`~mlsysopt.graph.importers.onnx.from_onnx`: op, FLOPs, parameters,
bytes per node at batch 1) and timed under every :data:`~mlsysopt.costmodel.oracle.settings.SETTINGS` (ONNX Runtime
with 1-2 intra-op threads, sequential or parallel, spinning off as mlsysopt's serving engine runs it; PyTorch eager
with 1-2 threads; batch 1 and 8), ``rounds`` rounds in random order (:mod:`.timing`).

Round ``r`` of every model is timed in pass ``r`` over all models, so a model's rounds are minutes apart and a slow
phase of a shared machine (seconds long) touches one of them, not all. With every round the job stores the 1-minute
load average and the CPU time other processes used while it was timed (``others_cpu``, in cores, from
``/proc/stat`` less this process's own time). The load average counts the collection's own 1-2 threads;
``others_cpu`` does not, and a round timed while others used more than ``max_others`` cores is timed again at once
(three tries; the model is ``flagged`` when the last was still disturbed). Neither sees a shared VM's host running
slower for minutes (its other tenants are not in ``/proc/stat``), so every round also times a fixed reference
workload (:func:`reference_ms`) and the manifest's ``host_speed`` reports how much it moved during the collection.

Layout of ``out``: ``graphs/<name>.npz`` (one per model, the node table), ``checkpoint.json`` (every finished row),
and at the end ``latency.npz`` (everything packed, what :mod:`.dataset` reads) and ``collection.json`` (the
machine, the settings, the noise floor, the loads).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.collection.job import SPLITS, assign_splits, machine
from mlsysopt.costmodel.oracle.dataset import node_table
from mlsysopt.costmodel.oracle.families import FAMILIES, build, example_input, mflops, plan, spec_name
from mlsysopt.costmodel.oracle.settings import SETTINGS
from mlsysopt.costmodel.oracle.timing import host_speed, reference_ms, runners, time_model
from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.io import RunDir, read_json
from mlsysopt.store.run import RunStore

MANIFEST = "collection.json"
PACKED = "latency.npz"
CHECKPOINT = "checkpoint.json"
MAX_MODELS = 20_000
#: A noise floor above this (issue #32's target) is reported as a warning: the collection should be timed again.
NOISY = 0.03
#: Node columns kept per model (from the graph IR at batch 1).
NODE_COLUMNS = ("flops", "params", "bytes_in", "bytes_out", "out_elems", "groups", "kernel_area", "in_channels",
                "out_channels", "fused")  # fmt: skip
RESUMABLE = ("timeout", "max_others")


def check_options(models: int, rounds: int, families: list[str], timeout: float | None, max_others: float) -> None:
    """InvalidOption naming the first bad option (nothing is built or written)."""
    for name, value, lo, hi in (("--models", models, 1, MAX_MODELS), ("--rounds", rounds, 2, 50)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidOption(f"{name} must be an integer in {lo}..{hi}, got {value!r}")
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        raise InvalidOption(f"--families: unknown or no family {bad[:1]} (choose from: {', '.join(FAMILIES)})")
    if timeout is not None and not (0 < timeout < float("inf")):
        raise InvalidOption(f"--timeout must be a positive number of seconds, got {timeout}")
    if not 0 < max_others <= 64:
        raise InvalidOption(f"--max-others must be in (0, 64] cores, got {max_others}")


def make_plan(models: int, seed: int, families: list[str]) -> list[dict[str, Any]]:
    """Every model the job times, with its ``name`` and ``split`` (deterministic in the arguments)."""

    specs = plan(models, seed, tuple(families))
    out = []
    for spec, split in zip(specs, assign_splits(len(specs), seed), strict=True):
        out.append({"name": spec_name(spec), "split": split, "spec": spec, "mflops": round(mflops(spec), 4)})
    return out


def _busy_jiffies() -> tuple[float, float]:
    """(CPU seconds every process used, CPU seconds this process used) so far."""
    with open("/proc/stat") as fh:
        vals = [float(v) for v in fh.readline().split()[1:]]
    busy = sum(vals) - vals[3] - (vals[4] if len(vals) > 4 else 0.0)  # less idle and iowait
    tick = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return busy / tick, own.user + own.system


def graph_arrays(onnx_path: Path) -> dict[str, np.ndarray]:
    """The node table of an ONNX model at batch 1: ``ops`` (str), ``nodes`` (n, len(NODE_COLUMNS)) and ``edges``
    (``fused``: 1 for a node inside a module PyTorch eager runs as a few kernels, from the file's metadata,
    :mod:`mlsysopt.graph.importers.fused_modules`)."""

    import onnx  # deferred: onnx loads only when a model is collected

    # deferred: imports numba, onnx, scipy, yaml
    from mlsysopt.graph.importers.fused_modules import fused_mask
    from mlsysopt.graph.importers.onnx import from_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = from_onnx(onnx_path)
    base = [g.feature(c) for c in NODE_COLUMNS[:5]]
    # groups, kernel area and channels of convolutions and linear layers (the IR keeps none of them; channels come
    # from the weight's shape): graph nodes follow the file's inputs, then its nodes in order, then one output node
    model = onnx.load(str(onnx_path), load_external_data=False)
    inits = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}
    first = len({i.name for i in model.graph.input} - set(inits))
    groups, area = np.ones(g.num_nodes), np.ones(g.num_nodes)
    cin, cout = np.zeros(g.num_nodes), np.zeros(g.num_nodes)
    fused = np.zeros(g.num_nodes)
    fused[first : first + len(model.graph.node)] = fused_mask(model)
    for k, node in enumerate(model.graph.node):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        w = inits.get(node.input[1]) if len(node.input) > 1 else None
        if node.op_type == "Conv":
            groups[first + k] = float(attrs.get("group", 1))
            area[first + k] = float(np.prod(attrs.get("kernel_shape", [1])))
            if w is not None and len(w) >= 2:
                cout[first + k], cin[first + k] = w[0], w[1] * groups[first + k]
        elif node.op_type in ("Gemm", "MatMul") and w is not None and len(w) == 2:
            k_in, n_out = (w[1], w[0]) if attrs.get("transB", 0) else w
            cin[first + k], cout[first + k] = k_in, n_out
    cols = [*base, groups, area, cin, cout, fused]
    return {"ops": np.array(g.ops, dtype=str), "nodes": np.stack(cols, axis=1).astype(np.float64),
            "edges": np.asarray(g.edge_index, np.int32)}  # fmt: skip


def read_onnx(onnx_path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ops, node table, edges)`` of an ONNX model at batch 1, the node table in
    :data:`~mlsysopt.costmodel.oracle.dataset.COLUMNS` order (what the predictors read).

    Shapes:
        returns (n,) str, (n, len(COLUMNS)) float64, (2, e) int
    """

    a = graph_arrays(Path(onnx_path))
    return a["ops"], node_table(a["nodes"], list(NODE_COLUMNS)), a["edges"]


def measure_model(item: dict[str, Any], seed: int, folder: Path, round_index: int = 0,
                  max_others: float = 64.0, tries: int = 3) -> tuple[dict[str, np.ndarray], dict]:  # fmt: skip
    """Export, import and time one round of one model: its node table and the round (``ms`` per setting, the load,
    the CPU other processes used). A round others disturbed (more than ``max_others`` cores) is timed again, up to
    ``tries`` times in all."""
    # deferred: imports numba, onnx, scipy, yaml
    from mlsysopt.graph.importers.onnx import export_onnx

    rng = np.random.default_rng([seed, zlib.crc32(item["name"].encode()), round_index])
    module, x = build(item["spec"])
    path = export_onnx(module, (x,), folder / "model.onnx", dynamic_batch=True)
    arrays = graph_arrays(path)
    inputs = {b: example_input(item["spec"], b) for b in sorted({s.batch for s in SETTINGS})}
    run = runners(module, path, inputs, SETTINGS)
    for _ in range(tries):
        load0, ref = os.getloadavg()[0], reference_ms()
        busy0, own0, t0 = *_busy_jiffies(), time.perf_counter()
        times = time_model(run, 1, rng)
        busy1, own1, t1 = *_busy_jiffies(), time.perf_counter()
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(t1 - t0, 1e-9)
        if others <= max_others:
            break
    one = {"ms": {k: round(v[0] * 1e3, 6) for k, v in times.items()}, "seconds": round(t1 - t0, 3),
           "load_1min": round(load0, 2), "others_cpu": round(others, 3), "reference_ms": round(ref, 5)}  # fmt: skip
    return arrays, one


def _row(item: dict[str, Any], nodes: int, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A model's row from its rounds: the median per setting, every round, the worst load and disturbance."""
    keys = list(rounds[0]["ms"])
    return {"name": item["name"], "split": item["split"], "family": item["spec"]["family"], "spec": item["spec"],
            "mflops": item["mflops"], "nodes": nodes,
            "ms": {k: float(np.median([r["ms"][k] for r in rounds])) for k in keys},
            "rounds_ms": {k: [r["ms"][k] for r in rounds] for k in keys},
            "seconds": round(sum(r["seconds"] for r in rounds), 3),
            "load_1min": max(r["load_1min"] for r in rounds), "load_1min_rounds": [r["load_1min"] for r in rounds],
            "others_cpu": max(r["others_cpu"] for r in rounds), "machine": machine(),
            "reference_ms_rounds": [r.get("reference_ms") for r in rounds]}  # fmt: skip


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def noise_floor(rows: list[dict[str, Any]]) -> float:
    """Median relative gap between two rounds of the same model and setting: ``|a - b| / mean(a, b)``."""
    gaps = [abs(v[0] - v[1]) / (0.5 * (v[0] + v[1])) for r in rows for v in r["rounds_ms"].values() if len(v) > 1]
    return float(np.median(gaps)) if gaps else float("nan")


def collect_latency(
    out: str | Path,
    models: int = 1100,
    rounds: int = 2,
    seed: int = 0,
    families: list[str] | tuple[str, ...] = FAMILIES,
    timeout: float | None = None,
    resume: bool = False,
    max_others: float = 0.25,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time ``models`` generated models under every setting on this machine into ``out`` (module docstring).

    Args:
        out: Run folder to write.
        models: Distinct models to time, 1..MAX_MODELS.
        rounds: Timing rounds per setting (the noise floor compares rounds), 2..50.
        seed: Seed of the models, the splits and the visiting order.
        families: Model families (:data:`~mlsysopt.costmodel.oracle.families.FAMILIES`).
        timeout: Seconds after which the job stops (``resume=True`` continues), None for no limit.
        resume: Continue an interrupted collection in ``out``.
        max_others: Cores other processes may use while a model is timed before it is timed again.
        log: Called with one line of progress text (None: silent).

    Returns:
        dict[str, Any]: The manifest; ``complete`` is False when ``timeout`` stopped it.

    Raises:
        InvalidOption: For an option out of range.
    """

    families = list(families)
    check_options(models, rounds, families, timeout, max_others)
    settings = {"command": "costmodel collect-latency", "models": models, "rounds": rounds, "seed": seed,
                "families": families, "timeout": timeout, "max_others": max_others}  # fmt: skip
    run = RunDir(out, settings, resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT, sink=RunStore).check()
    saved = run.load_checkpoint() if resume else {}
    items = saved["plan"] if isinstance(saved.get("plan"), list) else make_plan(models, seed, families)
    deadline = None if timeout is None else time.monotonic() + timeout
    with run, tempfile.TemporaryDirectory(prefix="mlsysopt-latency-") as tmp:
        state = saved or {"rounds": {}, "nodes": {}, "started": _now()}
        state["plan"] = items
        got: dict[str, list[dict[str, Any]]] = state["rounds"]
        total = len(items) * rounds
        if log is not None:
            log(
                f"{len(items)} models x {len(SETTINGS)} settings x {rounds} rounds (one pass over every model per "
                f"round) on {machine()}; {sum(map(len, got.values()))} of {total} model-rounds already timed"
            )
        t_start, n_start = time.monotonic(), sum(map(len, got.values()))
        stopped = False
        # Round r of every model is timed in pass r: a model's rounds are minutes apart, so a slow phase of the
        # machine (seconds long on a shared VM) touches one of its rounds, not all of them.
        for r in range(rounds):
            for k, item in enumerate(items):
                if len(got.get(item["name"], [])) > r:
                    continue
                if deadline is not None and time.monotonic() > deadline and sum(map(len, got.values())) > n_start:
                    stopped = True
                    break
                _one(item, seed, r, Path(tmp), run, state, max_others)
                run.save_checkpoint(state)
                n = sum(map(len, got.values()))
                if log is not None and (k % 50 == 0 or k == len(items) - 1):
                    rate = (time.monotonic() - t_start) / max(1, n - n_start)
                    one = got[item["name"]][-1]
                    log(f"round {r + 1}/{rounds}, {k + 1}/{len(items)} {item['name']}: "
                        f"{one['ms']['ort-t1-seq-b1']:.3f} ms (ort, 1 thread), load {one['load_1min']}, others "
                        f"{one['others_cpu']:.2f} cores; about {(total - n) * rate / 60:.0f} min left")  # fmt: skip
            if stopped:
                break
        rows = [_row(i, state["nodes"][i["name"]], got[i["name"]]) for i in items if i["name"] in got]
        for row in rows:
            row["flagged"] = row["others_cpu"] > max_others
        complete = all(len(got.get(i["name"], [])) == rounds for i in items)
        manifest = _manifest(settings, rows, state, complete, max_others)
        if complete:
            pack(run.path, items, {row["name"]: row for row in rows})
        run.write_json(MANIFEST, manifest)
    return manifest


def _one(item: dict[str, Any], seed: int, r: int, tmp: Path, run: Any, state: dict[str, Any],
         max_others: float) -> None:  # fmt: skip
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.data.tpugraphs import save_npz

    try:
        arrays, one = measure_model(item, seed, tmp, r, max_others)
    except MlsysoptError as exc:
        raise MlsysoptError(f"model {item['name']} ({json.dumps(item['spec'])}): {exc}") from None
    if item["name"] not in state["nodes"]:
        save_npz(run.file("graphs") / f"{item['name']}.npz", arrays)
        state["nodes"][item["name"]] = int(arrays["ops"].size)
    state["rounds"].setdefault(item["name"], []).append(one)


def refeature(folder: Path, log: Callable[[str], None] | None = None) -> Path:
    """Rebuild every model's node table of a finished collection from its spec (export and read again; the times
    are kept) and pack it again: how a collection gains node columns added after it was timed.

    Raises:
        MlsysoptError: If a rebuilt model's graph differs from the one timed (another op sequence).
    """
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.data.tpugraphs import save_npz

    # deferred: imports numba, onnx, scipy, yaml
    from mlsysopt.graph.importers.onnx import export_onnx

    folder = Path(folder)
    state = read_json(folder / CHECKPOINT, MlsysoptError)
    items = state["plan"]
    done = state.get("done") or {i["name"]: _row(i, state["nodes"][i["name"]], state["rounds"][i["name"]])
                                 for i in items}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mlsysopt-refeature-") as tmp:
        for k, item in enumerate(items):
            old = np.load(folder / "graphs" / f"{item['name']}.npz")
            module, x = build(item["spec"])
            arrays = graph_arrays(export_onnx(module, (x,), Path(tmp) / "model.onnx", dynamic_batch=True))
            if list(arrays["ops"]) != [str(o) for o in old["ops"]]:
                raise MlsysoptError(f"model {item['name']}: rebuilt with other ops than it was timed with")
            save_npz(folder / "graphs" / f"{item['name']}.npz", arrays)
            if log is not None and k % 100 == 0:
                log(f"{k}/{len(items)}")
    return pack(folder, items, done)


def pack(folder: Path, items: list[dict[str, Any]], done: dict[str, Any]) -> Path:
    """Write every model's node table and latencies into one compressed ``latency.npz`` (what :mod:`.dataset`
    reads): node tables concatenated with offsets, op names as ids into a vocabulary, rows as JSON."""
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.data.tpugraphs import save_npz

    ops_vocab: dict[str, int] = {}
    op_ids, nodes, edges, node_off, edge_off = [], [], [], [0], [0]
    for item in items:
        z = np.load(folder / "graphs" / f"{item['name']}.npz")
        op_ids.append(np.array([ops_vocab.setdefault(str(o), len(ops_vocab)) for o in z["ops"]], np.int16))
        nodes.append(z["nodes"].astype(np.float32))
        edges.append(z["edges"].astype(np.int32))
        node_off.append(node_off[-1] + z["ops"].size)
        edge_off.append(edge_off[-1] + z["edges"].shape[1])
    rows = [{k: v for k, v in done[i["name"]].items()} for i in items]
    return save_npz(folder / PACKED, {
        "op_vocab": np.array(list(ops_vocab), dtype=str), "op_ids": np.concatenate(op_ids),
        "nodes": np.concatenate(nodes), "node_columns": np.array(NODE_COLUMNS, dtype=str),
        "edges": np.concatenate(edges, axis=1), "node_offsets": np.array(node_off, np.int64),
        "edge_offsets": np.array(edge_off, np.int64), "rows": np.array(json.dumps(rows)),
        "settings": np.array([s.key for s in SETTINGS], dtype=str),
    })  # fmt: skip


def _manifest(settings: dict[str, Any], rows: list[dict[str, Any]], state: dict[str, Any], complete: bool,
              max_others: float) -> dict[str, Any]:  # fmt: skip
    loads = [r["load_1min"] for r in rows]
    others = [r["others_cpu"] for r in rows]
    return {
        "data": f"real, measured on {machine()}",
        "machine": machine(),
        "started": state.get("started"),
        "updated": _now(),
        "complete": complete,
        "settings": {k: v for k, v in settings.items() if k != "timeout"},
        "recorded_settings": [s.key for s in SETTINGS],
        "units": {"ms": "milliseconds per inference (median of single runs, then median over rounds)"},
        "models": len(rows),
        "families": {f: sum(r["family"] == f for r in rows) for f in FAMILIES},
        "splits": {s: sum(r["split"] == s for r in rows) for s, _ in SPLITS},
        "noise_floor": noise_floor(rows) if rows else None,
        "noise_floor_note": "median |round 1 - round 2| / mean over every model and setting",
        "load_1min": {
            "median": float(np.median(loads)) if loads else None,
            "max": float(max(loads)) if loads else None,
            "note": "1-minute load average when each model's timing began; it includes the collection's own 1-2 "
            "threads (2 cores)",
        },
        "others_cpu": {
            "median": float(np.median(others)) if others else None,
            "max": float(max(others)) if others else None,
            "flagged": sum(o > max_others for o in others),
            "limit": max_others,
            "note": "cores used by other processes while a model was timed",
        },
        "host_speed": host_speed(rows),
        "rounds_apart": "round r of every model is timed in pass r over all models",
        "seconds": round(sum(r["seconds"] for r in rows), 1),
    }
