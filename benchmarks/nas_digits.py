"""The digits part of ``benchmarks/nas.py``: EPNAS vs random search with real training of every candidate on
scikit-learn's bundled digits, and the 2-worker speed-up (see that script's docstring for the protocol)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np

from mlsysopt.nas import Constraints, get_method, get_space, run_search
from mlsysopt.runtime import SerialExecutor, make_executor

DIGITS_KNOBS: dict[str, dict[str, Any]] = {"epnas": {"round_size": 2}}  # the same search on 1 and 2 workers
LATENCY_RUNS = 3


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
