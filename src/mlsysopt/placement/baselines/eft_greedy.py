"""Randomized EFT greedy: random topological orders, each task to its earliest-finish feasible device."""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.placement.base import Evaluator, PlacementResult, Placer
from mlsysopt.placement.baselines.heft import arrival_times, exec_times, parent_edges

#: Stop early after this many constructions in a row that repeat an already evaluated placement.
MAX_STALE = 50


def random_topological_order(graph: CompGraph, rng: np.random.Generator) -> np.ndarray:
    """A topological order that picks uniformly at random among the ready tasks (random priorities)."""
    return graph.priority_order(rng.random(graph.num_nodes))


def eft_placement(
    graph: CompGraph,
    cluster: DeviceCluster,
    order: np.ndarray,
    mask: np.ndarray,
    w: np.ndarray | None = None,
    pedges: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> np.ndarray:
    """Place tasks in ``order``, each on the feasible device where it would finish first (append-only)."""
    w = exec_times(graph, cluster) if w is None else w
    pedges = parent_edges(graph) if pedges is None else pedges
    n = graph.num_nodes
    placement = np.full(n, -1, np.int64)
    finish = np.zeros(n)
    dev_free = np.zeros(cluster.num_devices)
    for i in order:
        par, nbytes = pedges[i]
        eft = np.maximum(arrival_times(cluster, par, nbytes, placement, finish), dev_free) + w[i]
        eft[~mask[i]] = np.inf
        d = int(np.argmin(eft))
        placement[i], finish[i], dev_free[d] = d, eft[d], eft[d]
    return placement


class EFTGreedy(Placer):
    """Earliest-finish-time list scheduling over random topological orders; keep the best placement."""

    name = "eft_greedy"

    def __init__(self, max_stale: int = MAX_STALE) -> None:
        self.max_stale = int(max_stale)

    def place(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
    ) -> PlacementResult:
        """One evaluation per distinct greedy placement until the budget is spent (``init`` is ignored).

        The simulator is deterministic, so a placement already evaluated is not evaluated again; the search
        stops early once ``max_stale`` orders in a row give only repeats (e.g. a chain has a single order).
        """
        mask = cluster.check_feasible(graph)
        evaluator = Evaluator(graph, cluster, budget)
        rng = np.random.default_rng(seed)
        w = exec_times(graph, cluster)
        pedges = parent_edges(graph)
        seen: set[bytes] = set()
        stale = 0
        while evaluator.remaining > 0 and stale < self.max_stale:
            placement = eft_placement(graph, cluster, random_topological_order(graph, rng), mask, w, pedges)
            key = placement.tobytes()
            if key in seen:
                stale += 1
                continue
            seen.add(key)
            stale = 0
            evaluator(placement)
        return evaluator.result(self.name)
