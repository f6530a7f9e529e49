"""GST+EFD benchmark in GST's regime: step memory and time vs graph size, quality of every mode and of the trees
baseline on large graphs, and an ablation of the stale-history fixes.

All data is SYNTHETIC (the real TpuGraphs cannot be downloaded here): layout graphs from the realistic generator
(``mlsysopt.costmodel.data.realistic``: clustered, heavy-tailed runtimes with ties and a noise floor), written in
the published ``.npz`` format by ``mlsysopt.costmodel.synth``.

* ``memory_mb``: peak tensor memory of ONE training step (PyTorch's own accounting, ``mlsysopt.costmodel.memory``)
  on single graphs of about 5k, 50k and 500k nodes, segment size 1000, 2 configurations per step, for full-graph
  training and GST; ``step_s`` the step's seconds for full, gst and gst+e (gst+e: its second step, which reads the
  table the first one filled).
* ``quality``: every mode (full, gst, gst+e, gst+ef, gst+efd) and the trees baseline trained on the same training
  graphs, ``--seeds`` seeds each, evaluated on the held-out test graphs with every segment computed fresh. ``opa``
  is the mean over seeds and graphs; ``opa_ci`` the 95% t-interval over test graphs of each graph's seed-mean OPA;
  ``opa_per_seed`` each seed's mean; ``step_s`` seconds per optimizer step and ``peak_step_mb`` per mode.
* ``ablation``: gst+efd with the stale-history fixes taken away one at a time (the reference's policy: history
  rows keyed by (configuration, segment), segments sampled uniformly, no refresh; then signature rows; then
  sampling where the step's configurations differ; the default adds the no-grad refresh of those segments) and the
  reference's embedding readout instead of the per-segment scalar one, and k = 1 (the paper's) instead of k = 16.
* ``malnet_accuracy``: full vs gst+efd test accuracy on SYNTHETIC MalNet-like graphs (5 generative families).

    python benchmarks/gst.py [--quick] [--seeds 3] [--ablation-seeds 2] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel import MODES, TrainConfig, host_rss_mb, layout_record, one_step, synth, train
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.realistic import realistic_layout_graph
from mlsysopt.io import write_json_atomic
from mlsysopt.report.costmodel import plot_memory_scaling, plot_training
from mlsysopt.runtime.threads import torch_threads

FULL: dict[str, Any] = {
    "mem_nodes": [5_000, 50_000, 500_000],
    "layout": {"train": 32, "valid": 4, "test": 32, "nodes": (20_000, 100_000), "configs": 300},
    "segment_size": 400,
    "k": 16,
    "configs_per_graph": 16,
    "epochs": 12,
    "finetune_epochs": 2,
    "hidden": 32,
    "layers": 3,
    "lr": 3e-3,
    "malnet": {"per_class": 8, "nodes": (5_000, 20_000), "epochs": 6, "finetune_epochs": 4},
}
QUICK: dict[str, Any] = FULL | {
    "mem_nodes": [2_000, 20_000, 200_000],
    "layout": {"train": 6, "valid": 1, "test": 4, "nodes": (3_000, 8_000), "configs": 100},
    "segment_size": 200,
    "k": 8,
    "epochs": 2,
    "finetune_epochs": 1,
    "malnet": {"per_class": 3, "nodes": (1_000, 3_000), "epochs": 2, "finetune_epochs": 1},
}
SEGMENT_SIZE_MEM = 1000
KEY = {"full": "full", "gst": "gst", "gst+e": "gst_e", "gst+ef": "gst_ef", "gst+efd": "gst_efd", "trees": "trees"}
#: gst+efd variants of the ablation: name -> options changed from the defaults
ABLATION: dict[str, dict[str, Any]] = {
    "reference": {"history_key": "config", "sample": "uniform", "refresh": "none"},
    "signature_rows": {"sample": "uniform", "refresh": "none"},
    "signature_rows+varying_sample": {"refresh": "none"},
    "default": {},
    "default+embedding_readout": {"readout": "embedding"},
    "default_k=1": {"k": 1},
}
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 20: 2.086, 30: 2.042, 60: 2.0, 120: 1.98}


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile (table, nearest df at or below; normal beyond)."""
    if df < 1:
        return math.nan
    return T95[max(k for k in T95 if k <= df)] if df <= 120 else 1.96


