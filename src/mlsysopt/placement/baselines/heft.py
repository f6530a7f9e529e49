"""HEFT with insertion (Topcuoglu, Hariri & Wu 2002): upward-rank list scheduling, earliest finish time."""

from __future__ import annotations

import bisect

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext


def upward_rank(problem: PlacementProblem) -> np.ndarray:
    """HEFT's rank_u: mean feasible compute time plus the longest mean-cost path to an exit task."""
    graph, cluster, mask = problem.graph, problem.cluster, problem.mask
    w = problem.exec_times
    w_mean = (w * mask).sum(axis=1) / mask.sum(axis=1)
    d = cluster.num_devices
    if d > 1:
        off = ~np.eye(d, dtype=bool)
        c_mean = cluster.delay[off].mean() + graph.edge_bytes * cluster.inv_bandwidth[off].mean()
    else:
        c_mean = np.zeros(graph.num_edges)
    indptr, child, eid = problem.children_csr
    rank = np.zeros(graph.num_nodes)
    for i in graph.topo_order[::-1]:
        sl = slice(indptr[i], indptr[i + 1])
        tail = (c_mean[eid[sl]] + rank[child[sl]]).max() if indptr[i + 1] > indptr[i] else 0.0
        rank[i] = w_mean[i] + tail
    return rank


def earliest_slot(starts: list[float], finishes: list[float], ready: float, duration: float) -> float:
    """Earliest start >= ``ready`` of a ``duration``-long job in the idle gaps of a device's sorted busy slots."""
    # slots ending at or before `ready` cannot constrain the start: begin the scan after them
    k = bisect.bisect_right(finishes, ready)
    prev_finish = finishes[k - 1] if k > 0 else 0.0
    for s, f in zip(starts[k:], finishes[k:], strict=True):
        t = max(ready, prev_finish)
        if t + duration <= s:
            return t
        prev_finish = f
    return max(ready, prev_finish)


def heft_schedule(
    graph: CompGraph | PlacementProblem, cluster: DeviceCluster | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """HEFT's placement, its tasks in planned start order (topological) and its planned makespan.

    Takes a (graph, cluster) pair or a :class:`PlacementProblem`.
    """
    problem = PlacementProblem.of(graph, cluster)
    graph, mask = problem.graph, problem.mask
    n, d = mask.shape
    w = problem.exec_times
    rank = upward_rank(problem)
    topo_pos = np.empty(n, np.int64)
    topo_pos[graph.topo_order] = np.arange(n)
    # decreasing rank; ties (zero-cost tasks) broken topologically so parents always come first
    sequence = np.lexsort((topo_pos, -rank))
    placement = np.full(n, -1, np.int64)
    start = np.zeros(n)
    finish = np.zeros(n)
    # per device: busy slots sorted by (start, finish) (a zero-length slot goes before a slot starting with it,
    # which keeps the finishes sorted too) and those finishes, for earliest_slot's bisection
    busy: list[list[tuple[float, float]]] = [[] for _ in range(d)]
    busy_s: list[list[float]] = [[] for _ in range(d)]
    busy_f: list[list[float]] = [[] for _ in range(d)]
    for i in sequence:
        ready = problem.arrival_times(i, placement, finish)
        best_dev, best_start, best_finish = -1, 0.0, np.inf
        for dev in np.flatnonzero(mask[i]):
            s = earliest_slot(busy_s[dev], busy_f[dev], float(ready[dev]), float(w[i, dev]))
            if s + w[i, dev] < best_finish:
                best_dev, best_start, best_finish = int(dev), s, float(s + w[i, dev])
        placement[i], start[i], finish[i] = best_dev, best_start, best_finish
        k = bisect.bisect_right(busy[best_dev], (best_start, best_finish))
        busy[best_dev].insert(k, (best_start, best_finish))
        busy_s[best_dev].insert(k, best_start)
        busy_f[best_dev].insert(k, best_finish)
    seq_pos = np.empty(n, np.int64)
    seq_pos[sequence] = np.arange(n)
    # by start, then finish (a zero-length task before the one starting with it on its device), then HEFT's
    # sequence: topological, and per device the plan's own order, so makespan_in_order reproduces the plan
    order = np.lexsort((seq_pos, finish, start)).astype(np.int64)
    return placement, order, float(finish.max())


class HEFT(Placer):
    """Heterogeneous Earliest Finish Time with insertion; one simulator evaluation of its placement."""

    name = "heft"

    def search(self, ctx: SearchContext) -> None:
        """HEFT's placement, evaluated once (``seed`` and ``init`` are ignored: HEFT is deterministic)."""
        ctx.evaluate(heft_schedule(ctx.problem)[0])
