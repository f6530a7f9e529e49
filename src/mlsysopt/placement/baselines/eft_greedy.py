"""Randomized EFT greedy: random topological orders, each task to its earliest-finish feasible device."""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext

#: Stop early after this many constructions in a row that repeat an already evaluated placement.
MAX_STALE = 50


def random_topological_order(graph: CompGraph, rng: np.random.Generator) -> np.ndarray:
    """A topological order that picks uniformly at random among the ready tasks (random priorities)."""
    return graph.priority_order(rng.random(graph.num_nodes))


def eft_placement(problem: PlacementProblem, order: np.ndarray) -> np.ndarray:
    """Place tasks in ``order``, each on the feasible device where it would finish first (append-only)."""
    n, w, mask = problem.num_tasks, problem.exec_times, problem.mask
    placement = np.full(n, -1, np.int64)
    finish = np.zeros(n)
    dev_free = np.zeros(problem.num_devices)
    for i in order:
        eft = np.maximum(problem.arrival_times(i, placement, finish), dev_free) + w[i]
        eft[~mask[i]] = np.inf
        d = int(np.argmin(eft))
        placement[i], finish[i], dev_free[d] = d, eft[d], eft[d]
    return placement


class EFTGreedy(Placer):
    """Earliest-finish-time list scheduling over random topological orders; keep the best placement.

    ``init`` is ignored; each distinct greedy placement costs one evaluation.

    Args:
        max_stale: Stop early after this many constructions in a row that repeat an evaluated placement.
    """

    name = "eft_greedy"

    def __init__(self, max_stale: int = MAX_STALE) -> None:
        self.max_stale = int(max_stale)

    def search(self, ctx: SearchContext) -> None:
        """One evaluation per distinct greedy placement until the budget is spent (``init`` is ignored).

        The simulator is deterministic, so a placement already evaluated is not evaluated again; the search
        stops early once ``max_stale`` orders in a row give only repeats (e.g. a chain has a single order).
        """
        problem, evaluate = ctx.problem, ctx.evaluate
        seen: set[bytes] = set()
        stale = 0
        while evaluate.remaining > 0 and stale < self.max_stale:
            placement = eft_placement(problem, random_topological_order(problem.graph, ctx.rng))
            key = placement.tobytes()
            if key in seen:
                stale += 1
                continue
            seen.add(key)
            stale = 0
            evaluate(placement)
