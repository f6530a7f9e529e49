"""The optimality gap: exact optimum by enumeration, the CP-SAT lower bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.baselines import heft_schedule
from mlsysopt.placement.optimality import exact_optimum, gap, lower_bound, placements_count


def small(seed: int) -> PlacementProblem:
    graph = layered_dag(7, alpha=0.5, num_types=2, seed=seed)
    return PlacementProblem(graph, random_cluster(3, num_types=2, seed=seed))


def test_exact_optimum_is_the_best_of_every_placement() -> None:
    p = small(0)
    options = [np.flatnonzero(row) for row in p.mask]
    every = np.array(list(itertools.product(*options)))
    assert len(every) == placements_count(p)
    best, ms = exact_optimum(p)
    assert ms == pytest.approx(p.simulator.makespans(every).min()) and ms == pytest.approx(p.makespan(best))


def test_cp_sat_bound_is_below_the_optimum() -> None:
    proved = 0
    for seed in range(3):
        p = small(seed)
        _, opt = exact_optimum(p)
        bound = lower_bound(p, time_limit=5.0, hint=heft_schedule(p)[0])
        assert p.cp_min <= bound.value <= opt * (1 + 1e-9)
        if bound.proved:  # the any-order relaxation's optimum: at most the simulator's (FIFO) optimum
            proved += 1
            assert bound.value == pytest.approx(bound.solver_makespan, rel=1e-5)
            assert bound.value >= 0.7 * opt  # and not a trivial bound on these small problems
    assert proved >= 1


def test_size_limits_and_gap() -> None:
    big = PlacementProblem(layered_dag(40, seed=0), random_cluster(4, num_types=5, seed=0))
    with pytest.raises(MlsysoptError, match="too many to enumerate"):
        exact_optimum(big)
    with pytest.raises(MlsysoptError, match="at most 30 tasks"):
        lower_bound(big)
    assert gap(1.1, 1.0) == pytest.approx(0.1) and gap(0.0, 0.0) == 0.0
