"""How GiPH's search defaults were chosen: proposals per batch (K) and policy refresh, on validation problems.

The validation problems are drawn from the *training* distribution (``mlsysopt.placement.distribution``) with
seeds past every training seed (``train_search.VALIDATION_OFFSET``): never trained on, and never a benchmark
set. Each configuration runs at equal evaluations (the default budget) and at 1 s of wall clock; the figure is
the geomean makespan / HEFT over the problems. ``local_search`` is the same search with uniform proposals.

    python benchmarks/placement_validation.py [--problems 24] --out docs/benchmarks/placement_validation.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np

from mlsysopt.io import write_json_atomic


def main() -> None:
    """Every configuration on every validation problem, both budgets; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--policy", default="pretrained")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/placement_validation.json"))
    args = ap.parse_args()
    import torch

    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement import GiPH, LocalSearch, SearchConfig, run_method
    from mlsysopt.placement.imitation import training_problem
    from mlsysopt.placement.train_search import VALIDATION_OFFSET

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    giph = GiPH.load(args.policy)
    configs = {f"local_search K={k}": LocalSearch(SearchConfig(proposals=k)) for k in (4, 8, 16)}
    for k in (4, 8, 16):
        configs[f"giph K={k} refresh=1"] = giph.variant(config=SearchConfig(proposals=k))
    for r in (4, 16):
        configs[f"giph K=8 refresh={r}"] = giph.variant(refresh=r)
    ratios: dict[str, dict[str, list[float]]] = {"evaluations": {}, "wall_clock": {}}
    for k in range(args.problems):
        problem = training_problem(VALIDATION_OFFSET + k, "mixed")
        heft = run_method("heft", problem).makespan
        for name, placer in configs.items():
            r = placer.solve(problem, seed=0).makespan
            ratios["evaluations"].setdefault(name, []).append(r / heft)
            fresh = PlacementProblem(problem.graph, problem.cluster)
            w = placer.solve(fresh, budget=10**9, seed=0, timeout=1.0).makespan
            ratios["wall_clock"].setdefault(name, []).append(w / heft)
        print(f"problem {k}: {problem.num_tasks} tasks, {problem.num_devices} devices", flush=True)
    summary = {mode: {name: float(np.exp(np.mean(np.log(v)))) for name, v in by.items()} for mode, by in ratios.items()}
    for mode, by in summary.items():
        print(mode, {k: round(v, 4) for k, v in by.items()})
    write_json_atomic(
        args.out,
        {
            "geomean_ratio_to_heft": summary,
            "ratios": ratios,
            "problems": args.problems,
            "data": "validation problems of the training distribution (mixed), seeds from VALIDATION_OFFSET",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": time.perf_counter() - t0,
        },
    )


if __name__ == "__main__":
    main()
