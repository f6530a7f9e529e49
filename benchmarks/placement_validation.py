"""How GiPH's search defaults were chosen: proposals per batch (K) and policy refresh, on validation problems.

The validation problems are drawn from the *training* distribution (``mlsysopt.placement.distribution``) with
seeds past every training seed (``train_search.VALIDATION_OFFSET``): never trained on, and never a benchmark
set. Each configuration runs at equal evaluations (the default budget) and at 1 s of wall clock; the figure is
the geomean makespan / HEFT over the problems. ``local_search`` is the same search with uniform proposals.

    python benchmarks/placement_validation.py [--problems 24] --out benchmarks/results/placement_validation.json

``--anytime`` instead decides whether the default keeps the learned proposer (issue #31): on the same validation
problems, in both execution semantics, GiPH (learned proposals) against the same search with uniform proposals
(``local_search``) at equal evaluations and at 1 s, and the evaluations and seconds each takes to get within 1% of
the better final makespan (3 seeds). The rule: the policy stays in the default only if it reaches 1% in <= 0.67x
the evaluations of uniform proposals and does not lose at 1 s.

    python benchmarks/placement_validation.py --anytime --out benchmarks/results/placement_validation_anytime.json

``--order-moves`` chooses the ordered search's move mix (issue #31 item 3): under ``ordered`` execution the default
(``local_search``) with order moves given each share of its draws (``--shares``; 0 = map moves only, the order
re-derived by upward rank and insertion), at equal evaluations (the default budget), ``--seeds`` seeds, on
validation problems of each kind (``--kinds``, drawn with ``distribution.sample_problem`` past every training
seed; ``--max-tasks`` bounds their size). Figures per kind and share: the geomean ratio to HEFT's own schedule
with a 95% bootstrap interval over problems, and the paired ratio to share 0. ``--held-out`` runs the same
comparison on ``benchmarks/placement.py``'s held-out problems (its sets as the kinds) at its equal-evaluations
budget, to confirm a choice made on the validation problems (never to make it).

    python benchmarks/placement_validation.py --order-moves --problems 12 --out runs/bench/order_moves.json
    python benchmarks/placement_validation.py --order-moves --held-out --shares 0,0.25 --out runs/bench/om_ho.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import write_json_atomic


def main() -> None:
    """Every configuration on every validation problem, both budgets; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--policy", default="pretrained")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/placement_validation.json"))
    ap.add_argument("--anytime", action="store_true", help="the learned-vs-uniform decision (issue #31)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per problem (--anytime, --order-moves)")
    ap.add_argument("--order-moves", action="store_true", help="the ordered search's move mix (issue #31 item 3)")
    ap.add_argument("--shares", default="0,0.25,0.5", help="order-move shares to compare (--order-moves)")
    ap.add_argument("--kinds", default="workflow,dnn,layered", help="validation kinds (--order-moves)")
    ap.add_argument("--held-out", action="store_true", help="benchmarks/placement.py's problems (--order-moves)")
    ap.add_argument("--max-tasks", type=int, default=200, help="largest validation graph (--order-moves)")
    args = ap.parse_args()
    if args.anytime:
        anytime(args)
        return
    if args.order_moves:
        order_move_mix(args)
        return
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


