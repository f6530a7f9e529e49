"""BANANAS' refit interval (``refit_every``, NASLib's k): chosen on the tuning tables, confirmed on the held-out ones.

BANANAS trains its 5-member ensemble before every ask that has new data (``refit_every=1``); NASLib's BANANAS trains
once per ``k = 10`` queries. Each training is the method's whole cost per trial on a user's own objective
(issue #34: overhead over plain Optuna ≤ 20% at 30 trials), so a longer interval is worth having if it costs no
regret. Protocol of ``benchmarks/nas.py`` (NAS-Bench-Graph, both constraint regimes, validation regret), but
**sequential** (``--batch 1``: one evaluation per ask, as ``Study.optimize`` and ``nas search --workers 1`` run; with
``benchmarks/nas.py``'s batches of 2 the ensemble is trained every 2 evaluations anyway, so intervals 1 and 2 are
the same search there): the intervals of :data:`INTERVALS` on the tuning tables (physics, arxiv, proteins),
``--tune-seeds`` seeds (5: the seeds of the ``--tune`` run that chose the defaults), at budgets 10, 30 and 100. The
rule (that of EPNAS's handover, ``choose_handover``): the mean over the budgets of each interval's regret relative to
the best interval's at that budget; the **longest** interval within :data:`~nas.TIE` (1%) of the lowest is chosen
(tied intervals: the one that trains least). Then, never before, the held-out tables (cora, citeseer, pubmed, cs,
computers, photo), ``--seeds`` seeds: the chosen interval against ``refit_every=1``, paired by (dataset, regime,
seed), mean validation regret ratio with a 95% bootstrap interval per budget, and the seconds per search.

``--confirm K`` skips the tuning and checks interval K on the held-out tables (e.g. with ``--batch 2``: the protocol
of ``benchmarks/nas.py``, whose held-out figures for BANANAS then hold for the chosen interval).

    python benchmarks/nas_bananas_refit.py [--batch 1] [--tune-seeds 5] [--seeds 10] [--confirm K] [--jobs 2]
                                           --out FILE.json
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
from nas import BUDGETS, DATASETS, TIE, TUNING_DATASETS, regret_ratio, search_all, summarise, write_result

INTERVALS = (1, 2, 5, 10)


def _methods(intervals: tuple[int, ...]) -> dict[str, tuple[str, dict[str, Any]]]:
    return {f"bananas_k{k}": ("bananas", {"refit_every": k}) for k in intervals}


def choose(val_regret: dict[str, dict[str, float]], budgets: tuple[int, ...]) -> tuple[int, dict[str, float]]:
    """The longest interval whose mean relative regret is within :data:`TIE` of the lowest, and every interval's."""
    rel = {}
    for label in val_regret[str(budgets[0])]:
        rel[label] = float(np.mean([val_regret[str(b)][label] / max(min(val_regret[str(b)].values()), 1e-12)
                                    for b in budgets]))  # fmt: skip
    best = min(rel.values())
    tied = [int(label.removeprefix("bananas_k")) for label, r in rel.items() if r <= best * (1 + TIE)]
    return max(tied), rel


def tune(seeds: int, out: dict[str, Any]) -> int:
    """Every interval on the tuning tables; the chosen one (its figures go in ``out["tuning"]``)."""
    print(f"tuning tables {', '.join(TUNING_DATASETS)}: refit_every {INTERVALS}, {seeds} seeds", flush=True)
    tuned = search_all(TUNING_DATASETS, seeds, BUDGETS, _methods(INTERVALS))
    tsum = summarise(tuned["cells"], TUNING_DATASETS, BUDGETS, reference="bananas_k1")
    chosen, rel = choose(tsum["val_regret"], BUDGETS)
    out["tuning"] = {"datasets": list(TUNING_DATASETS), "seeds": seeds, "val_regret": tsum["val_regret"],
                     "relative_regret": rel, "chosen": chosen, "wall_s_per_search_at_100": tsum["wall_s"],
                     "rule": "longest interval within 1% of the lowest mean relative regret (10, 30, 100)"}  # fmt: skip
    for b in BUDGETS:
        print(f"  {b:3d}: " + "  ".join(f"{m} {v:.5f}" for m, v in tsum["val_regret"][str(b)].items()), flush=True)
    print(f"  relative regret {rel}; chosen refit_every={chosen}", flush=True)
    return chosen


def main() -> None:
    """Tune, then confirm; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1, help="evaluations per ask (benchmarks/nas.py: 2)")
    ap.add_argument("--tune-seeds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--confirm", type=int, help="no tuning: check this interval against 1 on the held-out tables")
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    nas.JOB_WORKERS, nas.BATCH = args.jobs, args.batch  # every job carries the batch to its process
    out: dict[str, Any] = {"command": "python benchmarks/nas_bananas_refit.py " + " ".join(sys.argv[1:]),
                           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                           "load_average_at_start": os.getloadavg()[0], "intervals": list(INTERVALS),
                           "batch": args.batch}  # fmt: skip
    t0 = time.perf_counter()
    chosen = tune(args.tune_seeds, out) if args.confirm is None else args.confirm
    pair = (1, chosen) if chosen != 1 else (1,)
    print(f"held-out tables {', '.join(DATASETS)}: refit_every {pair}, {args.seeds} seeds", flush=True)
    held = search_all(DATASETS, args.seeds, BUDGETS, _methods(pair))
    hsum = summarise(held["cells"], DATASETS, BUDGETS, reference="bananas_k1")
    rng = np.random.default_rng(0)
    ratio = {}
    if chosen != 1:
        for b in BUDGETS:
            ratio[str(b)] = regret_ratio(held["cells"], f"bananas_k{chosen}", "bananas_k1", b, rng)
    out["held_out"] = {"datasets": list(DATASETS), "seeds": args.seeds, "val_regret": hsum["val_regret"],
                       "ci95_val_regret": hsum["ci95_val_regret"], "ratio_chosen_to_k1": ratio,
                       "wall_s_per_search_at_100": hsum["wall_s"], "top1pct_rate": hsum["top1pct_rate"]}  # fmt: skip
    for b in BUDGETS:
        print(f"  {b:3d}: " + "  ".join(f"{m} {v:.5f}" for m, v in hsum["val_regret"][str(b)].items())
              + (f"  ratio {ratio[str(b)]}" if ratio else ""), flush=True)  # fmt: skip
    write_result(out, args.out, t0)


if __name__ == "__main__":
    main()
