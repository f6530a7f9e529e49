"""GST+EFD benchmark: step memory and time vs graph size, then every mode and the field's tree baselines, with the
library's DEFAULTS, on two held-out test sets: realistic synthetic layout graphs and the real collection.

* ``memory_mb``: peak tensor memory of ONE training step (PyTorch's own accounting, ``mlsysopt.costmodel.memory``)
  on single SYNTHETIC graphs of about 5k, 50k and 500k nodes, segments of 1000 nodes, k = 1, 2 configurations, no
  pruning, for full-graph training and GST; ``step_s`` the step's seconds for full, gst and gst+e (gst+e: its
  second step, which reads the table the first one filled). Run first, alone (timing).
* ``quality``: every mode (full, gst, gst+e, gst+ef, gst+efd) with ``TrainConfig()``'s defaults and the default
  model, and the tree baselines (scikit-learn ``trees``, LightGBM ``lightgbm``, XGBoost ``xgboost``), ``--seeds``
  seeds each, on SYNTHETIC realistic layout graphs (``mlsysopt.costmodel.data.realistic``: clustered,
  heavy-tailed runtimes with ties and a noise floor; 20k-100k nodes) and, as ``quality.real``, on the REAL
  collection shipped with mlsysopt (``real:cpu``: runtimes measured on this project's 2-core machine by
  ``mlsysopt costmodel collect``). Every model is scored on held-out test graphs, every segment computed fresh.
  ``opa`` is the mean over seeds and graphs; ``opa_ci`` the 95% t-interval over test graphs of each graph's
  seed-mean OPA; ``opa_seed_ci`` the 95% t-interval over the seeds' means; ``opa_per_seed``; ``step_s`` seconds
  per optimizer step; ``peak_step_mb``; the chosen ``k``, ``segment_size`` and best validation epochs.
* ``ablation``: gst+efd with one default changed at a time (synthetic set, ``--ablation-seeds`` seeds).
* ``inference``: ``costmodel evaluate`` and ``predict`` of a trained gst+efd model on three test graphs, in
  process (after imports) and as the CLI (wall seconds and peak RSS of the whole command).
* ``malnet_accuracy``: full vs gst+efd test accuracy on SYNTHETIC MalNet-like graphs (5 generative families).

Defaults were chosen on separate data (a synthetic set from seed 1 and the real collection's validation split),
never on these test graphs. Runs go through a local process pool (``--workers``, default 2: one per core).

    python benchmarks/gst.py [--quick] [--seeds 3] [--ablation-seeds 2] [--workers 2] [--resume] --out FILE.json

``--quick`` is a smoke run of every part except the ablation (small graphs, 2 epochs, 2 seeds: its figures say
nothing about quality). The JSON records the load averages before and after (``load_before``/``load_after``).
``--resume`` reuses the training runs an interrupted start finished (their summaries are kept in ``OUT.jobs/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel import MODES, TrainConfig, host_rss_mb, layout_record, one_step, synth, train
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.realistic import realistic_layout_graph
from mlsysopt.io import write_json_atomic
from mlsysopt.runtime import make_executor
from mlsysopt.runtime.threads import torch_threads

FULL: dict[str, Any] = {
    "mem_nodes": [5_000, 50_000, 500_000],
    "layout": {"train": 32, "valid": 4, "test": 32, "nodes": (20_000, 100_000), "configs": 300},
    "malnet": {"per_class": 8, "nodes": (5_000, 20_000), "epochs": 6, "finetune_epochs": 4},
}
#: a smoke run of every part in a minute or two (figures not comparable with the full run's)
QUICK: dict[str, Any] = FULL | {
    "mem_nodes": [2_000, 20_000, 100_000],
    "layout": {"train": 4, "valid": 2, "test": 3, "nodes": (2_000, 4_000), "configs": 64},
    "malnet": {"per_class": 3, "nodes": (500, 1_000), "epochs": 1, "finetune_epochs": 1},
    "epochs": 2,
    "finetune_epochs": 1,
    "real_graphs": {"train": 12, "valid": 4, "test": 8},
    "cli_inference": False,  # the CLI timings (two commands, ~15 s of imports each) only in the full run
}
SEGMENT_SIZE_MEM = 1000
TREE_MODES = ("trees", "lightgbm", "xgboost")
#: rank ensembles of the library (``costmodel ensemble``): name -> member modes (trained as above, same seed)
ENSEMBLES = {"gst+efd+lightgbm": ("gst+efd", "lightgbm")}
KEY = {"full": "full", "gst": "gst", "gst+e": "gst_e", "gst+ef": "gst_ef", "gst+efd": "gst_efd", "trees": "trees",
       "lightgbm": "lightgbm", "xgboost": "xgboost", "gst+efd+lightgbm": "gst_efd_lightgbm"}  # fmt: skip
#: gst+efd variants of the ablation: name -> options changed from the defaults (model options marked model.)
ABLATION: dict[str, dict[str, Any]] = {
    "no_pruning": {"prune_hops": None},
    "k=1": {"k": 1},
    "reference_history": {"history_key": "config", "sample": "uniform", "refresh": "none"},
    "listmle": {"loss": "listmle"},
    "cross_config_attention": {"model.cross_config_heads": 4},
    "last_epoch": {"keep_best": False},
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


# ---------------------------------------------------------------------------- one training run (a pool task)
def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Train one model on ``job["root"]`` (one thread) and summarise its test figures."""
    over = dict(job.get("over", {}))
    model = {k[6:]: over.pop(k) for k in list(over) if k.startswith("model.")}
    tc = TrainConfig(mode=job["mode"], seed=job["seed"], **job.get("base", {}), **over)
    t0 = time.perf_counter()
    with torch_threads(1):
        r = train(job["root"], job.get("out"), config=tc, **model)
    train_eps = [h for h in r["history"] if h.get("phase") == "train"]
    steps = job.get("train_graphs", 1) * max(1, len(train_eps))  # one graph per optimizer step (the default)
    step_s = sum(h["epoch_s"] for h in train_eps) / steps if job["mode"] not in TREE_MODES else r["train_s"]
    seconds = time.perf_counter() - t0
    summary = {"test": r["test"], "per_graph": r["test_opa_per_graph"], "step_s": step_s, "seconds": seconds,
            "peak_step_mb": r["peak_step_mb"], "k": r.get("k"), "segment_size": r.get("segment_size"),
            "prune_hops": r.get("prune_hops"), "best": r.get("best"), "data": r["data"],
            "history": [{k: h.get(k) for k in ("epoch", "phase", "loss", "valid_opa")} for h in r["history"]],
            "rounds": r["history"][0].get("rounds") if job["mode"] in TREE_MODES else None}  # fmt: skip
    if job.get("cache"):
        write_json_atomic(job["cache"], summary)
    return summary


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names = list(runs[0]["per_graph"])
    per_graph = [statistics.mean(r["per_graph"][n] for r in runs) for n in names]
    mean = lambda key: statistics.mean(r["test"][key] for r in runs)  # noqa: E731
    per_seed = [r["test"]["opa"] for r in runs]
    out = {
        "opa": mean("opa"),
        "opa_ci": mean_ci(per_graph),
        "opa_seed_ci": mean_ci(per_seed),
        "kendall": mean("kendall"),
        "slowdown_top1": mean("slowdown_top1"),
        "slowdown_top5": mean("slowdown_top5"),
        "opa_per_seed": per_seed,
        "step_s": None if runs[0]["step_s"] is None else statistics.mean(r["step_s"] for r in runs),
        "peak_step_mb": max(r["peak_step_mb"] for r in runs),
        "run_s": statistics.mean(r["seconds"] for r in runs),
        "test_graphs": len(names),
    }
    if runs[0]["k"] is not None:
        out |= {"k": [r["k"] for r in runs], "segment_size": runs[0]["segment_size"],
                "prune_hops": runs[0]["prune_hops"],
                "best_epoch": [None if r["best"] is None else r["best"]["epoch"] for r in runs]}  # fmt: skip
    if runs[0]["rounds"] is not None:
        out["rounds"] = [r["rounds"] for r in runs]
    if "weights" in runs[0]:  # an ensemble: its weights per seed, chosen on validation
        out["weights"] = [r["weights"] for r in runs]
        out["valid_opa"] = [r["valid"]["opa"] for r in runs]
    return out


