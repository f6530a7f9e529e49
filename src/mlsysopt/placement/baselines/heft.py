"""HEFT with insertion (Topcuoglu, Hariri & Wu 2002): upward-rank list scheduling, earliest finish time."""

from __future__ import annotations

import bisect

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.jit import njit_on_first_call
from mlsysopt.graph.list_schedule import rank_sequence, start_order
from mlsysopt.graph.list_schedule import upward_rank as graph_upward_rank
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext


def upward_rank(problem: PlacementProblem) -> np.ndarray:
    """HEFT's rank_u: mean feasible compute time plus the longest mean-cost path to an exit task.

    Args:
        problem: The placement problem.

    Returns:
        Every task's rank, shape (num_tasks,) float64 (see :func:`mlsysopt.graph.list_schedule.upward_rank`).
    """
    return graph_upward_rank(problem.graph, problem.cluster, problem.mask)


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


@njit_on_first_call(cache=True, nogil=True)
def _slots(
    starts: np.ndarray,
    finishes: np.ndarray,
    count: np.ndarray,
    ready: np.ndarray,
    duration: np.ndarray,
    feasible: np.ndarray,
    slot: np.ndarray,
    eft: np.ndarray,
) -> None:
    """:func:`earliest_slot` on every feasible device at once (rows of ``starts``/``finishes``: busy slots)."""
    for dev in range(ready.shape[0]):
        if not feasible[dev]:
            eft[dev] = np.inf
            continue
        m = count[dev]
        r = ready[dev]
        k = np.searchsorted(finishes[dev, :m], r, side="right")
        prev = finishes[dev, k - 1] if k > 0 else 0.0
        t = r if r > prev else prev
        found = False
        for j in range(k, m):
            t = r if r > prev else prev
            if t + duration[dev] <= starts[dev, j]:
                found = True
                break
            prev = finishes[dev, j]
        if not found:
            t = r if r > prev else prev
        slot[dev] = t
        eft[dev] = t + duration[dev]


@njit_on_first_call(cache=True, nogil=True)
def _insert(starts: np.ndarray, finishes: np.ndarray, count: np.ndarray, dev: int, s: float, f: float) -> None:
    """Insert the busy slot (s, f) into ``dev``'s rows, keeping them sorted by (start, finish)."""
    m = count[dev]
    k = m
    while k > 0 and (starts[dev, k - 1] > s or (starts[dev, k - 1] == s and finishes[dev, k - 1] > f)):
        starts[dev, k] = starts[dev, k - 1]
        finishes[dev, k] = finishes[dev, k - 1]
        k -= 1
    starts[dev, k] = s
    finishes[dev, k] = f
    count[dev] = m + 1


