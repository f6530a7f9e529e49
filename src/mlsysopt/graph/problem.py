"""A placement problem: one graph on one cluster, validated once, with everything a placement search reads.

Every placer, gpNet and the placement environment consume a :class:`PlacementProblem` instead of re-checking
``(graph, cluster)`` themselves: the feasibility mask is computed (and a task no device can run refused) once,
and the execution times, CSR views, per-task parent edges and the :class:`~mlsysopt.graph.simulator.Simulator`
are built once and shared. :func:`load_problem` builds one from a cluster file or a random cluster.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidCluster, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.limits import check_problem
from mlsysopt.graph.list_schedule import check_execution
from mlsysopt.graph.placement import placement_to_dict, random_from_mask
from mlsysopt.graph.presets import load_cluster
from mlsysopt.graph.simulator import Schedule, Simulator, cp_min, slr_from_bound
from mlsysopt.graph.units import unit, units_of


class PlacementProblem:
    """``graph`` on ``cluster``: the feasibility mask (checked once), execution times, CSR views and the simulator.

    Args:
        graph: the task graph.
        cluster: the devices; every task must have at least one device that supports its hardware type
            (ConstraintViolation naming the task otherwise).
        execution: how a device runs its tasks: ``fifo`` (ready tasks in arrival order, a dataflow runtime) or
            ``ordered`` (a static schedule's order; see :mod:`mlsysopt.graph.list_schedule`).

    Shapes: ``mask`` and ``exec_times`` are (tasks, devices).
    """

    def __init__(self, graph: CompGraph, cluster: DeviceCluster, execution: str = "fifo") -> None:

        self.execution = check_execution(execution)
        check_problem(graph.num_nodes, cluster.num_devices)
        self.graph = graph
        self.cluster = cluster
        self.mask: np.ndarray = cluster.check_feasible(graph)
        self.mask.flags.writeable = False
        self._check_finite()
        self.simulator = Simulator(graph, cluster, feasible=self.mask, execution=execution)

    def _check_finite(self) -> None:
        """Refuse a graph/cluster pair whose times overflow (speed 1e-308, bytes 1e308, ...): an inf makespan
        would poison every search and every plot."""

        g, c = self.graph, self.cluster
        system = units_of(g)
        with np.errstate(over="ignore", invalid="ignore"):
            times = self.exec_times
            bad = ~np.isfinite(times)
            if bad.any():
                i, d = (int(v[0]) for v in np.nonzero(bad))
                raise InvalidCluster(
                    f"task '{g.names[i]}' would take {g.compute[i]:.3g} {unit(system, 'compute')} / speed "
                    f"{c.speed[d]:.3g} = inf on device '{c.names[d]}': the speeds are too small for this graph "
                    f"(they must be in {unit(system, 'speed')})"
                )
            off = ~np.eye(c.num_devices, dtype=bool)
            worst_link = float((c.inv_bandwidth[off]).max()) if off.any() else 0.0
            worst_delay = float(c.delay[off].max()) if off.any() else 0.0
            comm = g.edge_bytes * worst_link + worst_delay
            if not np.isfinite(comm).all():
                k = int(np.flatnonzero(~np.isfinite(comm))[0])
                u, v = (g.names[int(x)] for x in g.edge_index[:, k])
                raise InvalidCluster(
                    f"sending edge '{u}' -> '{v}' ({g.edge_bytes[k]:.3g} {unit(system, 'bytes')}) over the slowest "
                    "link takes inf: the bandwidths are too small for this graph "
                    f"(they must be in {unit(system, 'bandwidth')})"
                )
            longest = float(times.max(axis=1).sum() + comm.sum())
        if not np.isfinite(longest):
            raise InvalidCluster(
                "the sum of every task's longest time and every transfer overflows to inf: the graph's compute "
                "or data is too large for this cluster's speeds and bandwidths"
            )

    @classmethod
    def of(
        cls, graph: CompGraph | PlacementProblem, cluster: DeviceCluster | PlacementProblem | None = None
    ) -> PlacementProblem:
        """The problem of ``graph`` on ``cluster``, built once: either argument may already be the problem.

        ``PlacementProblem.of(problem)``, ``PlacementProblem.of(graph, problem)`` (a problem of that graph) and
        ``PlacementProblem.of(graph, cluster)`` all work, so functions can take a cluster or its problem.
        """
        given = graph if isinstance(graph, PlacementProblem) else cluster
        if isinstance(given, PlacementProblem):
            if graph is not given and graph is not given.graph:
                raise MlsysoptError("the PlacementProblem given is for another graph")
            if cluster is not None and cluster is not given:
                raise MlsysoptError("give a PlacementProblem or a (graph, cluster) pair, not both")
            return given
        if cluster is None:
            raise MlsysoptError("a placement problem needs a graph and a cluster")
        return cls(graph, cluster)

    @property
    def num_tasks(self) -> int:
        """Number of tasks."""
        return self.graph.num_nodes

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return self.cluster.num_devices

    @cached_property
    def exec_times(self) -> np.ndarray:
        """(tasks, devices) times ``compute[i] / speed[d] + overhead[d]`` (seconds for real units)."""
        c = self.cluster
        return np.asarray(self.graph.compute, np.float64)[:, None] / c.speed[None, :] + c.overhead[None, :]

    @property
    def children_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, child ids, edge ids) of the graph's out-edges."""
        return self.graph.children_csr

    @property
    def parents_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, parent ids, edge ids) of the graph's in-edges."""
        return self.graph.parents_csr

    @cached_property
    def parent_edges(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per task: (parent ids, bytes of each in-edge); parallel edges stay separate, as in the simulator."""
        indptr, par, eid = self.graph.parents_csr
        nbytes = self.graph.edge_bytes
        return [(par[indptr[i] : indptr[i + 1]], nbytes[eid[indptr[i] : indptr[i + 1]]]) for i in range(self.num_tasks)]

    def arrival_times(self, task: int, placement: np.ndarray, finish: np.ndarray) -> np.ndarray:
        """Per device, when the last input of ``task`` arrives there, given its parents' devices and finish times."""
        parents, nbytes = self.parent_edges[task]
        if parents.size == 0:
            return np.zeros(self.num_devices)
        c = self.cluster
        src = placement[parents]
        # diagonal delay is 0 and inv_bandwidth is 1/inf = 0, so a same-device input arrives at the parent's finish
        arr = finish[parents, None] + (c.delay[src] + nbytes[:, None] * c.inv_bandwidth[src])
        return arr.max(axis=0)

    def check(self, placement: Any) -> np.ndarray:
        """``placement`` as int64 device ids, or InvalidPlacement / ConstraintViolation naming the first bad task."""
        return self.simulator.check(placement)

    def random_placement(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random feasible placement."""
        return random_from_mask(self.mask, rng)

    def simulate(self, placement: Any, order: Any = None) -> Schedule:
        """Full schedule of ``placement`` (see :meth:`Simulator.run`; ``order``: a schedule's own task order)."""
        return self.simulator.run(placement, order)

    def makespan(self, placement: Any, order: Any = None) -> float:
        """Makespan of ``placement`` in the problem's execution semantics (``order``: a schedule's own order)."""
        return self.simulator.makespan(placement, order=order)

    def with_execution(self, execution: str) -> PlacementProblem:
        """This graph and cluster under another execution semantics (``self`` when it is the same one)."""
        if execution == self.execution:
            return self
        return PlacementProblem(self.graph, self.cluster, execution)

    @cached_property
    def cp_min(self) -> float:
        """CP_MIN, the lower bound on every placement's makespan (see :func:`~mlsysopt.graph.simulator.cp_min`)."""
        return cp_min(self.graph, self.cluster)

    def describe(self, schedule: Schedule) -> dict[str, Any]:
        """JSON-ready: makespan, CP_MIN, SLR, the ``{task: device}`` placement and the per-task schedule."""
        return {
            "makespan": float(schedule.makespan),
            "cp_min": self.cp_min,
            "slr": slr_from_bound(schedule.makespan, self.cp_min),
            "placement": placement_to_dict(self.graph, self.cluster, schedule.placement),
            "schedule": schedule.to_dict(self.graph, self.cluster),
        }

    def __repr__(self) -> str:
        return f"PlacementProblem({self.num_tasks} tasks, {self.num_devices} devices)"


def load_problem(
    graph: CompGraph,
    cluster: str | Path | DeviceCluster | None = None,
    devices: int | None = None,
    seed: int = 0,
    execution: str = "fifo",
) -> tuple[PlacementProblem, str]:
    """The problem of ``graph`` on a cluster, and a line saying where the cluster came from.

    Args:
        graph: the task graph.
        cluster: a cluster JSON file, ``preset:NAME`` or a DeviceCluster (see
            :func:`~mlsysopt.graph.presets.load_cluster`); or None to draw one.
        devices: with no ``cluster``: a random heterogeneous cluster of this many devices in the graph's units
            (:func:`~mlsysopt.graph.generate.cluster_for`, seeded with ``seed``).
        seed: Seed of the random cluster.
        execution: ``fifo`` or ``ordered`` (see :class:`PlacementProblem`).

    Returns:
        ``(problem, how)``: the problem, and where its cluster came from.
    """
    if cluster is not None and devices is not None:
        raise MlsysoptError("give either a cluster (--cluster C.json) or a number of devices (--devices N), not both")
    if cluster is None and devices is None:
        raise MlsysoptError(
            "no devices: give a cluster (--cluster C.json), or --devices N for a random cluster in the graph's units"
        )

    given = cluster if cluster is not None else devices
    cluster = load_cluster(given, graph, seed)
    how = "given" if isinstance(given, DeviceCluster) else str(cluster.meta.get("source", "given"))
    try:
        return PlacementProblem(graph, cluster, execution), how
    except MlsysoptError as exc:
        raise type(exc)(f"cluster {how}: {exc}") from None
