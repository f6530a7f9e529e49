"""BANANAS' acquisition knobs (candidates, parents, acquisition, ensemble): tuned on the tuning tables, then checked
on the held-out ones (issue #34, the 30-evaluation target).

BANANAS is the default of the medium budget class (20 to 59 evaluations), where it ties ``epnas_cold``, ``epnas``,
``zero_shot`` and ``bananas_prior`` on the held-out tables. Its ``init`` and ``refit_every`` were tuned; the knobs of
its acquisition were the paper's defaults scaled down (100 mutated candidates of the 10 best, independent Thompson
sampling, 5 members of 100 epochs) and never tried. This script tries each one away from the shipped value, one knob
at a time (:data:`VARIANTS`), with the protocol of ``benchmarks/nas.py`` (NAS-Bench-Graph, both constraint regimes,
validation regret, batches of 2).

The rule, fixed before any figure: on the tuning tables (physics, arxiv, proteins; ``--tune-seeds`` 5, the seeds of
the ``--tune`` run), each variant's mean over budgets 10, 30 and 100 of its regret relative to the best variant's
at that budget (:func:`nas.relative_regret`). The shipped knobs stay unless the lowest variant is more than
:data:`~nas.TIE` (1%) below them. If one is, it goes to the held-out tables (cora, citeseer, pubmed, cs, computers,
photo; ``--seeds`` 10) against the shipped knobs, paired by (dataset, regime, seed), and becomes the default only if
its mean ratio at 30 is below 1 and no budget's 95% bootstrap interval lies wholly above 1 (it must help where it is
the default and harm nowhere). ``--confirm LABEL`` checks one variant on the held-out tables without the tuning.

    python benchmarks/nas_bananas_knobs.py [--tune-seeds 5] [--seeds 10] [--jobs 2] [--cache DIR] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nas
from nas import (
    BUDGETS,
    DATASETS,
    TIE,
    TUNING_DATASETS,
    regret_ratio,
    relative_regret,
    search_all,
    summarise,
    write_result,
)

SHIPPED = "bananas"
#: one knob away from the shipped BANANAS each (its knobs: ``BananasConfig``)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    SHIPPED: ("bananas", {}),
    "candidates300": ("bananas", {"candidates": 300}),
    "candidates1000": ("bananas", {"candidates": 1000}),
    "parents5": ("bananas", {"parents": 5}),
    "parents20": ("bananas", {"parents": 20}),
    "ucb": ("bananas", {"acquisition": "ucb"}),
    "mean": ("bananas", {"acquisition": "mean"}),
    "members10": ("bananas", {"members": 10}),
    "epochs200": ("bananas", {"pred_epochs": 200}),
}


def choose(rel: dict[str, float]) -> str:
    """The shipped knobs unless the lowest variant is more than :data:`TIE` below them."""
    best = min(rel, key=rel.get)
    return best if rel[best] < rel[SHIPPED] / (1 + TIE) else SHIPPED


def adopt(ratio: dict[str, list[float]]) -> bool:
    """The held-out rule: mean ratio at 30 below 1 and no budget's interval wholly above 1."""
    return ratio["30"][0] < 1 and all(lo <= 1 for _, lo, _ in ratio.values())


def main() -> None:
    """Tune, then check on the held-out tables; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune-seeds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--confirm", choices=sorted(VARIANTS), help="no tuning: check this variant on the held-out tables")
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    ap.add_argument("--cache", type=Path, help="folder keeping each search's result (a cut run resumes)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    nas.JOB_WORKERS = args.jobs
    out: dict[str, Any] = {"command": "python benchmarks/nas_bananas_knobs.py " + " ".join(sys.argv[1:]),
                           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                           "load_average_at_start": os.getloadavg()[0],
                           "variants": {k: v[1] for k, v in VARIANTS.items()}}  # fmt: skip
    t0 = time.perf_counter()
    chosen = args.confirm
    if chosen is None:
        print(f"tuning tables {', '.join(TUNING_DATASETS)}: {len(VARIANTS)} variants, {args.tune_seeds} seeds")
        tuned = search_all(TUNING_DATASETS, args.tune_seeds, BUDGETS, VARIANTS, cache=args.cache)
        tsum = summarise(tuned["cells"], TUNING_DATASETS, BUDGETS, reference=SHIPPED)
        rel = relative_regret(tsum["val_regret"], VARIANTS, BUDGETS)
        chosen = choose(rel)
        out["tuning"] = {"datasets": list(TUNING_DATASETS), "seeds": args.tune_seeds,
                         "val_regret": tsum["val_regret"], "relative_regret": rel, "chosen": chosen,
                         "wall_s_per_search_at_100": tsum["wall_s"]}  # fmt: skip
        for b in BUDGETS:
            print(f"  {b:3d}: " + "  ".join(f"{m} {v:.5f}" for m, v in tsum["val_regret"][str(b)].items()))
        print("  relative regret " + ", ".join(f"{k} {v:.3f}" for k, v in rel.items()) + f"; chosen {chosen}")
    if chosen != SHIPPED:
        pair = {k: VARIANTS[k] for k in (SHIPPED, chosen)}
        print(f"held-out tables {', '.join(DATASETS)}: {chosen} against {SHIPPED}, {args.seeds} seeds", flush=True)
        held = search_all(DATASETS, args.seeds, BUDGETS, pair, cache=args.cache)
        hsum = summarise(held["cells"], DATASETS, BUDGETS, reference=SHIPPED)
        rng = np.random.default_rng(0)
        ratio = {str(b): regret_ratio(held["cells"], chosen, SHIPPED, b, rng) for b in BUDGETS}
        out["held_out"] = {"datasets": list(DATASETS), "seeds": args.seeds, "val_regret": hsum["val_regret"],
                           "ratio_to_shipped": ratio, "adopted": adopt(ratio),
                           "top1pct_rate": hsum["top1pct_rate"]}  # fmt: skip
        for b in BUDGETS:
            print(f"  {b:3d}: ratio {chosen}/{SHIPPED} {ratio[str(b)]}")
        print(f"  adopted: {out['held_out']['adopted']}")
    write_result(out, args.out, t0)


if __name__ == "__main__":
    main()
