"""Randomized EFT greedy: random topological orders, each task to its earliest-finish feasible device."""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.jit import njit_on_first_call
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext

#: Stop early after this many constructions in a row that repeat an already evaluated placement.
MAX_STALE = 50


def random_topological_order(graph: CompGraph, rng: np.random.Generator) -> np.ndarray:
    """A topological order that picks uniformly at random among the ready tasks (random priorities)."""
    return graph.priority_order(rng.random(graph.num_nodes))


def eft_placement(problem: PlacementProblem, order: np.ndarray) -> np.ndarray:
    """Place tasks in ``order``, each on the feasible device where it would finish first (append-only).

    Args:
        problem: The problem to place.
        order: A topological order of the tasks.

    Returns:
        Device id of every task, shape (num_tasks,) int64 (ties: the lowest device id).
    """
    indptr, par, eid = problem.graph.parents_csr
    c = problem.cluster
    return _eft(
        indptr,
        par,
        np.ascontiguousarray(problem.graph.edge_bytes[eid], np.float64),
        np.ascontiguousarray(problem.exec_times),
        np.ascontiguousarray(problem.mask),
        np.ascontiguousarray(c.delay, np.float64),
        np.ascontiguousarray(c.inv_bandwidth, np.float64),
        np.ascontiguousarray(order, np.int64),
    )


@njit_on_first_call(cache=True, nogil=True)
def _eft(
    indptr: np.ndarray,
    par: np.ndarray,
    nbytes: np.ndarray,
    w: np.ndarray,
    mask: np.ndarray,
    delay: np.ndarray,
    inv_bw: np.ndarray,
    order: np.ndarray,
) -> np.ndarray:
    n, d = w.shape
    placement = np.full(n, -1, np.int64)
    finish = np.zeros(n)
    dev_free = np.zeros(d)
    ready = np.zeros(d)
    for i in order:
        ready[:] = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            q = par[k]
            dq = placement[q]
            for dev in range(d):
                a = finish[q] + delay[dq, dev] + nbytes[k] * inv_bw[dq, dev] if dev != dq else finish[q]
                if a > ready[dev]:
                    ready[dev] = a
        best, best_t = -1, np.inf
        for dev in range(d):
            if not mask[i, dev]:
                continue
            t = (ready[dev] if ready[dev] > dev_free[dev] else dev_free[dev]) + w[i, dev]
            if t < best_t:
                best, best_t = dev, t
        placement[i] = best
        finish[i] = best_t
        dev_free[best] = best_t
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
