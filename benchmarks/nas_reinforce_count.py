"""REINFORCE with the block count learned against drawn uniformly, on a user's own objective (issue #34).

Where a user's space makes the block count a choice (``Blocks(min=1, max=3)``), ``reinforce`` now decodes the count
as its controller's first decision (``learn_count=True``, the default); ``learn_count=False`` is the earlier search,
which drew the count uniformly and learned only the blocks' decisions. Both run on the own objective of
``benchmarks/nas_own.py`` (``benchmarks/own_space.py``: a scikit-learn MLP on the bundled digits, 1-3 hidden layers
and 4 hyperparameters, at most 4,000 parameters, validation accuracy maximised), ``--seeds`` seeds x ``--budget``
trainings each, the same seeds for both. Reported per budget in ``--at`` (best so far after that many trainings):
the mean best, the paired difference learned - drawn with its 95% t-interval, and the share of trainings per layer
count. The values are accuracies (no timing), so the run need not be alone. Run from the repository root:

    python benchmarks/nas_reinforce_count.py --out benchmarks/results/nas_reinforce_count.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import own_space  # noqa: E402

MAX_PARAMS = 4000
ARMS = {"learned": True, "drawn": False}


def search(seed: int, budget: int, learn_count: bool) -> dict[str, Any]:
    """One REINFORCE search: the value and layer count of every training, in order."""
    from mlsysopt.nas import Study

    study = Study(own_space.space, constraints={"max_params": MAX_PARAMS}, method="reinforce", budget=budget,
                  seed=seed, learn_count=learn_count).optimize(own_space.train, budget)  # fmt: skip
    return {
        "values": [t.value for t in study.trials],
        "layers": [len(t.params["blocks"]) for t in study.trials],
    }


def best_at(run: dict[str, Any], n: int) -> float:
    """The best value among the first ``n`` trainings that returned one."""
    return max(v for v in run["values"][:n] if v is not None)


def paired(a: list[float], b: list[float]) -> dict[str, Any]:
    """Mean of ``a - b`` with its 95% t-interval (the library's :func:`~mlsysopt.serving.stats.mean_ci`)."""
    from mlsysopt.serving.stats import mean_ci

    d = [x - y for x, y in zip(a, b, strict=True)]
    return {"mean": statistics.fmean(d), "ci95": list(mean_ci(d))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--at", default="30,100", help="budgets read off each search (best so far)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from mlsysopt.io import write_json_atomic

    at = [int(x) for x in args.at.split(",")]
    load = {"before": os.getloadavg()}
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for s in range(args.seeds):
        for arm, learn in ARMS.items():
            runs[arm].append(search(s, args.budget, learn))
        print(f"seed {s}: " + ", ".join(f"{a} {best_at(r[-1], args.budget):.4f}" for a, r in runs.items()), flush=True)
    summary: dict[str, Any] = {}
    for n in at:
        best = {arm: [best_at(r, n) for r in rs] for arm, rs in runs.items()}
        summary[str(n)] = {
            "mean_best": {arm: statistics.fmean(v) for arm, v in best.items()},
            "learned_minus_drawn": paired(best["learned"], best["drawn"]),
            "layers_share": {
                arm: {k: sum(layer == k for r in rs for layer in r["layers"][:n]) / (n * len(rs)) for k in (1, 2, 3)}
                for arm, rs in runs.items()
            },
        }
    result = {
        "problem": "scikit-learn MLP on digits (benchmarks/own_space.py), 1-3 layers + 4 hyperparameters, "
        f"<= {MAX_PARAMS} parameters; validation accuracy",
        "seeds": args.seeds,
        "budget": args.budget,
        "summary": summary,
        "runs": runs,
        "date": started.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "seconds": time.perf_counter() - t0,
        "load": {**load, "after": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, result)
    for n, v in summary.items():
        print(n, v)


if __name__ == "__main__":
    main()
