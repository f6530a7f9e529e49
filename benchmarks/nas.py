"""NAS benchmark (EPNAS): regret on NAS-Bench-Graph under two constraints, real training on digits, parallel speed-up.

NAS-Bench-Graph (real tables shipped by the ``nas-bench-graph`` package): on each dataset, hard constraints
latency <= the table's median latency and params <= its median params; every method gets ``budget`` evaluations
(100; quick: 40) in batches of :data:`BATCH` (the parallel batch of ``run_search``; look-ups run in-process) over
``seeds`` seeds (10; quick: 3). Regret = best test performance among the feasible cells of the whole table minus
the test performance of the returned cell; a method that returns nothing (or an infeasible cell) counts as
infeasible, with regret = the best feasible test value. The (dataset, method, seed) searches run on a
``LocalExecutor`` of :data:`JOB_WORKERS` processes (one per core, at most 8).

Digits (scikit-learn's bundled images, real training of every candidate, space ``digits`` with up to 4 blocks):
limits params <= P and FLOPs <= F, where P and F are the medians over 40 random architectures (10 per block count,
``numpy`` seed 0) rounded to 3 significant digits. EPNAS and random search, each with 2 workers and the same seed,
``budget`` candidates (30; quick: 6) trained for ``epochs`` epochs (4; quick: 2); ``epnas_acc`` / ``random_acc`` are
the test accuracies of the returned architectures. ``speedup_2_workers`` = wall time of EPNAS with 1 worker (in
process) / with 2 workers (a process pool started and warmed before the clock starts; its start-up time is reported
as ``pool_start_s``), same budget and seed. EPNAS runs with ``round_size=2`` on digits (its top-K per round fixed
at 2 instead of following the number of workers), so the 1-worker and 2-worker runs are the *same* search -- the
same architectures trained in the same order (checked as ``same_search``) -- and the speed-up measures parallel
execution alone: with the default (K = workers) a 1-worker run is a different search that trains different,
cheaper or dearer, architectures. Every other knob is EPNAS's default (100 candidates ranked per round): the search
judges candidates on params and FLOPs, which the CNN space counts in closed form (~20 us per candidate, tested
equal to the torch.fx importer's count); latency is not constrained here, so the search never times it (each
worker times the forward pass of the model it trains, 3 runs, for the record).

    python benchmarks/nas.py [--quick] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import write_json_atomic
from mlsysopt.nas import (
    Constraints,
    best_feasible_test,
    get_method,
    get_space,
    median_constraints,
    regret,
    returned_feasible,
    run_search,
)
from mlsysopt.runtime import SerialExecutor, make_executor

METHODS = ("epnas", "random", "evolution", "reinforce", "pnas", "tpe")
DATASETS = ("cora", "citeseer", "pubmed", "cs", "computers", "photo")
BATCH = 2
JOB_WORKERS = min(os.cpu_count() or 1, 8)  # processes for the NAS-Bench-Graph searches (2 on a 2-core machine)
DIGITS_KNOBS: dict[str, dict[str, Any]] = {"epnas": {"round_size": BATCH}}  # see the module docstring
LATENCY_RUNS = 3
COST_ORDER = {"tpe": 0, "epnas": 1, "pnas": 2, "reinforce": 3, "evolution": 4, "random": 5}  # slowest first


# ---------------------------------------------------------------------------- NAS-Bench-Graph
def graph_constraints(dataset: str) -> tuple[Any, Constraints, dict[str, float]]:
    """The space, its median-latency and median-params constraints, and its table statistics."""
    space = get_space(f"nasbench-graph:{dataset}")
    return space, median_constraints(space), space.table_stats()


def graph_job(job: tuple[str, str, int, int]) -> dict[str, Any]:
    """One search: (dataset, method, seed, budget) -> the returned cell's test performance and feasibility."""
    dataset, method, seed, budget = job
    space, cons, _ = graph_constraints(dataset)
    t0 = time.perf_counter()
    res = run_search(get_method(method, space, cons, budget=budget, seed=seed), workers=BATCH)
    best = res.best
    feasible = returned_feasible(res, space, cons)
    return {
        "dataset": dataset,
        "method": method,
        "seed": seed,
        "test": None if best is None else best.test_perf,
        "valid": None if best is None else best.perf,
        "feasible": feasible,
        "evaluations": len(res.history),
        "failed": res.failed,
        "wall_s": time.perf_counter() - t0,
        "best_so_far": [None if math.isnan(v) else v for v in res.best_so_far()],
    }


