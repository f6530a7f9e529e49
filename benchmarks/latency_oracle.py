"""The latency oracle on real runtimes measured here (issue #32): six predictors side by side, the default picked
on validation models, and the oracle in use.

    python benchmarks/latency_oracle.py [--data real:cpu] [--quick] [--jobs 2] [--ship] --out FILE.json

What it times (the NAS CNNs, the op-cost models) it times first, before any fit heats the machine; then the fits run
``--jobs`` at a time, one PyTorch thread each.

Reads a latency collection (``costmodel collect-latency``; the shipped ``real:cpu`` by default). On its
train/valid/test split by model:

* ``within10`` / ``spearman`` per method on the *test* models (every setting), means over ``--seeds`` with 95%
  intervals (LightGBM's bagging is seeded; the others are deterministic); ``valid`` the same on validation models;
* ``default_oracle``: the method with the best validation ``within10`` (Spearman breaks ties) -- never the test split;
* ``within10_lofo``: each family left out of training entirely (the default method), scored on all its models;
* ``best_setting_accuracy`` / ``best_setting_regret``: per test model and batch, the setting predicted fastest
  among the collection's settings vs the measured fastest (a hit is within 3%, the noise floor's order);
* ``fewshot``: HELP's question, one setting kept out of training, calibrated on n measured models of it;
* ``nas_feasible_precision``: NAS digits-space CNNs predicted (upper interval end) to meet a latency limit, timed
  here the way ``nas search`` times them: the fraction that meets it;
* ``serving_shortlist_hit`` / ``serving_measurements_saved``: ONNX Runtime's op-level settings (threads x mode)
  within 20% of the predicted best, against the measured best of test models;
* ``predict_ms``: one prediction from an ONNX file (read, featurised, predicted), median over test models;
* ``noise_floor``: the collection's; ``repeatability``: each round of a test model against the median of its other
  rounds, scored like a prediction (how far a fresh measurement lands from the labels ``within10`` is judged by);
  ``within10_by_setting``: the default's ``within10`` per setting (seed 0).

With ``--ship`` the default method's seed-0 fit on the train split, its interval taken on the validation split, is
written to ``src/mlsysopt/costmodel/data/latency_oracle`` (what ``builtin`` loads).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import write_json_atomic


def ci95(values: list[float]) -> dict[str, Any]:
    """Mean and 95% t-interval of ``values``."""
    from scipy import stats

    v = np.asarray(values, float)
    if v.size < 2 or np.allclose(v, v[0]):
        return {"mean": float(v.mean()), "ci95": [float(v.mean()), float(v.mean())], "n": int(v.size)}
    h = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return {"mean": float(v.mean()), "ci95": [float(v.mean() - h), float(v.mean() + h)], "n": int(v.size)}


def factory(name: str, seed: int) -> Any:
    """An unfitted predictor by name."""
    import mlsysopt.costmodel.oracle.oracle  # noqa: F401 - registers the GNN and the additive MLP
    from mlsysopt.costmodel.oracle.predictors import PREDICTORS

    cls = PREDICTORS[name]
    return cls(seed=seed) if cls.seeded else cls()


def nas_measure(count: int, seed: int) -> dict[str, Any]:
    """``count`` distinct random digits-space CNNs, each timed the way the space times it (``nas search``'s own
    measurement). Run before any fit, so the machine is as quiet as the collection's was."""
    from mlsysopt.nas.spaces import get_space

    space = get_space("digits")
    rng = np.random.default_rng(seed)
    archs: list[Any] = []
    while len(archs) < count:
        a = space.sample(rng, space.max_blocks)  # 4-cell CNNs, as every published figure of this part was timed
        if a not in archs:
            archs.append(a)
    return {"archs": archs, "measured_ms": [float(space._measure_latency(a)) for a in archs]}