# ---------------------------------------------------------------------------- parts
def memory_part(cfg: dict[str, Any], seed: int, log: Any) -> dict[str, Any]:
    """Peak step tensor memory (full, gst) and step seconds (full, gst, gst+e) on one graph per size."""
    out: dict[str, Any] = {"nodes": [], "full": [], "gst": [], "host_rss_mb": [], "segments": []}
    out["step_s"] = {"full": [], "gst": [], "gst_e": []}
    for n in cfg["mem_nodes"]:
        rec = layout_record(realistic_layout_graph(n, 2, np.random.default_rng([seed, n])), f"synthetic_mem_{n}")
        out["nodes"].append(rec.num_nodes)
        for mode in ("full", "gst", "gst+e"):
            steps = 2 if mode == "gst+e" else 1  # gst+e: the second step, which reads the table
            with torch_threads(1):
                trainer = one_step(rec, mode, SEGMENT_SIZE_MEM, seed=seed, steps=steps)
            last = trainer.history[-1]
            out["step_s"][KEY[mode]].append(last["epoch_s"])
            if mode in ("full", "gst"):
                out[mode].append(last["peak_step_mb"])
            if mode == "gst":
                out["segments"].append(trainer.plan(rec).num_segments)
            log(f"memory: {n:>7,} nodes {mode:>5}: {last['peak_step_mb']:9.1f} MB, step {last['epoch_s']:.3f} s")
            del trainer
        out["host_rss_mb"].append(host_rss_mb())
    out["gst_growth"] = out["gst"][-1] / out["gst"][0]
    out["full_growth"] = out["full"][-1] / out["full"][0]
    out["gst_e_step_growth"] = out["step_s"]["gst_e"][-1] / out["step_s"]["gst_e"][0]
    return out