def nasbench_graph(datasets: tuple[str, ...], seeds: int, budget: int) -> dict[str, Any]:
    """Every method on every dataset and seed; regret and feasible rate per (dataset, method)."""
    jobs = [(d, m, s, budget) for d in datasets for m in METHODS for s in range(seeds)]
    jobs.sort(key=lambda j: (COST_ORDER[j[1]], j[0], j[2]))
    t0 = time.perf_counter()
    with make_executor("local", JOB_WORKERS) as ex:
        runs = ex.map(graph_job, jobs)
    print(f"  {len(jobs)} searches in {time.perf_counter() - t0:.0f} s")
    out: dict[str, Any] = {}
    for d in datasets:
        space, cons, stats = graph_constraints(d)
        top = best_feasible_test(space, cons)
        per: dict[str, Any] = {"regret": {}, "feasible_rate": {}, "regret_std": {}, "regret_per_seed": {}}
        per |= {"wall_s": {}, "best_feasible_test": top, "median_latency_ms": stats["median_latency_ms"]}
        per["median_params"] = stats["median_params"]
        for m in METHODS:
            mine = sorted((r for r in runs if r["dataset"] == d and r["method"] == m), key=lambda r: r["seed"])
            regrets = [regret(top, r["test"], r["feasible"]) for r in mine]
            per["regret"][m] = float(np.mean(regrets))
            per["regret_std"][m] = float(np.std(regrets))
            per["regret_per_seed"][m] = regrets
            per["feasible_rate"][m] = float(np.mean([r["feasible"] for r in mine]))
            per["wall_s"][m] = float(np.mean([r["wall_s"] for r in mine]))
        out[d] = per
        row = "  ".join(f"{m} {per['regret'][m]:.4f}" for m in METHODS)
        print(f"  {d:10s} best feasible test {top:.4f}  regret: {row}")
    return out


# ---------------------------------------------------------------------------- digits
def _warm(_: int) -> float:
    """Import torch and the CNN space and load digits in a pool worker (so the timed search does not pay it)."""
    t0 = time.perf_counter()
    from mlsysopt.nas.spaces.cnn import CnnSpace
    from mlsysopt.nas.spaces.data import load_digits_split

    load_digits_split(0)
    CnnSpace("digits")
    return time.perf_counter() - t0


def digits_space(epochs: int) -> Any:
    """A fresh digits space (fresh resource cache, so no run profits from another's measurements)."""
    return get_space("digits", epochs=epochs, latency_runs=LATENCY_RUNS)


def digits_limits(epochs: int) -> dict[str, float]:
    """Medians of params and FLOPs over 40 random architectures (10 per block count), 3 significant digits."""
    space = get_space("digits", epochs=epochs)
    rng = np.random.default_rng(0)
    archs = [space.sample(rng, b) for b in range(1, space.max_blocks + 1) for _ in range(10)]
    res = [space.resources_for(a, ("params", "flops")) for a in archs]  # no latency needed: none is timed
    return {
        "max_params": float(f"{statistics.median(r['params'] for r in res):.3g}"),
        "max_flops": float(f"{statistics.median(r['flops'] for r in res):.3g}"),
    }


def _digits_run(method: str, workers: int, budget: int, epochs: int, cons: Constraints, ex: Any) -> dict[str, Any]:
    space = digits_space(epochs)
    t0 = time.perf_counter()
    knobs = DIGITS_KNOBS.get(method, {})
    res = run_search(get_method(method, space, cons, budget=budget, seed=0, **knobs), ex, workers=workers)
    wall = time.perf_counter() - t0
    best = res.best
    train = [ev.cost_s for ev in res.history if math.isfinite(ev.cost_s)]
    where = "in process" if isinstance(ex, SerialExecutor) else "process pool"
    print(f"  digits {method}, batches of {workers} ({where}): {wall:.1f} s, {res.message}")
    return {
        "wall_s": wall,
        "test_acc": None if best is None else best.test_perf,
        "valid_acc": None if best is None else best.perf,
        "feasible": best is not None and cons.feasible(best.resources),
        "arch": res.best_decoded,
        "evaluations": len(res.history),
        "failed": res.failed,
        "evaluation_s_sum": float(sum(train)),
        "archs": [ev.arch.to_dict() for ev in res.history],
        "message": res.message,
    }