def nas_precision(oracle: Any, timed: dict[str, Any], quantile: float = 0.7) -> dict[str, Any]:
    """The CNNs of :func:`nas_measure` against a limit at the ``quantile`` of their predicted latencies.
    ``precision``: of those the upper interval end (what ``nas search --latency-model`` uses) calls feasible, the
    fraction that meets the limit when timed; ``recall``: of those that meet it when timed, the fraction called
    feasible; the same for the point prediction (``*_point``)."""
    import torch

    from mlsysopt.costmodel.oracle.settings import Setting
    from mlsysopt.nas.spaces import get_space

    space = get_space("digits")
    preds = []
    for a in timed["archs"]:
        model = space.build(a).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            preds.append(oracle.predict_module(model, (torch.zeros(1, *space.input_shape),),
                                               Setting("torch", 1, "seq", 1)))  # fmt: skip
    count = len(preds)
    limit = float(np.quantile([p.ms for p in preds], quantile))
    measured = np.array(timed["measured_ms"])
    high = np.array([p.high for p in preds])
    point = np.array([p.ms for p in preds])
    ok = measured <= limit

    def rate(called: np.ndarray) -> tuple[float, float]:
        precision = float(ok[called].mean()) if called.any() else float("nan")
        recall = float(called[ok].mean()) if ok.any() else float("nan")
        return precision, recall

    (p_hi, r_hi), (p_pt, r_pt) = rate(high <= limit), rate(point <= limit)
    return {"limit_ms": limit, "candidates": count, "predicted_feasible": int((high <= limit).sum()),
            "measured_feasible": int(ok.sum()), "precision": p_hi, "recall": r_hi,
            "predicted_feasible_point": int((point <= limit).sum()), "precision_point": p_pt, "recall_point": r_pt,
            "measured_ms": measured.tolist(), "predicted_ms": point.tolist(),
            "predicted_high_ms": high.tolist()}  # fmt: skip


def shortlist(pred: Any, models: list[Any], tolerance: float = 0.2) -> dict[str, Any]:
    """Op-level ONNX Runtime settings within ``tolerance`` of the predicted best, per test model and batch."""
    from mlsysopt.costmodel.oracle.settings import SETTINGS

    hits, kept, total = [], 0, 0
    for batch in (1, 8):
        group = [s for s in SETTINGS if s.engine == "onnxruntime" and s.batch == batch]
        for m in models:
            if not all(s.key in m.ms for s in group):
                continue
            p = np.array([pred.predict(m.ops, m.nodes, s, m.edges) for s in group])
            t = np.array([m.ms[s.key] for s in group])
            keep = p <= p.min() * (1 + tolerance)
            hits.append(bool(t[keep].min() <= t.min() * 1.03))
            kept += int(keep.sum())
            total += len(group)
    return {"hit": float(np.mean(hits)), "measurements_saved": 1 - kept / total, "cases": len(hits),
            "tolerance": tolerance}  # fmt: skip


def predict_ms(oracle: Any, models: list[Any], count: int) -> dict[str, Any]:
    """Seconds from an ONNX file to a prediction (export not counted), median over ``count`` test models."""
    from mlsysopt.costmodel.oracle.families import build
    from mlsysopt.costmodel.oracle.settings import Setting
    from mlsysopt.graph.importers.onnx import export_onnx

    times = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in models[:count]:
            module, x = build(m.spec)
            path = export_onnx(module, (x,), Path(tmp) / "m.onnx", dynamic_batch=True)
            t0 = time.perf_counter()
            oracle.predict_onnx(path, Setting("onnxruntime", 1, "seq", 1))
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median": float(np.median(times)), "p90": float(np.quantile(times, 0.9)), "models": len(times)}


OP_COST_SETTINGS = (("onnxruntime", 1, "seq", 1), ("torch", 1, "seq", 1))


def op_cost_measure(folder: Path) -> dict[str, Any]:
    """The zoo models and the placement benchmark's two user models (a tiny ViT built on nn.TransformerEncoder, a
    GRU) exported to ONNX in ``folder`` (kept: ``--op-costs`` reads the file again), imported as graphs and timed
    here under ONNX Runtime 1 thread and PyTorch eager 1 thread, batch 1 (the collection's timing, median of 5
    rounds). Run before any fit."""
    import sys

    from mlsysopt import zoo
    from mlsysopt.costmodel.oracle.settings import Setting
    from mlsysopt.costmodel.oracle.timing import runners, time_model
    from mlsysopt.graph.importers.onnx import export_onnx, from_onnx

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from placement import user_models

    models = {name: zoo.get(name) for name in ("cnn", "mobilenet", "transformer", "resnet")}
    models.update(user_models())
    settings = [Setting(*s) for s in OP_COST_SETTINGS]
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (module, inputs) in models.items():
            x = inputs[0][:1]
            path = export_onnx(module.eval(), (x,), folder / f"{name}.onnx", dynamic_batch=True)
            times = time_model(runners(module, path, {1: x}, settings), 5, np.random.default_rng(0))
            out[name] = (from_onnx(path), {st.key: float(np.median(times[st.key])) for st in settings})
    return out