def mean_ci(values: list[float]) -> list[float]:
    """``[low, high]`` 95% t-interval of the mean of ``values`` (NaN entries dropped)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], np.float64)
    if v.size < 2:
        return [math.nan, math.nan]
    half = t95(v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return [float(v.mean() - half), float(v.mean() + half)]


def memory_part(cfg: dict[str, Any], seed: int, threads: int, log: Any) -> dict[str, Any]:
    """Peak step tensor memory (full, gst) and step seconds (full, gst, gst+e) on one graph per size."""
    out: dict[str, Any] = {"nodes": [], "full": [], "gst": [], "host_rss_mb": [], "segments": []}
    out["step_s"] = {"full": [], "gst": [], "gst_e": []}
    for n in cfg["mem_nodes"]:
        rec = layout_record(realistic_layout_graph(n, 2, np.random.default_rng([seed, n])), f"synthetic_mem_{n}")
        out["nodes"].append(rec.num_nodes)
        for mode in ("full", "gst", "gst+e"):
            steps = 2 if mode == "gst+e" else 1  # gst+e: the second step, which reads the table
            with torch_threads(threads):
                trainer = one_step(rec, mode, SEGMENT_SIZE_MEM, seed=seed, steps=steps)
            last = trainer.history[-1]
            out["step_s"][KEY[mode]].append(last["epoch_s"])
            if mode in ("full", "gst"):
                out[mode].append(last["peak_step_mb"])
            if mode == "gst":
                out["segments"].append(trainer.segmenter(rec).num_segments)
            log(f"memory: {n:>7,} nodes {mode:>5}: {last['peak_step_mb']:9.1f} MB, step {last['epoch_s']:.3f} s")
            del trainer
        out["host_rss_mb"].append(host_rss_mb())
    out["gst_growth"] = out["gst"][-1] / out["gst"][0]
    out["full_growth"] = out["full"][-1] / out["full"][0]
    out["gst_e_step_growth"] = out["step_s"]["gst_e"][-1] / out["step_s"]["gst_e"][0]
    return out


def _run(root: Path, mode: str, cfg: dict[str, Any], seed: int, threads: int, **over: Any) -> dict[str, Any]:
    """One training run on ``root``; its test metrics, per-graph OPA, step seconds and peak step memory."""
    model = {"hidden": cfg["hidden"], "layers": cfg["layers"], "readout": over.pop("readout", "auto")}
    over.setdefault("k", cfg["k"])
    tc = TrainConfig(mode=mode, segment_size=cfg["segment_size"], epochs=cfg["epochs"], seed=seed, lr=cfg["lr"],
                     finetune_epochs=cfg["finetune_epochs"], configs_per_graph=cfg["configs_per_graph"],
                     validate_every=max(1, cfg["epochs"]), **over)  # fmt: skip
    t0 = time.perf_counter()
    r = train(root, config=tc, threads=threads, **model) if mode != "trees" else train(root, config=tc)
    train_eps = [h for h in r["history"] if h.get("phase") == "train"]
    steps = cfg["layout"]["train"] * max(1, len(train_eps)) if mode != "trees" else 1
    return {"test": r["test"], "per_graph": r["test_opa_per_graph"], "history": r["history"],
            "step_s": sum(h["epoch_s"] for h in train_eps) / steps, "peak_step_mb": r["peak_step_mb"],
            "seconds": time.perf_counter() - t0, "table_mb": r["table_mb"]}  # fmt: skip


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names = list(runs[0]["per_graph"])
    per_graph = [statistics.mean(r["per_graph"][n] for r in runs) for n in names]
    mean = lambda key: statistics.mean(r["test"][key] for r in runs)  # noqa: E731
    return {
        "opa": mean("opa"),
        "opa_ci": mean_ci(per_graph),
        "kendall": mean("kendall"),
        "slowdown_top1": mean("slowdown_top1"),
        "slowdown_top5": mean("slowdown_top5"),
        "opa_per_seed": [r["test"]["opa"] for r in runs],
        "step_s": statistics.mean(r["step_s"] for r in runs),
        "peak_step_mb": max(r["peak_step_mb"] for r in runs),
        "table_mb": max(r["table_mb"] for r in runs),
        "run_s": statistics.mean(r["seconds"] for r in runs),
    }


def quality_part(cfg: dict[str, Any], seeds: int, seed: int, threads: int, root: Path, ablation_seeds: int,
                 log: Any, modes: tuple[str, ...] = (*MODES, "trees")) -> dict[str, Any]:  # fmt: skip
    """Every mode and the trees baseline (``seeds`` seeds), then the gst+efd variants (``ablation_seeds``)."""
    quality: dict[str, Any] = {}
    histories: dict[str, list] = {}
    for mode in modes:
        runs = []
        for s in range(seeds):  # trees too: its feature subsampling depends on the seed
            r = _run(root, mode, cfg, seed + s, threads)
            runs.append(r)
            if s == 0 and mode != "trees":
                histories[mode] = r["history"]
            log(f"quality: {mode:>7} seed {seed + s}: opa {r['test']['opa']:.4f} ({r['seconds']:.0f} s)")
        quality[KEY[mode]] = _summary(runs)
    abl: dict[str, Any] = {}
    for name, over in ABLATION.items() if ablation_seeds else ():
        if name == "default" and "gst_efd" in quality:
            abl[name] = quality["gst_efd"] | {"options": {}, "seeds": seeds}
            continue
        runs = []
        for s in range(ablation_seeds):
            runs.append(_run(root, "gst+efd", cfg, seed + s, threads, **over))
            log(f"ablation: {name} seed {seed + s}: opa {runs[-1]['test']['opa']:.4f} ({runs[-1]['seconds']:.0f} s)")
        abl[name] = _summary(runs) | {"options": over, "seeds": ablation_seeds}
    return {"quality": quality, "ablation": abl, "hist": histories}


def malnet_part(cfg: dict[str, Any], seed: int, threads: int, work: Path, log: Any) -> dict[str, Any]:
    """Full vs gst+efd test accuracy on SYNTHETIC MalNet-like graphs (5 generative families, METIS segments)."""
    root = work / "malnet"
    synth("malnet", root, cfg["malnet"]["per_class"], cfg["malnet"]["nodes"], seed=seed)
    acc: dict[str, float] = {}
    for mode in ("full", "gst+efd"):
        tc = TrainConfig(mode=mode, segment_size=1000, epochs=cfg["malnet"]["epochs"], seed=seed,
                         finetune_epochs=cfg["malnet"]["finetune_epochs"])  # fmt: skip
        t0 = time.perf_counter()
        metrics = train(root, config=tc, threads=threads)["test"]
        acc[KEY[mode]] = metrics["accuracy"]
        log(f"malnet: {mode:>7}: accuracy {metrics['accuracy']:.3f} ({time.perf_counter() - t0:.0f} s)")
    return acc


def main() -> None:
    """Run the parts and write the JSON (and two plots next to it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller graphs and budgets (under two minutes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="training seeds per mode")
    ap.add_argument("--ablation-seeds", type=int, default=2, help="seeds per ablation variant (0: no ablation)")
    ap.add_argument("--modes", default=",".join((*MODES, "trees")), help="modes of the quality part")
    ap.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: memory,quality,ablation,malnet")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/gst.json"))
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    seeds = 2 if args.quick and args.seeds == 3 else args.seeds
    ablation_seeds = 0 if "ablation" in args.skip else (1 if args.quick else args.ablation_seeds)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    result: dict[str, Any] = {"date": dt.date.today().isoformat(), "mode": "quick" if args.quick else "full"}
    result["data"] = "SYNTHETIC: realistic TpuGraphs-like layout graphs (mlsysopt.costmodel.data.realistic)"
    result["settings"] = {k: v for k, v in cfg.items()} | {"seeds": seeds, "threads": args.threads}
    result["settings"]["ablation_seeds"] = ablation_seeds
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if "memory" not in skip:
        mem = memory_part(cfg, args.seed, args.threads, log)
        result["memory_mb"] = mem
        plot_memory_scaling(mem["nodes"], {"full": mem["full"], "gst": mem["gst"]}, args.out.with_suffix(".memory.png"))
    if "quality" not in skip:
        with tempfile.TemporaryDirectory(prefix="gst-bench-") as tmp:
            root = Path(tmp) / "layout"
            lay = cfg["layout"]
            splits = {s: lay[s] for s in ("train", "valid", "test")}
            synth("layout", root, splits, lay["nodes"], lay["configs"], seed=args.seed)
            test = load_dataset(root, "test")
            segs = [math.ceil(test.record(i).num_nodes / cfg["segment_size"]) for i in range(len(test))]
            sizes = [test.record(i).num_nodes for i in range(len(test))]
            log(f"data: {len(test)} test graphs, {min(sizes):,}-{max(sizes):,} nodes, >= {min(segs)} segments")
            result["settings"] |= {"test_graphs": len(test), "segments_per_graph": statistics.mean(segs)}
            result["settings"] |= {"min_segments_per_graph": min(segs), "test_nodes": [min(sizes), max(sizes)]}
            modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
            q = quality_part(cfg, seeds, args.seed, args.threads, root, ablation_seeds, log, modes)
        result["quality"] = q["quality"]
        if q["ablation"]:
            result["ablation"] = q["ablation"]
        if q["hist"]:
            plot_training(q["hist"], args.out.with_suffix(".training.png"), title="synthetic layout, seed 0")
    if "malnet" not in skip:
        with tempfile.TemporaryDirectory(prefix="gst-bench-") as tmp:
            result["malnet_accuracy"] = malnet_part(cfg, args.seed, args.threads, Path(tmp), log)
    result["seconds"] = time.perf_counter() - t0
    result["targets"] = _targets(result)
    write_json_atomic(args.out, result)
    for name, t in result["targets"].items():
        log(f"target {name}: {t['value']:.4g} {'met' if t['met'] else 'MISSED'}")
    log(f"wrote {args.out}")


