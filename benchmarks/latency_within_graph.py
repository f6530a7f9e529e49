"""Within-graph ranking on the new real data (issue #32 item 5): GST+EFD and the tree rankers against the latency
oracle's regressors, on the same (model, batch) groups of the latency collection ``real:cpu``.

The GST modes and the tree baselines (scikit-learn HistGB regression, LightGBM ``lambdarank``, XGBoost
``rank:pairwise``) train on the collection's layout form (``benchmarks/latency_layout.py``: one graph per model and
batch, its six settings as configurations) through ``benchmarks/gst.py --real-data``; this script fits the latency
oracle's predictors (FLOPs-proportional, nn-Meter-style additive, LightGBM regression on graph summaries, the
additive + LightGBM ensemble, the GraphSAGE sum -- every one a regression on absolute milliseconds) on the same
training models, ranks each test group's settings by predicted milliseconds and scores ordered pair accuracy (OPA)
and top-1 slowdown with the cost model's own metrics (:func:`mlsysopt.costmodel.oracle.evaluate.within_graph`).
Seeds: 3 for the seeded methods, means with 95% t-intervals over seeds.

    python benchmarks/latency_within_graph.py --gst runs/bench/gst_latency_layout.json --out FILE.json
    [--reuse FILE.json: an earlier run's oracle figures, merged with a new --gst]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mlsysopt.costmodel.oracle.dataset import SHIPPED, load_collection
from mlsysopt.costmodel.oracle.evaluate import within_graph
from mlsysopt.costmodel.oracle.oracle import LatencyOracle  # noqa: F401 - registers the GNN and the additive MLP
from mlsysopt.costmodel.oracle.predictors import PREDICTORS
from mlsysopt.costmodel.oracle.settings import SETTINGS
from mlsysopt.io import write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency_oracle import ci95, factory

METRICS = ("opa", "slowdown_top1", "kendall")


def main() -> None:
    """Fit, score, merge with the GST run's figures and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="flops,additive,gbm,additive+gbm,gnn")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gst", type=Path, help="benchmarks/gst.py's JSON of the layout form (--real-data)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/latency_within_graph.json"))
    ap.add_argument("--reuse", type=Path, help="an earlier JSON of this script: its oracle figures, nothing refit")
    args = ap.parse_args()
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    models, manifest = load_collection(SHIPPED)
    split = {s: [m for m in models if m.split == s] for s in ("train", "valid", "test")}
    settings = list(SETTINGS)
    out: dict[str, Any] = {"data": "REAL: real:cpu, the latency collection (issue #32); groups = (model, batch)",
                           "machine": manifest.get("machine"), "oracle": {}}  # fmt: skip
    if args.reuse is not None:
        kept = json.loads(args.reuse.read_text())
        out["oracle"], out["oracle_date"] = kept["oracle"], kept["date"]
    for name in [] if args.reuse is not None else args.methods.split(","):
        runs: dict[str, list[dict[str, Any]]] = {"valid": [], "test": []}
        for seed in range(args.seeds if PREDICTORS[name].seeded else 1):
            p = factory(name, seed).fit(split["train"], settings)
            for part in runs:
                runs[part].append(within_graph(p, split[part], settings))
        out["oracle"][name] = {part: {k: ci95([r[k] for r in rs]) for k in METRICS} | {"groups": rs[0]["num_graphs"]}
                               for part, rs in runs.items()}  # fmt: skip
        t = out["oracle"][name]["test"]
        print(f"{name}: test opa {t['opa']['mean']:.4f}, top-1 slowdown {t['slowdown_top1']['mean']:.4f}", flush=True)
    if args.gst is not None:
        real = json.loads(args.gst.read_text())["quality"]["real"]
        out["gst_layout"] = {k: {"opa": v["opa"], "opa_seed_ci": v.get("opa_seed_ci"),
                                 "slowdown_top1": v.get("slowdown_top1"), "opa_per_seed": v.get("opa_per_seed")}
                             for k, v in real.items()}  # fmt: skip
        trees = {k: v for k, v in real.items() if k in ("trees", "lightgbm", "xgboost")}
        rows = {**{k: (v["opa"], v.get("slowdown_top1")) for k, v in trees.items()},
                **{f"oracle:{k}": (v["test"]["opa"]["mean"], v["test"]["slowdown_top1"]["mean"])
                   for k, v in out["oracle"].items()}}  # fmt: skip
        if "gst_efd" in real and rows:
            best_opa = max(rows, key=lambda k: rows[k][0])
            best_top1 = min(rows, key=lambda k: rows[k][1] if rows[k][1] is not None else float("inf"))
            g = real["gst_efd"]
            out["targets"] = {
                "gst_efd_opa>=best_other": {"gst_efd": g["opa"], "best": best_opa, "value": rows[best_opa][0],
                                             "met": g["opa"] >= rows[best_opa][0]},
                "gst_efd_top1<=best_other": {"gst_efd": g.get("slowdown_top1"), "best": best_top1,
                                              "value": rows[best_top1][1],
                                              "met": (g.get("slowdown_top1") or 1e9) <= rows[best_top1][1]},
            }  # fmt: skip
            print(json.dumps(out["targets"], indent=1))
    out |= {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "seconds": time.perf_counter() - t0,
            "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "units": {"slowdown_top1": "fraction slower than the group's measured fastest"}}  # fmt: skip
    write_json_atomic(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
