"""The ``ordered`` execution semantics: a static schedule, each device running its tasks in a fixed order.

A list scheduler such as HEFT (Topcuoglu, Hariri & Wu 2002, https://doi.org/10.1109/71.993206) outputs more than
a task -> device map: it fixes the order in which every device runs its tasks (with *insertion*, a later task may
take an idle gap before an earlier one). Under ``ordered`` execution a task starts when its last input has
arrived **and** the task before it on its device has finished; that is how a workflow manager or a static
executor follows a schedule. Under ``fifo`` (:mod:`mlsysopt.graph.simulator`'s default) a device runs whichever
ready task arrived first, as a dataflow runtime does.

When a placement comes without its order (every move of a search), the order is re-derived the way HEFT derives
it: tasks in decreasing *upward rank* (HEFT's ``rank_u``: mean feasible compute time plus the longest mean-cost
path to an exit task; ties topologically), each put on its given device at the earliest idle gap that fits it
(insertion). The schedule this builds is as-soon-as-possible for the per-device order it implies, so re-running
that order (:meth:`~mlsysopt.graph.simulator.Simulator.makespan_in_order`) reproduces it exactly; the tests check
that, and that a saga scheduler's own schedule re-run in order gives saga's makespan.
"""

from __future__ import annotations

import numpy as np

from mlsysopt.errors import InvalidOption
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.jit import njit_on_first_call

#: The execution semantics, as ``--execution`` takes them.
EXECUTIONS = ("fifo", "ordered")


def upward_rank(graph: CompGraph, cluster: DeviceCluster, mask: np.ndarray) -> np.ndarray:
    """HEFT's ``rank_u`` of every task: mean feasible compute time plus the longest mean-cost path to an exit.

    Args:
        graph: The task graph.
        cluster: The devices.
        mask: Which device can run which task.

    Returns:
        The rank of every task, in seconds (a parent's rank is never below its child's).

    Shapes:
        mask: (num_tasks, num_devices) bool
        return: (num_tasks,) float64
    """
    w = np.asarray(graph.compute, np.float64)[:, None] / cluster.speed[None, :] + cluster.overhead[None, :]
    w_mean = (w * mask).sum(axis=1) / mask.sum(axis=1)
    d = cluster.num_devices
    if d > 1:
        off = ~np.eye(d, dtype=bool)
        c_mean = cluster.delay[off].mean() + graph.edge_bytes * cluster.inv_bandwidth[off].mean()
    else:
        c_mean = np.zeros(graph.num_edges)
    indptr, child, eid = graph.children_csr
    return _rank(graph.topo_order, indptr, child, np.ascontiguousarray(c_mean[eid], np.float64), w_mean)


@njit_on_first_call(cache=True, nogil=True)
def _rank(topo: np.ndarray, indptr: np.ndarray, child: np.ndarray, cost: np.ndarray, w: np.ndarray) -> np.ndarray:
    rank = np.zeros(w.shape[0])
    for k in range(topo.shape[0] - 1, -1, -1):
        i = topo[k]
        tail = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            v = cost[j] + rank[child[j]]
            if v > tail:
                tail = v
        rank[i] = w[i] + tail
    return rank


def rank_sequence(graph: CompGraph, rank: np.ndarray) -> np.ndarray:
    """Task ids in decreasing ``rank``, ties topologically: HEFT's scheduling sequence (a topological order).

    Args:
        graph: The task graph.
        rank: Every task's upward rank.

    Returns:
        Task ids, shape (num_tasks,) int64.
    """
    topo_pos = np.empty(graph.num_nodes, np.int64)
    topo_pos[graph.topo_order] = np.arange(graph.num_nodes)
    return np.lexsort((topo_pos, -rank)).astype(np.int64)


def start_order(start: np.ndarray, finish: np.ndarray, sequence: np.ndarray) -> np.ndarray:
    """Task ids by start, then finish (a zero-length task before the one starting with it), then ``sequence``.

    For a schedule built in a topological ``sequence`` this is topological, and per device it is the schedule's
    own order, so :meth:`~mlsysopt.graph.simulator.Simulator.makespan_in_order` reproduces the schedule.

    Args:
        start: Every task's start time.
        finish: Every task's finish time.
        sequence: The order the tasks were scheduled in (ties).

    Returns:
        Task ids, shape (num_tasks,) int64.
    """
    seq_pos = np.empty(sequence.shape[0], np.int64)
    seq_pos[sequence] = np.arange(sequence.shape[0])
    return np.lexsort((seq_pos, finish, start)).astype(np.int64)