def anytime(args: argparse.Namespace) -> None:
    """GiPH vs uniform proposals on the validation problems, both semantics: the default's decision."""
    import torch

    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement import GiPH, run_method
    from mlsysopt.placement.imitation import training_problem
    from mlsysopt.placement.methods import heft_makespan
    from mlsysopt.placement.train_search import VALIDATION_OFFSET

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    giph = GiPH.load(args.policy)
    methods = ("giph", "local_search")
    rows: dict[str, list[dict[str, Any]]] = {"fifo": [], "ordered": []}
    for k in range(args.problems):
        base = training_problem(VALIDATION_OFFSET + k, "mixed")
        for execution in rows:
            problem = base.with_execution(execution)
            heft = heft_makespan(problem)
            row: dict[str, Any] = {"tasks": problem.num_tasks, "devices": problem.num_devices, "seeds": []}
            for s in range(args.seeds):
                runs = {m: run_method(m, problem, None, s, giph) for m in methods}
                target = 1.01 * min(r.makespan for r in runs.values())
                seed_row: dict[str, Any] = {}
                for m, r in runs.items():
                    hist = np.asarray(r.history)
                    hit = np.flatnonzero(hist <= target * (1 + 1e-12))
                    j = int(hit[0]) if hit.size else len(hist) - 1  # never within 1%: its whole budget
                    fresh = PlacementProblem(problem.graph, problem.cluster, execution)
                    clock = run_method(m, fresh, 10**9, s, giph, timeout=1.0).makespan
                    seed_row[m] = {"evaluations": r.makespan / heft, "wall_clock": clock / heft,
                                   "evals_to_1pct": j + 1, "seconds_to_1pct": r.elapsed[j]}  # fmt: skip
                row["seeds"].append(seed_row)
            rows[execution].append(row)
        print(f"problem {k}: {base.num_tasks} tasks, {base.num_devices} devices", flush=True)
    summary: dict[str, Any] = {}
    for execution, by in rows.items():
        flat = [seed for row in by for seed in row["seeds"]]

        def gm(values: list[float]) -> float:
            return float(np.exp(np.mean(np.log(values))))

        sem = {m: {key: gm([f[m][key] for f in flat]) for key in ("evaluations", "wall_clock")} for m in methods}
        learned = {key: gm([f["giph"][key] / f["local_search"][key] for f in flat])
                   for key in ("evals_to_1pct", "seconds_to_1pct", "evaluations", "wall_clock")}  # fmt: skip
        sem["learned_over_uniform"] = learned
        sem["policy_earns_its_place"] = bool(learned["evals_to_1pct"] <= 0.67 and learned["wall_clock"] <= 1.0)
        summary[execution] = sem
        print(execution, json.dumps(sem, indent=1))
    write_json_atomic(
        args.out,
        {
            "summary": summary,
            "rule": "the learned proposer stays in the default only if it reaches within 1% of the better final "
            "makespan in <= 0.67x the evaluations of uniform proposals and does not lose at 1 s",
            "rows": rows,
            "problems": args.problems,
            "seeds": args.seeds,
            "data": "validation problems of the training distribution (mixed), seeds from VALIDATION_OFFSET",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": time.perf_counter() - t0,
        },
    )


def order_move_mix(args: argparse.Namespace) -> None:
    """The ordered default with each order-move share, equal evaluations, per kind: ratios to HEFT's own schedule."""
    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement import LocalSearch, SearchConfig
    from mlsysopt.placement.distribution import sample_problem
    from mlsysopt.placement.methods import heft_makespan
    from mlsysopt.placement.train_search import VALIDATION_OFFSET
    from placement import bootstrap, build, geomean, problem_specs

    t0 = time.perf_counter()
    shares = [float(x) for x in args.shares.split(",")]
    if args.held_out:
        specs = [s for s in problem_specs(False) if s["set"] in args.kinds.split(",") or args.kinds == "all"]
        problems = [(s["set"], lambda s=s: build(s).with_execution("ordered")) for s in specs]
    else:

        def validation(seed: int, kind: str) -> PlacementProblem:
            graph, cluster, _ = sample_problem(seed, kind, args.max_tasks)
            return PlacementProblem(graph, cluster, "ordered")

        problems = [(kind, lambda k=k, kind=kind: validation(VALIDATION_OFFSET + k, kind))
                    for kind in args.kinds.split(",") for k in range(args.problems)]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for kind, make in problems:
        problem = make()
        heft = heft_makespan(problem)
        row: dict[str, Any] = {"kind": kind, "tasks": problem.num_tasks, "devices": problem.num_devices}
        for share in shares:
            placer = LocalSearch(SearchConfig(order_share=share))
            runs = [placer.solve(problem, seed=s) for s in range(args.seeds)]
            row[str(share)] = {"ratio": geomean([r.makespan / heft for r in runs]),
                               "accepted_order": sum(r.info["search"]["accepted"]["order"] for r in runs)}  # fmt: skip
        rows.append(row)
        print(kind, problem.num_tasks, {k: v for k, v in row.items() if k not in ("kind", "tasks", "devices")})
    rng = np.random.default_rng(0)
    summary: dict[str, Any] = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        view = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"problems": len(view)}
        base = np.array([r[str(shares[0])]["ratio"] for r in view])
        for share in shares:
            x = np.array([r[str(share)]["ratio"] for r in view])
            summary[kind][str(share)] = {
                "geomean_ratio_to_heft": geomean(x),
                "ci95_ratio_to_heft": bootstrap(x, rng),
                f"over_share_{shares[0]}": geomean(x / base),
                f"ci95_over_share_{shares[0]}": bootstrap(x / base, rng),
                "accepted_order_moves": int(sum(r[str(share)]["accepted_order"] for r in view)),
            }
        print(kind, json.dumps(summary[kind], indent=1))
    write_json_atomic(
        args.out,
        {
            "summary": summary,
            "rows": rows,
            "shares": shares,
            "seeds": args.seeds,
            "budget": "equal evaluations: the default budget (10 x tasks within 100-20,000)",
            "reference": "HEFT's own schedule (its map and insertion order), ordered execution",
            "data": "benchmarks/placement.py held-out problems"
            if args.held_out
            else "validation problems per kind (distribution.sample_problem), seeds from VALIDATION_OFFSET",
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "seconds": time.perf_counter() - t0,
        },
    )


if __name__ == "__main__":
    main()