def sim_vs_measured_op_costs(timed: dict[str, Any]) -> dict[str, Any]:
    """``graph simulate --op-costs builtin`` of each model of :func:`op_cost_measure` on one CPU device against its
    latency measured there."""
    from mlsysopt.costmodel.oracle.op_costs import with_op_costs
    from mlsysopt.costmodel.oracle.settings import Setting
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.problem import PlacementProblem

    cluster = DeviceCluster([1e10], [True], [[np.inf]], [[0.0]], ["cpu0"], "dnn", {"source": "one CPU"}, [5e-6])
    settings = [Setting(*s) for s in OP_COST_SETTINGS]
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (graph, measured_s) in timed.items():
            row: dict[str, Any] = {"tasks": graph.num_nodes}
            for st in settings:
                g2, c2, _ = with_op_costs(graph, cluster, "builtin", setting=st)
                simulated = PlacementProblem(g2, c2).makespan(np.zeros(g2.num_nodes, np.int64))
                measured = measured_s[st.key]
                row[st.key] = {"measured_ms": measured * 1e3, "simulated_ms": simulated * 1e3,
                               "ratio": simulated / measured}  # fmt: skip
            out[name] = row
    ratios = [r[st.key]["ratio"] for r in out.values() for st in settings]
    return {"models": out, "within10": float(np.mean([abs(r - 1) <= 0.10 for r in ratios])),
            "within25": float(np.mean([abs(r - 1) <= 0.25 for r in ratios])),
            "how": "one device cpu0, every op on it; compute from the builtin oracle's per-op times (--op-costs); "
            "measured: the collection's timing (median of 5 rounds), before any fit"}  # fmt: skip


# ---------------------------------------------------------------------------- fits, two at a time
_WORKER: dict[str, Any] = {}


def load_models(data: str, quick: bool) -> tuple[list[Any], dict[str, Any]]:
    """The collection's models (a 250-model subsample with ``quick``) and its manifest."""
    from mlsysopt.costmodel.oracle.dataset import SHIPPED, load_collection

    models, manifest = load_collection(SHIPPED if data == "real:cpu" else data)
    if quick:
        rng = np.random.default_rng(0)
        models = [models[i] for i in sorted(rng.permutation(len(models))[:250])]
    return models, manifest


def _init_worker(data: str, quick: bool) -> None:
    """A fitting process: one PyTorch thread (two processes share the two cores), the collection read once."""
    import torch

    torch.set_num_threads(1)
    _WORKER["models"] = load_models(data, quick)[0]


def fit_job(job: tuple[Any, ...]) -> dict[str, Any]:
    """One fit and what it is scored on: ``("method", name, seed)`` on the train split, scored on valid and test;
    ``("lofo", name, family)`` on every other family's train and valid models, scored on the family;
    ``("fewshot", name, key, seeds)`` without setting ``key``, HELP's draws ``0..seeds-1``."""
    from mlsysopt.costmodel.oracle.evaluate import accuracy, fewshot
    from mlsysopt.costmodel.oracle.settings import SETTINGS, Setting

    models, settings = _WORKER["models"], list(SETTINGS)
    split = {s: [m for m in models if m.split == s] for s in ("train", "valid", "test")}
    kind, name = job[0], job[1]
    t0 = time.perf_counter()
    if kind == "method":
        p = factory(name, job[2]).fit(split["train"], settings)
        return {"job": job, "seconds": time.perf_counter() - t0, "valid": accuracy(p, split["valid"], settings),
                "test": accuracy(p, split["test"], settings), "fitted": p if job[2] == 0 else None}  # fmt: skip
    if kind == "lofo":
        train = [m for m in models if m.family != job[2] and m.split != "test"]
        held = [m for m in models if m.family == job[2]]
        return {"job": job, "within10": accuracy(factory(name, 0).fit(train, settings), held, settings)["within10"]}
    pool, held = split["train"] + split["valid"], Setting.parse(job[2])
    fitted = factory(name, 0).fit(pool, [s for s in settings if s.key != held.key])
    return {"job": job, "fewshot": [fewshot(None, pool, split["test"], held, settings, seed=s, fitted=fitted)
                                    for s in range(job[3])]}  # fmt: skip


def run_jobs(jobs: list[tuple[Any, ...]], data: str, quick: bool, workers: int) -> list[dict[str, Any]]:
    """:func:`fit_job` of every job, ``workers`` processes at a time (1: here), results in the jobs' order."""
    if workers <= 1:
        _init_worker(data, quick)
        return [fit_job(j) for j in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp.get_context("spawn"), _init_worker, (data, quick)) as pool:
        return list(pool.map(fit_job, jobs))