@njit_on_first_call(cache=True, nogil=True)
def insertion_schedule(
    p_indptr: np.ndarray,
    parent: np.ndarray,
    parent_bytes: np.ndarray,
    compute: np.ndarray,
    speed: np.ndarray,
    overhead: np.ndarray,
    delay: np.ndarray,
    inv_bw: np.ndarray,
    place: np.ndarray,
    sequence: np.ndarray,
    start: np.ndarray,
    finish: np.ndarray,
    ready: np.ndarray,
) -> float:
    """Schedule a fixed map in ``sequence`` with insertion; fill start/finish/ready and return the makespan.

    Each task goes on its device ``place[i]`` at the earliest time >= its inputs' arrival where an idle gap holds
    it. ``sequence`` must be topological.
    """
    n = sequence.shape[0]
    n_dev = speed.shape[0]
    # busy slots of device d live in slot_s/slot_f[offset[d] : offset[d] + count[d]], sorted by (start, finish)
    offset = np.zeros(n_dev + 1, np.int64)
    for i in range(n):
        offset[place[i] + 1] += 1
    for d in range(n_dev):
        offset[d + 1] += offset[d]
    count = np.zeros(n_dev, np.int64)
    slot_s = np.empty(n)
    slot_f = np.empty(n)
    makespan = 0.0
    for step in range(n):
        i = sequence[step]
        d = place[i]
        r = 0.0
        for k in range(p_indptr[i], p_indptr[i + 1]):
            q = parent[k]
            dq = place[q]
            a = finish[q] if dq == d else finish[q] + (delay[dq, d] + parent_bytes[k] * inv_bw[dq, d])
            if a > r:
                r = a
        dur = compute[i] / speed[d] + overhead[d]
        base = offset[d]
        m = count[d]
        # slots that end at or before r cannot hold the task's start: scan from the first that ends after it
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if slot_f[base + mid] <= r:
                lo = mid + 1
            else:
                hi = mid
        prev = slot_f[base + lo - 1] if lo > 0 else 0.0
        j = lo
        t = r if r > prev else prev
        while j < m:
            t = r if r > prev else prev
            if t + dur <= slot_s[base + j]:
                break
            prev = slot_f[base + j]
            j += 1
        if j == m:
            t = r if r > prev else prev
        for k in range(m, j, -1):
            slot_s[base + k] = slot_s[base + k - 1]
            slot_f[base + k] = slot_f[base + k - 1]
        f = t + dur
        slot_s[base + j] = t
        slot_f[base + j] = f
        count[d] = m + 1
        start[i] = t
        finish[i] = f
        ready[i] = r
        if f > makespan:
            makespan = f
    return makespan


@njit_on_first_call(cache=True, nogil=True)
def insertion_batch(
    p_indptr: np.ndarray,
    parent: np.ndarray,
    parent_bytes: np.ndarray,
    compute: np.ndarray,
    speed: np.ndarray,
    overhead: np.ndarray,
    delay: np.ndarray,
    inv_bw: np.ndarray,
    places: np.ndarray,
    sequence: np.ndarray,
) -> np.ndarray:
    """:func:`insertion_schedule`'s makespan of every row of ``places``."""
    n = sequence.shape[0]
    out = np.empty(places.shape[0])
    start = np.empty(n)
    finish = np.empty(n)
    ready = np.empty(n)
    for b in range(places.shape[0]):
        out[b] = insertion_schedule(
            p_indptr,
            parent,
            parent_bytes,
            compute,
            speed,
            overhead,
            delay,
            inv_bw,
            places[b],
            sequence,
            start,
            finish,
            ready,
        )
    return out


def ordered_args(graph: CompGraph, cluster: DeviceCluster) -> tuple[np.ndarray, ...]:
    """The arrays :func:`insertion_schedule` reads before the placement: parents CSR, times, links.

    Args:
        graph: The task graph.
        cluster: The devices.

    Returns:
        ``(p_indptr, parent, parent_bytes, compute, speed, overhead, delay, inv_bw)``, contiguous float64/int64.
    """
    indptr, par, eid = graph.parents_csr
    f64 = np.float64
    return (
        indptr,
        par,
        np.ascontiguousarray(graph.edge_bytes[eid], f64),
        np.ascontiguousarray(graph.compute, f64),
        np.ascontiguousarray(cluster.speed, f64),
        np.ascontiguousarray(cluster.overhead, f64),
        np.ascontiguousarray(cluster.delay, f64),
        np.ascontiguousarray(cluster.inv_bandwidth, f64),
    )


def schedule_in_priority(
    args: tuple[np.ndarray, ...], placements: np.ndarray, sequences: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's map list-scheduled with insertion in its own priority ``sequence``; makespans and task orders.

    The entry point of a search that moves priorities as well as the map (HEFT's upward rank is one sequence;
    any topological sequence is another). The order returned per row is :func:`start_order` of its schedule, so
    running the map in it (:meth:`~mlsysopt.graph.simulator.Simulator.makespan` with ``order``) reproduces the
    makespan exactly.

    Args:
        args: :func:`ordered_args` of the problem.
        placements: Device id of every task, per row.
        sequences: A topological task sequence per row (the priority: earlier is scheduled first).

    Returns:
        ``(makespans, orders)``: shapes (B,) float64 and (B, num_tasks) int64.

    Shapes:
        placements: (B, num_tasks) int64
        sequences: (B, num_tasks) int64
    """
    n = placements.shape[1]
    makespans = np.empty(placements.shape[0])
    orders = np.empty(placements.shape, np.int64)
    start, finish, ready = np.empty(n), np.empty(n), np.empty(n)
    for b in range(placements.shape[0]):
        seq = np.ascontiguousarray(sequences[b], np.int64)
        makespans[b] = insertion_schedule(*args, np.ascontiguousarray(placements[b]), seq, start, finish, ready)
        orders[b] = start_order(start, finish, seq)
    return makespans, orders


def check_execution(execution: str) -> str:
    """``execution`` if it is one of :data:`EXECUTIONS`, else InvalidOption naming ``--execution``.

    Args:
        execution: ``fifo`` or ``ordered``.

    Returns:
        The same string.

    Raises:
        InvalidOption: If it is neither.
    """
    if execution not in EXECUTIONS:
        raise InvalidOption(f"--execution must be one of {', '.join(EXECUTIONS)}, got {execution!r}")
    return execution
