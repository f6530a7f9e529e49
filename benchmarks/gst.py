"""GST+EFD benchmark: training-step memory vs graph size, quality of every mode, epoch time, MalNet accuracy.

All data is SYNTHETIC (TpuGraphs-like layout graphs and MalNet-like call graphs written in the published
formats by ``mlsysopt.costmodel.data``), because the real datasets cannot be downloaded here.

* ``memory_mb``: peak tensor memory of ONE training step (inputs copied to the compute device, activations,
  gradients; PyTorch's own accounting, see ``mlsysopt.costmodel.memory``) on single layout graphs of about 5k,
  50k and 500k nodes (without node_splits, so every segment has the same size), same model, segment size 1000
  and 2 configurations per step, for full-graph training and for GST. ``host_rss_mb`` is the
  process's resident memory after the step (the host copy of the dataset included), reported separately.
* ``quality``: every mode trained on the same synthetic layout training set with the same budget, then evaluated
  on held-out graphs, every segment computed fresh: OPA, Kendall tau, top-1 slowdown (mean over ``--seeds``).
* ``epoch_s``: mean seconds per training epoch (full vs gst+efd) in the quality runs.
* ``malnet_accuracy``: full vs gst+efd test accuracy on synthetic MalNet-like graphs (5 generative families).

    python benchmarks/gst.py [--quick] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel import (
    MODES,
    TrainConfig,
    host_rss_mb,
    layout_record,
    one_step,
    synth,
    synth_layout_graph,
    train,
)
from mlsysopt.io import write_json_atomic
from mlsysopt.report.costmodel import plot_memory_scaling, plot_training
from mlsysopt.runtime.threads import torch_threads

FULL = {
    "mem_nodes": [5_000, 50_000, 500_000],
    "mem_configs": 2,
    "layout": {"train": 24, "valid": 6, "test": 10, "nodes": (1000, 4000), "configs": 32},
    "segment_size": 500,
    "configs_per_graph": 16,
    "epochs": 8,
    "finetune_epochs": 4,
    "malnet": {"per_class": 8, "nodes": (5000, 20000)},
    "malnet_epochs": 6,
}
QUICK = FULL | {"mem_nodes": [2_000, 20_000, 200_000], "segment_size": 250, "configs_per_graph": 8, "epochs": 2,
                "layout": {"train": 6, "valid": 2, "test": 3, "nodes": (500, 1500), "configs": 16},
                "finetune_epochs": 1, "malnet": {"per_class": 3, "nodes": (1000, 3000)},
                "malnet_epochs": 2}  # fmt: skip
SEGMENT_SIZE_MEM = 1000
KEY = {"full": "full", "gst": "gst", "gst+e": "gst_e", "gst+ef": "gst_ef", "gst+efd": "gst_efd"}


def memory_part(cfg: dict[str, Any], seed: int, threads: int, log: Any) -> dict[str, Any]:
    """Peak step tensor memory of full and GST training on one layout graph per size."""
    out: dict[str, Any] = {"nodes": [], "full": [], "gst": [], "host_rss_mb": [], "segments": [], "step_s": {}}
    out["step_s"] = {"full": [], "gst": []}
    for n in cfg["mem_nodes"]:
        # no node_splits here: every segment then has the same size, so the sampled one is never a small one
        arrays = synth_layout_graph(n, cfg["mem_configs"], np.random.default_rng([seed, n]), splits=False)
        rec = layout_record(arrays, f"synthetic_mem_{n}")
        del arrays
        out["nodes"].append(rec.num_nodes)
        for mode in ("full", "gst"):
            t0 = time.perf_counter()
            with torch_threads(threads):
                trainer = one_step(rec, mode, SEGMENT_SIZE_MEM, seed=seed)
            peak = trainer.history[0]["peak_step_mb"]
            out[mode].append(peak)
            out["step_s"][mode].append(time.perf_counter() - t0)
            if mode == "gst":
                out["segments"].append(trainer.segmenter(rec).num_segments)
            log(f"memory: {n:>7,} nodes {mode:>4}: {peak:9.1f} MB ({time.perf_counter() - t0:.1f} s)")
            del trainer
        out["host_rss_mb"].append(host_rss_mb())
    out["gst_growth"] = out["gst"][-1] / out["gst"][0]
    out["full_growth"] = out["full"][-1] / out["full"][0]
    return out


def _train_eval(root: Path, tc: TrainConfig, threads: int) -> tuple[dict, list, float]:
    """Train one mode, evaluate on the test split; returns (test metrics, history, mean train-epoch seconds)."""
    result = train(root, config=tc, threads=threads)
    epoch_s = statistics.mean(h["epoch_s"] for h in result["history"] if h.get("phase") == "train")
    return result["test"], result["history"], epoch_s


def quality_part(cfg: dict[str, Any], seeds: int, seed: int, threads: int, work: Path, log: Any) -> dict[str, Any]:
    """Every mode on the same synthetic layout data; held-out OPA, Kendall, top-1 slowdown; epoch seconds."""
    lay = cfg["layout"]
    root = work / "layout"
    synth("layout", root, {s: lay[s] for s in ("train", "valid", "test")}, lay["nodes"], lay["configs"], seed=seed)
    quality: dict[str, Any] = {}
    epoch_s: dict[str, list[float]] = {}
    histories: dict[str, list] = {}
    for mode in MODES:
        runs = []
        for s in range(seeds):
            tc = TrainConfig(mode=mode, segment_size=cfg["segment_size"], epochs=cfg["epochs"], seed=seed + s)
            tc.finetune_epochs, tc.configs_per_graph = cfg["finetune_epochs"], cfg["configs_per_graph"]
            t0 = time.perf_counter()
            metrics, hist, es = _train_eval(root, tc, threads)
            runs.append(metrics)
            epoch_s.setdefault(mode, []).append(es)
            if s == 0:
                histories[mode] = hist
            log(f"quality: {mode:>7} seed {seed + s}: opa {metrics['opa']:.4f} ({time.perf_counter() - t0:.0f} s)")
        quality[KEY[mode]] = {
            m: statistics.mean(r[m] for r in runs) for m in ("opa", "kendall", "slowdown_top1", "slowdown_top5")
        }
        quality[KEY[mode]]["opa_per_seed"] = [r["opa"] for r in runs]
    return {"quality": quality, "epoch_s": {m: statistics.mean(v) for m, v in epoch_s.items()}, "hist": histories}


def malnet_part(cfg: dict[str, Any], seed: int, threads: int, work: Path, log: Any) -> dict[str, Any]:
    """Full vs gst+efd test accuracy on synthetic MalNet-like graphs (METIS segments)."""
    root = work / "malnet"
    synth("malnet", root, cfg["malnet"]["per_class"], cfg["malnet"]["nodes"], seed=seed)
    acc: dict[str, float] = {}
    for mode in ("full", "gst+efd"):
        tc = TrainConfig(mode=mode, segment_size=cfg["segment_size"] * 2, epochs=cfg["malnet_epochs"], seed=seed)
        tc.finetune_epochs = cfg["finetune_epochs"]
        t0 = time.perf_counter()
        metrics, _, _ = _train_eval(root, tc, threads)
        acc[KEY[mode]] = metrics["accuracy"]
        log(f"malnet: {mode:>7}: accuracy {metrics['accuracy']:.3f} ({time.perf_counter() - t0:.0f} s)")
    return acc


def main() -> None:
    """Run the three parts and write the JSON (and two plots next to it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller graphs and budgets (a minute or two)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="training seeds per mode")
    ap.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: memory,quality,malnet")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/gst.json"))
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    seeds = args.seeds
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    result: dict[str, Any] = {"date": dt.date.today().isoformat(), "mode": "quick" if args.quick else "full"}
    result["data"] = "SYNTHETIC: TpuGraphs-like layout graphs and MalNet-like graphs (mlsysopt.costmodel.data)"
    result["settings"] = {k: v for k, v in cfg.items()} | {"seeds": seeds, "threads": args.threads}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if "memory" not in skip:
        mem = memory_part(cfg, args.seed, args.threads, log)
        result["memory_mb"] = mem
        plot_memory_scaling(mem["nodes"], {"full": mem["full"], "gst": mem["gst"]}, args.out.with_suffix(".memory.png"))
    with tempfile.TemporaryDirectory(prefix="gst-bench-") as tmp:
        if "quality" not in skip:
            q = quality_part(cfg, seeds, args.seed, args.threads, Path(tmp), log)
            result["quality"] = q["quality"]
            result["epoch_s"] = {"full": q["epoch_s"]["full"], "gst_efd": q["epoch_s"]["gst+efd"]}
            result["epoch_s_all"] = {KEY[m]: v for m, v in q["epoch_s"].items()}
            plot_training(q["hist"], args.out.with_suffix(".training.png"), title="synthetic layout, seed 0")
        if "malnet" not in skip:
            result["malnet_accuracy"] = malnet_part(cfg, args.seed, args.threads, Path(tmp), log)
    result["targets"] = _targets(result)
    result["seconds"] = time.perf_counter() - t0
    write_json_atomic(args.out, result)
    log(f"wrote {args.out}")


def _targets(r: dict[str, Any]) -> dict[str, Any]:
    """Each issue target with its measured figure and whether it is met."""
    t: dict[str, Any] = {}
    if "memory_mb" in r:
        m = r["memory_mb"]
        t["gst_memory_growth<=1.25"] = {"value": m["gst_growth"], "met": m["gst_growth"] <= 1.25}
        t["full_memory_growth>=10"] = {"value": m["full_growth"], "met": m["full_growth"] >= 10}
    if "quality" in r:
        q = r["quality"]
        gap = q["gst_efd"]["opa"] - q["full"]["opa"]
        t["gst_efd_opa>=full-0.005"] = {"value": gap, "met": gap >= -0.005}
        t["gst_efd_opa>=gst"] = {
            "value": q["gst_efd"]["opa"] - q["gst"]["opa"],
            "met": q["gst_efd"]["opa"] >= q["gst"]["opa"],
        }
    return t


if __name__ == "__main__":
    main()