def digits(budget: int, epochs: int) -> dict[str, Any]:
    """EPNAS vs random (2 workers each), and EPNAS with 1 vs 2 workers."""
    t0 = time.perf_counter()
    limits = digits_limits(epochs)
    limits_s = time.perf_counter() - t0
    cons = Constraints.from_limits(**limits)
    print(f"  digits limits {limits} ({limits_s:.1f} s)")
    with make_executor("local", 1) as serial:
        one = _digits_run("epnas", 1, budget, epochs, cons, serial)
    with make_executor("local", 2) as pool:
        t0 = time.perf_counter()
        pool.map(_warm, [0, 1])
        pool_start = time.perf_counter() - t0
        two = _digits_run("epnas", 2, budget, epochs, cons, pool)
        rnd = _digits_run("random", 2, budget, epochs, cons, pool)
    return {
        "epnas_acc": two["test_acc"],
        "random_acc": rnd["test_acc"],
        "speedup_2_workers": one["wall_s"] / two["wall_s"],
        "same_search": one["archs"] == two["archs"],
        "limits": limits,
        "limits_rule": "median params and FLOPs of 40 random architectures (10 per block count, seed 0), 3 sig. digits",
        "budget": budget,
        "epochs": epochs,
        "pool_start_s": pool_start,
        "knobs": DIGITS_KNOBS,
        "note": "EPNAS round_size=2: the 1- and 2-worker runs train the same architectures in the same order, so "
        "speedup_2_workers is parallel execution alone (compare evaluation_s_sum with wall_s)",
        "latency_runs": LATENCY_RUNS,
        "runs": {
            "epnas_2_workers": two,
            "random_2_workers": rnd,
            "epnas_1_worker": one,
        },
    }


# ---------------------------------------------------------------------------- main
def main() -> None:
    """Run the benchmark and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 datasets, 3 seeds, budget 40; digits budget 6")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    args = parser.parse_args()
    quick = args.quick
    datasets = DATASETS[:2] if quick else DATASETS
    seeds, budget = (3, 40) if quick else (10, 100)
    d_budget, d_epochs = (6, 2) if quick else (30, 4)
    t0 = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"NAS-Bench-Graph: {len(datasets)} datasets x {len(METHODS)} methods x {seeds} seeds, budget {budget}")
    graph = nasbench_graph(datasets, seeds, budget)
    graph_s = time.perf_counter() - t0
    print(f"digits: budget {d_budget}, {d_epochs} epochs")
    t1 = time.perf_counter()
    dig = digits(d_budget, d_epochs)
    mean_regret = {m: float(np.mean([graph[d]["regret"][m] for d in datasets])) for m in METHODS}
    feasible = {m: float(np.mean([graph[d]["feasible_rate"][m] for d in datasets])) for m in METHODS}
    result = {
        "nasbench_graph": graph,
        "mean_regret": mean_regret,
        "feasible_rate": feasible,
        "digits": dig,
        "targets": {
            "epnas_lowest_mean_regret": min(mean_regret, key=mean_regret.get) == "epnas",
            "all_returned_feasible": all(v == 1.0 for v in feasible.values())
            and all(r["feasible"] for r in dig["runs"].values()),
            "speedup_2_workers_at_least_1.6": dig["speedup_2_workers"] >= 1.6,
        },
        "settings": {
            "datasets": list(datasets),
            "methods": list(METHODS),
            "seeds": seeds,
            "budget": budget,
            "batch": BATCH,
            "job_workers": JOB_WORKERS,
            "constraints": "hard: latency <= median latency, params <= median params of each table",
        },
        "mode": "quick" if quick else "full",
        "command": " ".join(["python", *sys.argv]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load,
        "seconds": {"nasbench_graph": graph_s, "digits": time.perf_counter() - t1, "total": time.perf_counter() - t0},
    }
    write_json_atomic(args.out, result)
    print("mean regret: " + "  ".join(f"{m} {v:.4f}" for m, v in mean_regret.items()))
    print(f"digits: epnas {dig['epnas_acc']}, random {dig['random_acc']}, speed-up {dig['speedup_2_workers']:.2f}x")
    print(f"        (1 and 2 workers ran the same search: {dig['same_search']})")
    print(f"wrote {args.out} ({result['seconds']['total']:.0f} s)")


if __name__ == "__main__":
    main()
