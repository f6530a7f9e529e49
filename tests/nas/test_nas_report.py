"""Regret, Pareto points and the table oracle: what the CLI, the demo and the benchmark report."""

from __future__ import annotations

import math

import pytest
from test_methods import FakeSpace, constraints

from mlsysopt.nas import (
    Constraints,
    best_feasible_test,
    best_feasible_valid,
    get_method,
    get_space,
    median_constraints,
    pareto_points,
    regret,
    returned_feasible,
    run_search,
    table_background,
)


def test_regret() -> None:
    assert regret(0.8, 0.75) == pytest.approx(0.05)
    assert regret(0.8, None) == 0.8  # nothing returned: the whole best feasible value
    assert regret(0.8, 0.79, feasible=False) == 0.8  # an infeasible answer counts as none
    assert regret(None, 0.7) is None  # no table, no oracle


def test_table_oracle_on_cora() -> None:
    space = get_space("nasbench-graph:cora")
    cons = median_constraints(space)
    stats = space.table_stats()
    assert cons.hard and cons.to_dict()["limits"] == {
        "max_latency_ms": stats["median_latency_ms"],
        "max_params": stats["median_params"],
    }
    bg = table_background(space)
    assert bg is not None and len(bg["perf"]) == len(bg["params"]) == len(bg["latency_ms"]) == stats["n_archs"]
    feasible = [
        p for p, n, lat in zip(bg["perf"], bg["params"], bg["latency_ms"], strict=True)
        if n <= stats["median_params"] and lat <= stats["median_latency_ms"]
    ]  # fmt: skip
    assert best_feasible_valid(bg, cons) == max(feasible)
    top = best_feasible_test(space, cons)
    assert top is not None and 0.5 < top < 1
    assert best_feasible_valid(bg, Constraints.from_limits(max_params=1.0)) is None
    assert best_feasible_test(space, Constraints.from_limits(max_params=1.0)) is None
    assert table_background(FakeSpace()) is None and best_feasible_test(FakeSpace(), cons) is None


def test_pareto_points_and_returned_feasible() -> None:
    space, cons = FakeSpace(), constraints("soft")
    space.fail = {get_method("random", space, cons, budget=6, seed=0).ask(1)[0]}
    results = [run_search(get_method(m, space, cons, budget=6, seed=0)) for m in ("random", "evolution")]
    pts = pareto_points(results, cons)
    # a failed evaluation does not use up the budget (#34): each run makes 6 successful ones and its failed one
    assert len(pts) == 14 and [p["group"] for p in pts] == ["random"] * 7 + ["evolution"] * 7
    assert sum(math.isnan(p["perf"]) for p in pts) == 2  # the failed evaluation of each run
    assert all(p["feasible"] == cons.feasible(p["resources"]) for p in pts)
    for r in results:
        assert returned_feasible(r, space, cons) == cons.feasible(space.resources(r.best.arch))
    empty = run_search(get_method("random", space, Constraints.from_limits(max_params=0.5), budget=3))
    assert empty.best is None and not returned_feasible(empty, space, cons)


def test_the_demo_headline_names_the_best_baseline_of_its_run() -> None:
    from mlsysopt.report.overview import headlines

    res = {"nas_graph": {"space": "nasbench-graph:cora", "budget": 30, "best_baseline": "bananas",
                         "methods": {"epnas": {"val_regret": 0.002}, "bananas": {"val_regret": 0.004}}}}  # fmt: skip
    rows, errors = headlines(res)
    assert errors == [] and len(rows) == 1
    h = rows[0]
    assert (h.ours, h.ours_value, h.baseline, h.baseline_value) == ("EPNAS (transfer)", 0.002,
                                                                   "bananas (best baseline here)", 0.004)  # fmt: skip
    assert h.verdict() == "yes (50.0% lower)" and "validation regret" in h.measure and "one seed" in h.measure