def _real_subset(cfg: dict[str, Any], work: Path, data: str = "real:cpu") -> Path:
    """The real layout set ``data`` (a shipped name or a layout root; in quick mode, a copy of its first graphs per
    split)."""
    from mlsysopt.costmodel.data.real import resolve_data

    root = resolve_data(data)
    if "real_graphs" not in cfg:
        return root
    sub = work / "real"
    for split, n in cfg["real_graphs"].items():
        (sub / split).mkdir(parents=True)
        for f in sorted((root / split).glob("*.npz"))[:n]:
            shutil.copy(f, sub / split / f.name)
    shutil.copy(root / "collection.json", sub / "collection.json")
    return sub


def _jobs(sets: dict[str, Path], cfg: dict[str, Any], seeds: int, seed: int, ablation_seeds: int,
          modes: tuple[str, ...], work: Path) -> list[dict[str, Any]]:  # fmt: skip
    base = {k: cfg[k] for k in ("epochs", "finetune_epochs") if k in cfg}
    jobs = []
    members = {m for e in modes if e in ENSEMBLES for m in ENSEMBLES[e]}
    for name, root in sets.items():
        n_train = len(load_dataset(root, "train"))
        for mode in (m for m in modes if m not in ENSEMBLES):
            for s in range(seeds):
                # the run the inference part loads, and every run an ensemble combines
                keep = (name == "synthetic" and mode == "gst+efd" and s == 0) or mode in members
                out = str(work / f"{name}_{mode}_{s}") if keep else None
                jobs.append({"part": name, "name": KEY[mode], "root": str(root), "mode": mode, "seed": seed + s,
                             "base": base, "train_graphs": n_train, "out": out})  # fmt: skip
    if "synthetic" in sets:
        n_train = len(load_dataset(sets["synthetic"], "train"))
        for variant, over in ABLATION.items() if ablation_seeds else ():
            for s in range(ablation_seeds):
                jobs.append({"part": "ablation", "name": variant, "root": str(sets["synthetic"]), "mode": "gst+efd",
                             "seed": seed + s, "base": base, "over": over, "train_graphs": n_train})  # fmt: skip
    # the longest first, so the pool's two workers finish together
    weight = {"synthetic": 10, "ablation": 10, "real": 1}
    return sorted(jobs, key=lambda j: -(weight[j["part"]] * (3 if j["mode"] == "full" else 1)))