def _targets(r: dict[str, Any]) -> dict[str, Any]:
    """Each issue target with its measured figure and whether it is met."""
    t: dict[str, Any] = {}
    if "memory_mb" in r:
        m = r["memory_mb"]
        t["gst_memory_growth<=1.25"] = {"value": m["gst_growth"], "met": m["gst_growth"] <= 1.25}
        t["full_memory_growth>=10"] = {"value": m["full_growth"], "met": m["full_growth"] >= 10}
        t["gst_e_step_growth<=1.5"] = {"value": m["gst_e_step_growth"], "met": m["gst_e_step_growth"] <= 1.5}
    if "quality" in r and {"full", "gst_efd", "trees"} <= set(r["quality"]):
        q = r["quality"]
        gap = q["gst_efd"]["opa"] - q["full"]["opa"]
        t["gst_efd_opa>=full-0.005"] = {"value": gap, "met": gap >= -0.005}
        vs_trees = q["gst_efd"]["opa"] - q["trees"]["opa"]
        t["gst_efd_opa>=trees"] = {"value": vs_trees, "met": vs_trees >= 0}
    if r["mode"] == "full":
        t["seconds<=1200"] = {"value": r["seconds"], "met": r["seconds"] <= 1200}
    else:
        t["quick_seconds<=120"] = {"value": r["seconds"], "met": r["seconds"] <= 120}
    return t


if __name__ == "__main__":
    main()
