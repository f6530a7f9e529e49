"""The one DAG cost simulator: makespan, per-task start/finish and critical path of a placement.

Semantics (shared by every system in mlsysopt, and by the SimPy reference in ``benchmarks/simulator.py``):

* Task ``i`` placed on device ``d`` runs for ``compute[i] / speed[d] + overhead[d]`` seconds, non-preemptively
  (``overhead``: the device's per-task dispatch or launch latency, 0 unless the cluster gives one).
* An edge ``u -> v`` with ``b`` bytes delivers ``u``'s output at ``finish[u] + comm``, where
  ``comm = delay[du, dv] + b / bandwidth[du, dv]`` if ``du != dv`` and ``0`` on one device.
  Links have no contention (every transfer proceeds in parallel).
* A task is *ready* when the last of its inputs has arrived (sources at time 0).
* Each device runs one task at a time. Under ``fifo`` execution (the default; a dataflow runtime) it runs ready
  tasks in order of readiness (ties by task id): a task starts at ``max(ready, time its device becomes free)``.
  Under ``ordered`` execution (a static schedule, :mod:`mlsysopt.graph.list_schedule`) it runs its tasks in the
  schedule's order: a task starts when its inputs have arrived and the task before it on its device has finished;
  a placement given without an order gets HEFT's (upward rank, insertion).
* The makespan is the latest finish time. The critical path is traced back from the last task to finish:
  through the previous task on the same device when the task waited for its device, otherwise through
  the input that arrived last.

Like every work-conserving list schedule, FIFO-by-readiness has Graham's anomalies: a longer delay can
reorder a device's queue and *shorten* the makespan. :meth:`Simulator.makespan_in_order` evaluates a placement
with a fixed per-device order instead (static list scheduling), which is monotone in every delay and size.

``cp_min`` (in :mod:`mlsysopt.graph.bounds`, re-exported here) is a lower bound on every placement's makespan: the
longest path where each task runs on the fastest device that supports its type and communication is free.
SLR = makespan / CP_MIN >= 1.

The event loop is one numba-compiled kernel over flat arrays (:mod:`mlsysopt.graph.sim_kernel`; CSR children,
precomputed once per graph in :class:`Simulator`); :meth:`Simulator.makespans` evaluates a batch of placements of
one graph.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidPlacement
from mlsysopt.graph.bounds import cp_min, longest_path, longest_paths, slr, slr_from_bound
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.list_schedule import (
    check_execution,
    insertion_batch,
    insertion_schedule,
    rank_sequence,
    start_order,
    upward_rank,
)
from mlsysopt.graph.placement import check_placement
from mlsysopt.graph.schedule import Schedule
from mlsysopt.graph.sim_kernel import FIFO, event_loop, event_loop_batch


class Simulator:
    """Precomputed flat arrays of one (graph, cluster) pair; simulate many placements fast.

    Args:
        graph: The computation graph to schedule.
        cluster: The devices it runs on.
        feasible: The (tasks, devices) feasibility mask when the caller already holds it (a PlacementProblem);
            None computes it from ``cluster.feasible(graph)``.
        execution: ``fifo`` (a device runs ready tasks in arrival order) or ``ordered`` (each device runs its
            tasks in a static schedule's order; without one, HEFT's upward rank with insertion derives it).

    Shapes:
        feasible: (num_tasks, num_devices) bool
    """

    def __init__(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        feasible: np.ndarray | None = None,
        execution: str = "fifo",
    ) -> None:
        self.execution = check_execution(execution)
        self.graph = graph
        self.cluster = cluster
        indptr, child, eid = graph.children_csr
        self._indptr = indptr
        self._child = child
        self._child_bytes = np.ascontiguousarray(graph.edge_bytes[eid])
        self._n_parents = np.bincount(graph.edge_index[1], minlength=graph.num_nodes).astype(np.int64)
        self._compute = np.ascontiguousarray(graph.compute, dtype=np.float64)
        self._speed = np.ascontiguousarray(cluster.speed, dtype=np.float64)
        self._overhead = np.ascontiguousarray(cluster.overhead, dtype=np.float64)
        self._delay = np.ascontiguousarray(cluster.delay, dtype=np.float64)
        self._inv_bw = np.ascontiguousarray(cluster.inv_bandwidth, dtype=np.float64)
        self._feasible = cluster.feasible(graph) if feasible is None else feasible
        self._rows = np.arange(graph.num_nodes)

    @cached_property
    def sequence(self) -> np.ndarray:
        """The ``ordered`` semantics' scheduling sequence: tasks in decreasing upward rank (HEFT's)."""
        return rank_sequence(self.graph, upward_rank(self.graph, self.cluster, self._feasible))

    @cached_property
    def _ordered_args(self) -> tuple[np.ndarray, ...]:
        indptr, par, eid = self.graph.parents_csr
        b = np.ascontiguousarray(self.graph.edge_bytes[eid], np.float64)
        return (indptr, par, b, self._compute, self._speed, self._overhead, self._delay, self._inv_bw)

    def _args(self) -> tuple[np.ndarray, ...]:
        return (
            self._indptr,
            self._child,
            self._child_bytes,
            self._n_parents,
            self._compute,
            self._speed,
            self._overhead,
            self._delay,
            self._inv_bw,
        )

    def check(self, placement: Any) -> np.ndarray:
        """Validate a placement (shape, device ids, hardware types)."""
        p = np.asarray(placement)
        n = self.graph.num_nodes
        if (
            p.shape == (n,)
            and np.issubdtype(p.dtype, np.integer)
            and p.min() >= 0
            and p.max() < self.cluster.num_devices
            and self._feasible[self._rows, p].all()
        ):
            return p.astype(np.int64, copy=False)
        return check_placement(self.graph, self.cluster, p)  # slow path: raises naming the task

    def makespan(self, placement: Any, check: bool = True, order: Any = None) -> float:
        """Makespan of one placement in this simulator's execution semantics.

        Args:
            placement: Device id of every task.
            check: False skips validation on a hot path you trust.
            order: A schedule's task order (topological; per device, the order each device runs its tasks): the
                placement is then run ``ordered`` in that order, whatever the simulator's semantics.

        Returns:
            The makespan, in the graph's time unit.
        """
        p = self.check(placement) if check else np.asarray(placement, np.int64)
        n = self.graph.num_nodes
        if order is not None:
            return float(event_loop(*self._args(), p, self._check_order(order), np.empty(n), np.empty(n), np.empty(n)))
        if self.execution == "ordered":
            return float(insertion_schedule(*self._ordered_args, p, self.sequence, *self._buffers(n)))
        return float(event_loop(*self._args(), p, FIFO, np.empty(n), np.empty(n), np.empty(n)))

    @staticmethod
    def _buffers(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.empty(n), np.empty(n), np.empty(n)

    def makespans(self, placements: Any, check: bool = True) -> np.ndarray:
        """Makespans of a batch of placements, shape (B, tasks) -> (B,), in this simulator's semantics."""
        ps = np.ascontiguousarray(placements, dtype=np.int64)
        if ps.ndim == 1:
            ps = ps[None, :]
        if ps.ndim != 2 or ps.shape[1] != self.graph.num_nodes:
            raise InvalidPlacement(f"placements have shape {ps.shape}, expected (B, {self.graph.num_nodes})")
        if check and not (
            ps.min(initial=0) >= 0
            and ps.max(initial=0) < self.cluster.num_devices
            and self._feasible[self._rows[None, :], ps].all()
        ):
            for row in ps:
                self.check(row)
        if self.execution == "ordered":
            return insertion_batch(*self._ordered_args, ps, self.sequence)
        return event_loop_batch(*self._args(), ps)

    def makespan_in_order(self, placement: Any, order: Any = None) -> float:
        """Makespan when every device runs its tasks in a fixed topological ``order`` (default: the graph's).

        Unlike the FIFO semantics of :meth:`makespan`, this is monotone: raising a delay, a transfer size or a
        compute never lowers it. List schedulers such as HEFT produce such an order.
        """
        p = self.check(placement)
        o = self.graph.topo_order if order is None else self._check_order(order)
        n = self.graph.num_nodes
        return float(event_loop(*self._args(), p, o, np.empty(n), np.empty(n), np.empty(n)))

    def _check_order(self, order: Any) -> np.ndarray:
        o = np.asarray(order, dtype=np.int64)
        n = self.graph.num_nodes
        if o.shape != (n,) or not np.array_equal(np.sort(o), np.arange(n)):
            raise InvalidPlacement(f"order must be a permutation of the {n} task ids")
        pos = np.empty(n, np.int64)
        pos[o] = np.arange(n)
        src, dst = self.graph.edge_index
        bad = np.flatnonzero(pos[src] >= pos[dst])
        if bad.size:
            u, v = self.graph.names[src[bad[0]]], self.graph.names[dst[bad[0]]]
            raise InvalidPlacement(f"order is not topological: '{v}' comes before its input '{u}'")
        return o

    def order(self, placement: Any) -> np.ndarray:
        """The ``ordered`` semantics' task order of a placement given without one (upward rank, insertion).

        Args:
            placement: Device id of every task.

        Returns:
            Task ids by planned start (topological; per device, the order it runs them), shape (num_tasks,).
        """
        p = self.check(placement)
        start, finish, ready = self._buffers(self.graph.num_nodes)
        insertion_schedule(*self._ordered_args, p, self.sequence, start, finish, ready)
        return start_order(start, finish, self.sequence)

    def run(self, placement: Any, order: Any = None) -> Schedule:
        """Full schedule of one placement: start, finish, ready times and the critical path.

        Args:
            placement: Device id of every task.
            order: A schedule's task order, run ``ordered`` (see :meth:`makespan`); None: this simulator's semantics.

        Returns:
            The schedule (its ``execution`` says which semantics produced it).
        """
        p = self.check(placement)
        n = self.graph.num_nodes
        start, finish, ready = self._buffers(n)
        if order is None and self.execution == "ordered":
            ms = float(insertion_schedule(*self._ordered_args, p, self.sequence, start, finish, ready))
            execution = "ordered"
        elif order is not None:
            ms = float(event_loop(*self._args(), p, self._check_order(order), start, finish, ready))
            execution = "ordered"
        else:
            ms = float(event_loop(*self._args(), p, FIFO, start, finish, ready))
            execution = "fifo"
        crit = self._critical_path(p, start, finish, ready)
        return Schedule(ms, start, finish, ready, p, crit, execution)

    def _critical_path(self, p: np.ndarray, start: np.ndarray, finish: np.ndarray, ready: np.ndarray) -> list[int]:
        g = self.graph
        prev_on_device = np.full(g.num_nodes, -1, np.int64)
        for d in np.unique(p):
            tasks = np.flatnonzero(p == d)
            tasks = tasks[np.lexsort((tasks, start[tasks]))]
            prev_on_device[tasks[1:]] = tasks[:-1]
        i = int(np.argmax(finish))
        path = [i]
        while True:
            q = int(prev_on_device[i])
            if start[i] > ready[i] and q >= 0:
                i = q
            else:
                par = g.parents(i)
                if par.size == 0:
                    break
                arrive = [finish[j] + self.cluster.comm_time(b, int(p[j]), int(p[i])) for j, b in self._in(i)]
                i = int(par[int(np.argmax(arrive))])
            path.append(i)
        return path[::-1]

    def _in(self, i: int) -> list[tuple[int, float]]:
        indptr, par, eid = self.graph.parents_csr
        sl = slice(indptr[i], indptr[i + 1])
        return list(zip(par[sl].tolist(), self.graph.edge_bytes[eid[sl]].tolist(), strict=True))


def simulate(graph: CompGraph, cluster: DeviceCluster, placement: Any, execution: str = "fifo") -> Schedule:
    """Simulate one placement of ``graph`` on ``cluster`` (see the module docstring for the semantics).

    Args:
        graph: The computation graph.
        cluster: The devices it runs on.
        placement: Device id of every task.
        execution: ``fifo`` or ``ordered`` (see the module docstring).

    Returns:
        The full :class:`Schedule`: makespan (seconds), start/finish/ready times and the critical path.

    Shapes:
        placement: (num_tasks,) int device index per task

    Raises:
        InvalidPlacement: If ``placement`` has the wrong shape or an unknown device id.
        ConstraintViolation: If a task is placed on a device that does not support its hardware type.
    """
    return Simulator(graph, cluster, execution=execution).run(placement)


__all__ = [
    "Schedule",
    "Simulator",
    "cp_min",
    "longest_path",
    "longest_paths",
    "simulate",
    "slr",
    "slr_from_bound",
]