def ensemble_part(jobs: list[dict[str, Any]], done: list[dict[str, Any]], modes: tuple[str, ...],
                  log: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:  # fmt: skip
    """Each requested rank ensemble of the same set and seed's member runs (``costmodel ensemble``: weights chosen
    on the validation split), summarised like a training run (its seconds: the members' plus its own)."""
    from mlsysopt.costmodel import ensemble

    out = []
    for name, member_modes in ENSEMBLES.items():
        if name not in modes:
            continue
        for part in dict.fromkeys(j["part"] for j in jobs if j["part"] != "ablation"):
            for seed in sorted({j["seed"] for j in jobs if j["part"] == part}):
                found = {j["mode"]: (j, r) for j, r in zip(jobs, done, strict=True)
                         if j["part"] == part and j["seed"] == seed and j["mode"] in member_modes}  # fmt: skip
                if set(found) != set(member_modes):
                    raise SystemExit(f"--modes {name} needs its members {', '.join(member_modes)} in --modes")
                t0 = time.perf_counter()
                r = ensemble([found[m][0]["out"] for m in member_modes], found[member_modes[0]][0]["root"])
                seconds = time.perf_counter() - t0 + sum(found[m][1]["seconds"] for m in member_modes)
                log(f"{part}: ensemble {name} seed {seed}: weights {r['weights']} (valid opa {r['valid']['opa']:.4f})")
                job = {"part": part, "name": KEY[name], "mode": name, "seed": seed}
                peak = max(found[m][1]["peak_step_mb"] for m in member_modes)
                out.append((job, {"test": r["test"], "per_graph": r["test_opa_per_graph"], "seconds": seconds,
                                  "step_s": None, "peak_step_mb": peak,
                                  "k": None, "rounds": None, "best": None, "weights": r["weights"],
                                  "valid": r["valid"], "history": []}))  # fmt: skip
    return out


def inference_part(run: Path, data: Path, work: Path, log: Any, cli: bool = True) -> dict[str, Any]:
    """evaluate / predict of a trained model on three test graphs: in process (imports done), and the CLI."""
    from mlsysopt.costmodel import evaluate, predict

    three = work / "three" / "test"
    three.mkdir(parents=True)
    for f in sorted((data / "test").glob("*.npz"))[:3]:
        shutil.copy(f, three / f.name)
    sizes = [round(f.stat().st_size / 2**20, 2) for f in sorted(three.glob("*.npz"))]
    out: dict[str, Any] = {"graphs": 3, "file_mb": sizes}
    for name, fn in (("evaluate", lambda: evaluate(run, three.parent)), ("predict", lambda: predict(run, three))):
        fn()  # once to load the model and warm up
        t0 = time.perf_counter()
        fn()
        out[f"{name}_s"] = time.perf_counter() - t0
    if not cli:
        log(f"inference: evaluate {out['evaluate_s']:.2f} s, predict {out['predict_s']:.2f} s in process")
        return out
    exe = Path(sys.executable).with_name("mlsysopt")
    for name, args in (("evaluate", ["evaluate", "--run", run, "--data", three.parent]),
                       ("predict", ["predict", "--run", run, "--input", three])):  # fmt: skip
        cmd = ["/usr/bin/time", "-f", "%e %M", str(exe), "costmodel", *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall, kb = proc.stderr.strip().splitlines()[-1].split()
        out[f"cli_{name}_s"], out[f"cli_{name}_rss_mb"] = float(wall), float(kb) / 1024
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, torch_geometric"], check=True)
    out["import_torch_pyg_s"] = time.perf_counter() - t0
    log(
        f"inference: evaluate {out['evaluate_s']:.2f} s, predict {out['predict_s']:.2f} s in process; CLI "
        f"{out['cli_evaluate_s']:.1f} s / {out['cli_evaluate_rss_mb']:.0f} MB "
        f"(imports {out['import_torch_pyg_s']:.1f} s)"
    )
    return out


def malnet_part(cfg: dict[str, Any], seed: int, work: Path, log: Any) -> dict[str, Any]:
    """Full vs gst+efd test accuracy on SYNTHETIC MalNet-like graphs (5 generative families, METIS segments)."""
    root = work / "malnet"
    synth("malnet", root, cfg["malnet"]["per_class"], cfg["malnet"]["nodes"], seed=seed)
    acc: dict[str, float] = {}
    for mode in ("full", "gst+efd"):
        tc = TrainConfig(mode=mode, epochs=cfg["malnet"]["epochs"], seed=seed,
                         finetune_epochs=cfg["malnet"]["finetune_epochs"])  # fmt: skip
        t0 = time.perf_counter()
        with torch_threads(1):
            metrics = train(root, config=tc)["test"]
        acc[KEY[mode]] = metrics["accuracy"]
        log(f"malnet: {mode:>7}: accuracy {metrics['accuracy']:.3f} ({time.perf_counter() - t0:.0f} s)")
    return acc


def main() -> None:
    """Run the parts and write the JSON (and two plots next to it)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller graphs and budgets (a couple of minutes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="training seeds per mode")
    ap.add_argument("--ablation-seeds", type=int, default=2, help="seeds per ablation variant (0: no ablation)")
    ap.add_argument("--modes", default=",".join((*MODES, *TREE_MODES)), help="modes of the quality parts")
    ap.add_argument("--workers", type=int, default=2, help="training runs in parallel (processes, one thread each)")
    ap.add_argument("--skip", default="", help="comma-separated parts: memory,synthetic,real,ablation,inference,malnet")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/gst.json"))
    ap.add_argument("--real-data", default="real:cpu",
                    help="the real part's layout set: real:cpu (the shipped collection) or a layout root, e.g. the "
                         "latency collection as ranking graphs (benchmarks/latency_layout.py)")  # fmt: skip
    ap.add_argument("--resume", action="store_true",
                    help="reuse the training runs already finished by an earlier start (OUT.jobs/)")  # fmt: skip
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    seeds = 2 if args.quick and args.seeds == 3 else args.seeds
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    ablation_seeds = 0 if "ablation" in skip or args.quick else args.ablation_seeds  # quick: no ablation
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", flush=True)

    result: dict[str, Any] = {"date": dt.date.today().isoformat(), "mode": "quick" if args.quick else "full"}
    result["load_before"] = os.getloadavg()  # 1/5/15-minute load averages (a shared 2-core machine)
    result["data"] = {"synthetic": "SYNTHETIC: realistic TpuGraphs-like layout graphs (mlsysopt.costmodel.data."
                      "realistic)", "memory": "SYNTHETIC realistic layout graphs"}  # fmt: skip
    result["settings"] = {k: v for k, v in cfg.items()} | {"seeds": seeds, "ablation_seeds": ablation_seeds,
                                                           "workers": args.workers, "modes": list(modes),
                                                           "defaults": TrainConfig().to_dict()}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cache = args.out.with_suffix(".jobs")
    cache.mkdir(parents=True, exist_ok=True)
    if "memory" not in skip:
        from mlsysopt.report.costmodel import plot_memory_scaling

        mem_file = cache / f"{result['mode']}-memory.json"
        if args.resume and mem_file.is_file():
            mem = json.loads(mem_file.read_text())
            log(f"memory: from an earlier start ({mem_file})")
        else:
            mem = memory_part(cfg, args.seed, log)
            write_json_atomic(mem_file, mem)
        result["memory_mb"] = mem
        plot_memory_scaling(mem["nodes"], {"full": mem["full"], "gst": mem["gst"]}, args.out.with_suffix(".memory.png"))
    with tempfile.TemporaryDirectory(prefix="gst-bench-") as tmp:
        work = Path(tmp)
        sets: dict[str, Path] = {}
        if "synthetic" not in skip:
            lay = cfg["layout"]
            root = work / "layout"
            synth("layout", root, {s: lay[s] for s in ("train", "valid", "test")}, lay["nodes"], lay["configs"],
                  seed=args.seed)  # fmt: skip
            test = load_dataset(root, "test")
            sizes = [test.record(i).num_nodes for i in range(len(test))]
            log(f"synthetic: {len(test)} test graphs of {min(sizes):,}-{max(sizes):,} nodes")
            result["settings"] |= {"test_graphs": len(test), "test_nodes": [min(sizes), max(sizes)]}
            sets["synthetic"] = root
        if "real" not in skip:
            from mlsysopt.costmodel.data.real import resolve_data

            sets["real"] = _real_subset(cfg, work, args.real_data)
            man = json.loads((resolve_data(args.real_data) / "collection.json").read_text())
            result["data"]["real"] = man["data"]
            conf = man.get("settings") or {}
            result["settings"]["real"] = {"set": args.real_data, "collected": man["updated"], "graphs": man["splits"],
                                          "configs": conf.get("configs"), "rounds": conf.get("rounds"),
                                          "noise_floor": man.get("noise_floor")}  # fmt: skip
            log(f"real: {man['data']}, splits {man['splits']}")
        jobs = _jobs(sets, cfg, seeds, args.seed, ablation_seeds, modes, work)
        for j in jobs:  # where each finished run's summary is kept, so that --resume skips it
            j["cache"] = str(cache / f"{result['mode']}-{j['part']}-{j['name']}-{j['seed']}.json")
            if not args.resume:
                Path(j["cache"]).unlink(missing_ok=True)
            if j.get("out"):  # kept beside the summaries, so that a resumed start has it too
                j["out"] = str(cache / f"{result['mode']}-run-{j['part']}-{j['name']}-{j['seed']}")
        for j in jobs:
            if j.get("out") and (not args.resume or not (Path(j["out"]) / "result.json").is_file()):
                shutil.rmtree(j["out"], ignore_errors=True)
                Path(j["cache"]).unlink(missing_ok=True)
        todo = [j for j in jobs if not Path(j["cache"]).is_file()]
        result["resumed_runs"] = len(jobs) - len(todo)  # their time is not in this start's seconds
        log(f"{len(jobs)} training runs ({len(jobs) - len(todo)} from an earlier start) on {args.workers} workers")
        with make_executor("local", args.workers) as ex:
            ex.map(run_job, todo)
        from mlsysopt.errors import MlsysoptError
        from mlsysopt.io import read_json

        done = [read_json(Path(j["cache"]), MlsysoptError) for j in jobs]
        for job, summary in ensemble_part(jobs, done, modes, log):
            jobs.append(job)
            done.append(summary)
        quality: dict[str, Any] = {}
        ablation: dict[str, Any] = {}
        for part in ("synthetic", "real", "ablation"):
            rows = [(j, r) for j, r in zip(jobs, done, strict=True) if j["part"] == part]
            for name in dict.fromkeys(j["name"] for j, _ in rows):
                runs = [r for j, r in rows if j["name"] == name]
                summ = _summary(runs)
                if part == "ablation":
                    ablation[name] = summ | {"options": ABLATION[name], "seeds": len(runs)}
                elif part == "real":
                    quality.setdefault("real", {})[name] = summ
                else:
                    quality[name] = summ
                log(f"{part}: {name:>22}: opa {summ['opa']:.4f} {summ['opa_ci']} ({summ['run_s']:.0f} s per run)")
        result["quality"] = quality
        if ablation:
            result["ablation"] = ablation | {"default": quality.get("gst_efd")}
        first = {(j["part"], j["name"]): r for j, r in zip(jobs, done, strict=True) if j["seed"] == args.seed}
        hist = {n: first[("synthetic", n)]["history"] for n in map(KEY.get, MODES) if ("synthetic", n) in first}
        if hist:
            from mlsysopt.report.costmodel import plot_training

            plot_training(hist, args.out.with_suffix(".training.png"), title="synthetic layout, seed 0, defaults")
        if "inference" not in skip and "synthetic" in sets and "gst+efd" in modes:
            kept = next(Path(j["out"]) for j in jobs if j.get("out"))
            result["inference"] = inference_part(kept, sets["synthetic"], work, log,
                                                 cli=cfg.get("cli_inference", True))  # fmt: skip
        if "malnet" not in skip:
            result["malnet_accuracy"] = malnet_part(cfg, args.seed, work, log)
    result["seconds"] = time.perf_counter() - t0
    result["load_after"] = os.getloadavg()
    result["targets"] = _targets(result)
    write_json_atomic(args.out, result)
    for name, t in result["targets"].items():
        log(f"target {name}: {t['value']:.4g} {t.get('note') or ('met' if t['met'] else 'MISSED')}")
    log(f"wrote {args.out}")


def _targets(r: dict[str, Any]) -> dict[str, Any]:
    """Each issue target with its measured figure and whether it is met."""
    t: dict[str, Any] = {}
    if "memory_mb" in r:
        m = r["memory_mb"]
        t["gst_memory_growth<=1.25"] = {"value": m["gst_growth"], "met": m["gst_growth"] <= 1.25}
        t["full_memory_growth>=10"] = {"value": m["full_growth"], "met": m["full_growth"] >= 10}
        t["gst_e_step_growth<=1.5"] = {"value": m["gst_e_step_growth"], "met": m["gst_e_step_growth"] <= 1.5}
    for label, q in (("synthetic", r.get("quality", {})), ("real", r.get("quality", {}).get("real", {}))):
        if {"full", "gst_efd"} <= set(q):
            gap = q["gst_efd"]["opa"] - q["full"]["opa"]
            t[f"{label}:gst_efd_opa>=full-0.005"] = {"value": gap, "met": gap >= -0.005}
        trees = [k for k in TREE_MODES if k in q]
        for name in ("gst_efd", "gst_efd_lightgbm"):
            if name in q and trees:
                best = max(trees, key=lambda k: q[k]["opa"])
                vs = q[name]["opa"] - q[best]["opa"]
                t[f"{label}:{name}_opa>=best_tree"] = {"value": vs, "met": vs >= 0, "best_tree": best}
                slow = q[best]["slowdown_top1"] - q[name]["slowdown_top1"]
                t[f"{label}:{name}_top1_slowdown<=best_tree"] = {"value": slow, "met": slow >= 0, "best_tree": best}
    if r.get("resumed_runs"):
        t["seconds"] = {"value": r["seconds"], "met": None, "note": "resumed: earlier starts' time not included"}
    elif r["mode"] == "full":
        t["seconds<=1200"] = {"value": r["seconds"], "met": r["seconds"] <= 1200}
    else:
        t["quick_seconds<=120"] = {"value": r["seconds"], "met": r["seconds"] <= 120}
    return t


if __name__ == "__main__":
    main()