def heft_schedule(
    graph: CompGraph | PlacementProblem, cluster: DeviceCluster | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """HEFT's placement, its tasks in planned start order (topological) and its planned makespan.

    Takes a (graph, cluster) pair or a :class:`PlacementProblem`.

    Zero-cost tasks follow their children: a task of zero compute whose earliest finish ties on several devices
    (a model's input, a constant) is not sent to the first of them (device 0, which dragged whole models onto a
    slow CPU); it stays *floating* over its tied devices, its first child to be scheduled sees its data as local on
    any of them, and it is then pinned where that child went (or to the tied device nearest it).

    Args:
        graph: The graph, or its :class:`PlacementProblem` (then ``cluster`` is None).
        cluster: The devices (None when ``graph`` is a problem).

    Returns:
        ``(placement, order, makespan)``: device id of every task; task ids in planned start order; HEFT's planned
        makespan (in the graph's time unit; the simulator's FIFO makespan of the placement may differ).

    Shapes:
        placement: (num_tasks,) int64 device index per task
        order: (num_tasks,) int64 task ids

    Raises:
        ConstraintViolation: If some task can run on no device.
    """
    problem = PlacementProblem.of(graph, cluster)
    graph, mask = problem.graph, problem.mask
    c = problem.cluster
    n, d = mask.shape
    w = problem.exec_times
    # decreasing rank; ties (zero-cost tasks) broken topologically so parents always come first
    sequence = rank_sequence(graph, upward_rank(problem))
    placement = np.full(n, -1, np.int64)
    start = np.zeros(n)
    finish = np.zeros(n)
    # per device (row): busy slots sorted by (start, finish) (a zero-length slot goes before a slot starting with
    # it, which keeps the finishes sorted too), for earliest_slot's bisection; rows grow by doubling
    busy_s = np.zeros((d, 16))
    busy_f = np.zeros((d, 16))
    count = np.zeros(d, np.int64)
    floating: dict[int, np.ndarray] = {}  # zero-cost task -> the devices its finish ties on
    indptr, par, _ = graph.parents_csr
    has_children = np.diff(graph.children_csr[0]) > 0
    slot, eft = np.zeros(d), np.zeros(d)
    w = np.ascontiguousarray(w)
    mask = np.ascontiguousarray(mask)

    waiting: dict[int, list[int]] = {}  # floating task -> its floating parents, pinned when it is

    def pin(i: int, dev: int, floats: list[int]) -> None:
        """Put ``i`` on ``dev``; its floating parents follow it (each to its tied device nearest ``dev``)."""
        nonlocal busy_s, busy_f
        placement[i] = dev
        if count[dev] == busy_s.shape[1]:
            busy_s = np.concatenate([busy_s, np.zeros_like(busy_s)], axis=1)
            busy_f = np.concatenate([busy_f, np.zeros_like(busy_f)], axis=1)
        _insert(busy_s, busy_f, count, dev, float(start[i]), float(finish[i]))
        for p in floats:
            if p not in floating:
                continue  # pinned meanwhile by another child
            ties = floating.pop(p)
            if dev in ties:
                target = dev
            else:
                comm = c.delay[ties, dev] + _max_bytes(problem, p, i) * c.inv_bandwidth[ties, dev]
                target = int(ties[int(np.argmin(comm))])
            pin(p, target, waiting.pop(p))

    for i in sequence:
        parents = par[indptr[i] : indptr[i + 1]]
        floats = [int(p) for p in parents if int(p) in floating]
        ready = (
            problem.arrival_times(i, placement, finish)
            if not floats
            else _ready_floating(problem, i, placement, finish, floating)
        )
        _slots(busy_s, busy_f, count, np.ascontiguousarray(ready, np.float64), w[i], mask[i], slot, eft)
        best_dev = int(np.argmin(eft))  # strict minimum, lowest id on ties
        placement[i], start[i], finish[i] = best_dev, slot[best_dev], eft[best_dev]
        ties = np.flatnonzero(eft <= eft[best_dev] + 1e-12 * max(1.0, abs(eft[best_dev])))
        if ties.size > 1 and has_children[i] and not (w[i, ties] > 0).any():
            floating[int(i)] = ties  # decided by its first scheduled child, with its floating parents
            waiting[int(i)] = floats
        else:
            pin(int(i), best_dev, floats)
    for i in list(floating):  # only tasks whose every child floated too (never in practice): first tied device
        if i in floating:
            pin(i, int(floating.pop(i)[0]), waiting.pop(i))
    # by start, then finish, then HEFT's sequence: per device the plan's own order (makespan_in_order reproduces it)
    return placement, start_order(start, finish, sequence), float(finish.max())


def _max_bytes(problem: PlacementProblem, parent: int, child: int) -> float:
    """The largest edge ``parent -> child`` in bytes (parallel edges are sent separately)."""
    parents, nbytes = problem.parent_edges[child]
    return float(nbytes[parents == parent].max())


def _ready_floating(
    problem: PlacementProblem, i: int, placement: np.ndarray, finish: np.ndarray, floating: dict[int, np.ndarray]
) -> np.ndarray:
    """Per device, when the last input of ``i`` arrives, a floating parent sending from its best tied device."""
    c = problem.cluster
    parents, nbytes = problem.parent_edges[i]
    ready = np.zeros(problem.num_devices)
    for p, b in zip(parents.tolist(), nbytes.tolist(), strict=True):
        if p in floating:
            ties = floating[p]
            arr = finish[p] + (c.delay[ties] + b * c.inv_bandwidth[ties]).min(axis=0)
        else:
            arr = finish[p] + c.delay[placement[p]] + b * c.inv_bandwidth[placement[p]]
        np.maximum(ready, arr, out=ready)
    return ready


class HEFT(Placer):
    """Heterogeneous Earliest Finish Time with insertion; one simulator evaluation of its schedule.

    Deterministic: ``seed`` and ``init`` are ignored.

    It takes no arguments.
    """

    name = "heft"

    def search(self, ctx: SearchContext) -> None:
        """HEFT's placement, evaluated once (``seed`` and ``init`` are ignored: HEFT is deterministic).

        Under ``ordered`` execution the placement runs in HEFT's own schedule order (its insertion included), so
        the makespan is HEFT's planned one; under ``fifo`` its map runs with ready tasks in arrival order.
        """
        placement, order, _ = heft_schedule(ctx.problem)
        ctx.evaluate(placement, order)
