"""Would an ensemble of two rankers beat both? Two ``costmodel predict --out`` results on the same layout graphs,
each graph's scores standardised and averaged, scored with the cost model's own metrics against the runtimes.

An exploratory check for issue #32 item 5 (GST+EFD with the tree model, "named as such"), not a library mode:

    python benchmarks/rank_ensemble.py runs/ens/pred_gst/result.json runs/ens/pred_lgb/result.json \
        --data runs/latency_layout_all --split test [--weights 0.5,0.5]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.metrics import ranking_metrics


def standardised(scores: list[float]) -> np.ndarray:
    """A graph's scores as z-scores (a constant vector stays 0)."""
    s = np.asarray(scores, dtype=np.float64)
    sd = s.std()
    return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)


def main() -> None:
    """Score each ranker alone and the weighted ensemble."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", nargs=2, type=Path)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--weights", default="0.5,0.5")
    args = ap.parse_args()
    w = [float(x) for x in args.weights.split(",")]
    preds = [json.loads(p.read_text())["graphs"] for p in args.predictions]
    ds = load_dataset(args.data, args.split)
    truth = {ds.names[i]: ds.record(i).runtime for i in range(len(ds))}
    names = [n for n in truth if all(n in p for p in preds)]
    rows = {}
    for label, get in (
        ("first", lambda n: np.asarray(preds[0][n]["scores"])),
        ("second", lambda n: np.asarray(preds[1][n]["scores"])),
        ("ensemble", lambda n: w[0] * standardised(preds[0][n]["scores"]) + w[1] * standardised(preds[1][n]["scores"])),
    ):
        m = ranking_metrics([get(n) for n in names], [truth[n] for n in names])
        rows[label] = {k: round(m[k], 4) for k in ("opa", "slowdown_top1", "kendall")}
    print(json.dumps({"graphs": len(names), "weights": w, **rows}, indent=1))


if __name__ == "__main__":
    main()