def main() -> None:
    """Run everything; write the JSON (and ship the default oracle with ``--ship``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="real:cpu")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/latency_oracle.json"))
    ap.add_argument("--quick", action="store_true",
                    help="a subsample, one seed, a few NAS models, 3 families left out (<= 2 min)")  # fmt: skip
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="flops,additive,gbm,additive+gbm,additive-mlp,gnn")
    ap.add_argument("--nas-models", type=int, default=60)
    ap.add_argument("--ship", action="store_true", help="write the default oracle into the package")
    ap.add_argument("--jobs", type=int, default=2, help="fits at a time, one PyTorch thread each (1: here)")
    args = ap.parse_args()
    from mlsysopt.costmodel.oracle.collect import noise_floor
    from mlsysopt.costmodel.oracle.evaluate import accuracy, best_setting, repeatability
    from mlsysopt.costmodel.oracle.oracle import SHIPPED_ORACLE, LatencyOracle  # registers every predictor
    from mlsysopt.costmodel.oracle.predictors import PREDICTORS
    from mlsysopt.costmodel.oracle.settings import SETTINGS

    t_start = time.perf_counter()
    load0 = os.getloadavg()
    models, manifest = load_models(args.data, args.quick)
    seeds = 1 if args.quick else args.seeds
    split = {s: [m for m in models if m.split == s] for s in ("train", "valid", "test")}
    settings = list(SETTINGS)
    # what is timed is timed first, on the quiet machine the collection was taken on: 40 min of fits heat it
    from mlsysopt.costmodel.oracle.timing import reference_ms

    t0, ref_before = time.perf_counter(), reference_ms()
    nas_timed = nas_measure(12 if args.quick else args.nas_models, 0)
    op_dir = Path(tempfile.mkdtemp(prefix="mlsysopt-op-costs-"))
    op_timed = op_cost_measure(op_dir) if args.ship or args.data == "real:cpu" else None
    measure_s = round(time.perf_counter() - t0, 1)
    print(f"timed {len(nas_timed['archs'])} NAS CNNs and the op-cost models first ({measure_s} s)", flush=True)
    methods = args.methods.split(",")
    out: dict[str, Any] = {"data": str(args.data), "models": {k: len(v) for k, v in split.items()},
                           "settings": [s.key for s in settings], "quick": args.quick,
                           "machine": manifest.get("machine")}  # fmt: skip
    # the longest fits first, so the two processes finish together
    slow = {"gnn": 0, "additive-mlp": 1}
    jobs = [("method", n, seed) for n in sorted(methods, key=lambda n: slow.get(n, 2))
            for seed in range(seeds if PREDICTORS[n].seeded else 1)]  # fmt: skip
    done = run_jobs(jobs, args.data, args.quick, args.jobs)
    valid_scores, test_scores, fit_s, first_fit = {}, {}, {}, {}
    for name in methods:
        runs = [r for r in done if r["job"][1] == name]
        first_fit[name] = runs[0]["fitted"]
        valid_scores[name] = {k: ci95([r["valid"][k] for r in runs]) for k in ("within10", "spearman", "mape")}
        test_scores[name] = {k: ci95([r["test"][k] for r in runs]) for k in ("within10", "spearman", "mape")}
        fit_s[name] = float(np.mean([r["seconds"] for r in runs]))
        print(f"{name}: valid within10 {valid_scores[name]['within10']['mean']:.3f}, test within10 "
              f"{test_scores[name]['within10']['mean']:.3f} spearman {test_scores[name]['spearman']['mean']:.4f} "
              f"({fit_s[name]:.1f} s)", flush=True)  # fmt: skip
    default = max(methods, key=lambda n: (valid_scores[n]["within10"]["mean"], valid_scores[n]["spearman"]["mean"]))
    out |= {"within10": {n: s["within10"]["mean"] for n, s in test_scores.items()},
            "spearman": {n: s["spearman"]["mean"] for n, s in test_scores.items()},
            "test": test_scores, "valid": valid_scores, "fit_seconds": fit_s, "default_oracle": default,
            "default_rule": "best validation within10 (Spearman breaks ties); never the test split"}  # fmt: skip
    print(f"default: {default}", flush=True)
    by_setting = {s.key: accuracy(first_fit[default], split["test"], [s])["within10"] for s in settings}
    out["within10_by_setting"] = {default: by_setting}
    out["repeatability"] = repeatability(split["test"], settings)
    print(f"repeatability of the test labels (a round vs its other rounds): {out['repeatability']['within10']:.3f}",
          flush=True)  # fmt: skip
    best = first_fit[default]  # seed 0 on the train split: what best_setting, the shortlist and the oracle use
    bs = best_setting(best, split["test"], settings)
    out |= {"best_setting_accuracy": bs["accuracy"], "best_setting_regret": bs["regret"], "best_setting": bs}
    held_keys = ("ort-t2-par-b8", "torch-t2-b8")  # one fit per held setting: the draws differ, the fit does not
    families = sorted({m.family for m in models})
    if args.quick:  # a smoke run: one setting kept out, three families left out
        held_keys, families = held_keys[:1], [f for f in ("encoder", "gru", "resnet") if f in families]
    later = [("fewshot", default, k, seeds) for k in held_keys]
    later += [("lofo", default, fam) for fam in families]
    done = run_jobs(later, args.data, args.quick, args.jobs)
    lofo = {r["job"][2]: r["within10"] for r in done if r["job"][0] == "lofo"}
    print("lofo: " + ", ".join(f"{k} {v:.3f}" for k, v in lofo.items()), flush=True)
    out["within10_lofo"] = lofo
    out["fewshot_all"] = [f for r in done if r["job"][0] == "fewshot" for f in r["fewshot"]]
    out["fewshot"] = {n: {k: float(np.mean([f[n][k] for f in out["fewshot_all"]])) for k in ("spearman", "within10")}
                      for n in ("0", "5", "10", "20")}  # fmt: skip
    print(f"fewshot: {out['fewshot']}", flush=True)
    sl = shortlist(best, split["test"])
    out |= {"serving_shortlist_hit": sl["hit"], "serving_measurements_saved": sl["measurements_saved"],
            "serving_shortlist": sl}  # fmt: skip
    oracle = LatencyOracle.fit(best, split["train"], split["valid"], settings, manifest.get("machine", ""),
                               fitted=True)  # fmt: skip
    if args.ship:
        oracle.save(SHIPPED_ORACLE)
        out["shipped"] = {"path": str(SHIPPED_ORACLE), "kb": round((SHIPPED_ORACLE / "oracle.json.gz").stat().st_size
                                                                   / 1024, 1)}  # fmt: skip
    out["predict_ms"] = predict_ms(oracle, split["test"], 10 if args.quick else 40)["median"]
    nas = nas_precision(oracle, nas_timed)
    out |= {"nas_feasible_precision": nas["precision"], "nas": nas, "measured_first_seconds": measure_s}
    if op_timed is not None:  # --op-costs reads the shipped oracle
        out["sim_vs_measured_op_costs"] = sim_vs_measured_op_costs(op_timed)
        print(f"op-costs: {out['sim_vs_measured_op_costs']['within10']:.2f} within 10%", flush=True)
    shutil.rmtree(op_dir, ignore_errors=True)
    rows = [r for r in (manifest.get("rows") or [])]
    out["noise_floor"] = manifest.get("noise_floor") if not rows else noise_floor(rows)
    out["collection"] = {k: manifest.get(k) for k in ("models", "families", "load_1min", "others_cpu", "seconds",
                                                      "updated", "machine")}  # fmt: skip
    targets = {"within10>=0.90": out["within10"][default] >= 0.90, "spearman>=0.97": out["spearman"][default] >= 0.97,
               "lofo>=0.70 every family": all(v >= 0.70 for v in lofo.values()),
               "best_setting>=0.80": bs["accuracy"] >= 0.80, "regret<=0.03": bs["regret"] <= 0.03,
               "fewshot10_spearman>=0.90": out["fewshot"]["10"]["spearman"] >= 0.90,
               "nas_precision>=0.95": nas["precision"] >= 0.95, "shortlist_hit>=0.90": sl["hit"] >= 0.90,
               "saved>=0.30": sl["measurements_saved"] >= 0.30, "predict<=20ms": out["predict_ms"] <= 20}  # fmt: skip
    out["targets_met"] = targets
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    out["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    out["load_before_after"] = [round(load0[0], 2), round(os.getloadavg()[0], 2)]
    out["reference_ms_before_after"] = [ref_before, reference_ms()]  # the host's speed: collect-latency's workload
    out["units"] = {
        "predict_ms": "ms",
        "reference_ms_before_after": "ms",
        "measured_first_seconds": "s",
        "best_setting_regret": "fraction slower than the measured fastest",
    }
    write_json_atomic(args.out, out)
    print({k: out[k] for k in ("default_oracle", "within10", "spearman", "within10_lofo", "best_setting_accuracy",
                               "best_setting_regret", "fewshot", "nas_feasible_precision", "serving_shortlist_hit",
                               "serving_measurements_saved", "predict_ms", "noise_floor", "targets_met",
                               "seconds")})  # fmt: skip
    if "sim_vs_measured_op_costs" in out:
        for name, row in out["sim_vs_measured_op_costs"]["models"].items():
            print(name, {k: round(v["ratio"], 3) for k, v in row.items() if isinstance(v, dict)})


if __name__ == "__main__":
    main()
