"""The converter between a :class:`~mlsysopt.graph.problem.PlacementProblem` and saga's ``Network``/``TaskGraph``.

saga (PyPI ``anrg-saga``) schedules a ``TaskGraph`` (task costs, dependency sizes) on a ``Network`` (node speeds,
link speeds); a task runs ``cost / speed`` and a dependency takes ``size / link_speed`` between two nodes, 0 on one.
mlsysopt's problems have more than that, and the converter says how each difference is handled:

* **Link delay.** saga has none. Each pair's delay is folded into an *effective* link speed at the graph's mean
  transfer size ``b``: ``b / (delay + b / bandwidth)``, so an edge of the mean size costs exactly what it costs in
  mlsysopt's simulator (smaller edges cost less, larger more). With zero delay the speed is the bandwidth itself.
* **Asymmetric links.** saga's network is undirected: a pair's time per byte (and delay) is the mean of its two
  directions (exact for symmetric clusters, which every generator and preset makes).
* **Hardware types.** saga has no per-type support: its schedulers see every device as able to run every task. A
  task it puts on a device that cannot run its type (or a task a scheduler leaves out) is *repaired*: in saga's
  start order it goes to its feasible device with the earliest finish given the tasks placed before it.
  ``repaired`` counts them.
* **Parallel edges** ``u -> v`` (the simulator sends each one) become one dependency of the largest size: the last
  of them to arrive decides when ``v`` may start.
* **Time unit.** saga compares times with an absolute tolerance of 1e-9, which a DNN's nanosecond kernels fall
  under; node and link speeds are divided by :func:`time_scale` (the median task duration) so that saga works in
  units of a typical task, and saga's makespan is converted back to seconds.

saga's objects are built with index-based names (``t3``, ``d1``) and deterministic hashes, so a scheduler's
iteration order over tasks and nodes (its tie-breaks) is the same in every process (saga's own objects hash their
names, which Python salts per process). Their look-ups (task by name, in/out edges, links) are memoized: saga's
own scan every task or build new objects on each call, which dominates its run time on large graphs.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import saga

from mlsysopt.graph.problem import PlacementProblem


class _Node(saga.NetworkNode):
    """A saga network node that hashes by its index (saga's hashes its name, salted per process)."""

    idx: int = 0

    def __hash__(self) -> int:
        return self.idx


class _Link(saga.NetworkEdge):
    """A saga network edge that hashes by its index."""

    idx: int = 0

    def __hash__(self) -> int:
        return self.idx


class _Task(saga.TaskGraphNode):
    """A saga task that hashes by its index."""

    idx: int = 0

    def __hash__(self) -> int:
        return self.idx


class _Dependency(saga.TaskGraphEdge):
    """A saga dependency that hashes by its index."""

    idx: int = 0

    def __hash__(self) -> int:
        return self.idx


def _name(value: Any) -> str:
    return value if isinstance(value, str) else value.name


class FastTaskGraph(saga.TaskGraph):
    """saga's TaskGraph with memoized look-ups (same results; saga's scan every task on every call)."""

    @cached_property
    def memo(self) -> dict:
        """The look-ups computed so far (in the instance's dict: no pydantic attribute machinery per call)."""
        return {}

    def _cached(self, key: Any, make: Callable[[], Any]) -> Any:
        memo = self.memo
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def get_task(self, name: Any) -> saga.TaskGraphNode:
        """The task of that name (ValueError if there is none, as saga's)."""
        tasks = self._cached("tasks", lambda: {t.name: t for t in self.tasks})
        key = _name(name)
        if key not in tasks:
            raise ValueError(f"Task {key} does not exist in the task graph.")
        return tasks[key]

    def in_edges(self, task: Any) -> list[saga.TaskGraphEdge]:
        """The dependencies into ``task``."""
        key = _name(task)
        return list(self._cached(("in", key), lambda: super(FastTaskGraph, self).in_edges(key)))

    def out_edges(self, task: Any) -> list[saga.TaskGraphEdge]:
        """The dependencies out of ``task``."""
        key = _name(task)
        return list(self._cached(("out", key), lambda: super(FastTaskGraph, self).out_edges(key)))

    def in_degree(self, task: Any) -> int:
        """Number of dependencies into ``task``."""
        key = _name(task)
        return len(self._cached(("in", key), lambda: super(FastTaskGraph, self).in_edges(key)))

    def out_degree(self, task: Any) -> int:
        """Number of dependencies out of ``task``."""
        key = _name(task)
        return len(self._cached(("out", key), lambda: super(FastTaskGraph, self).out_edges(key)))

    def get_dependency(self, source: Any, target: Any) -> saga.TaskGraphEdge:
        """The dependency ``source -> target``."""
        s, t = _name(source), _name(target)
        return self._cached(("dep", s, t), lambda: super(FastTaskGraph, self).get_dependency(s, t))

    def topological_sort(self) -> list[saga.TaskGraphNode]:
        """saga's topological order (networkx's), computed once."""
        return list(self._cached("topo", lambda: super(FastTaskGraph, self).topological_sort()))


class FastNetwork(saga.Network):
    """saga's Network with memoized node and link look-ups."""

    @cached_property
    def memo(self) -> dict:
        """The look-ups computed so far."""
        return {}

    def get_node(self, node: Any) -> saga.NetworkNode:
        """The node of that name (ValueError if there is none, as saga's)."""
        memo = self.memo
        if "nodes" not in memo:
            memo["nodes"] = {n.name: n for n in self.nodes}
        key = _name(node)
        if key not in memo["nodes"]:
            raise ValueError(f"Node {key} does not exist in the network.")
        return memo["nodes"][key]

    def get_edge(self, source: Any, target: Any) -> saga.NetworkEdge:
        """The link between two nodes."""
        key = (_name(source), _name(target))
        memo = self.memo
        if key not in memo:
            memo[key] = super().get_edge(*key)
        return memo[key]


def task_name(i: int) -> str:
    """saga's name of task ``i``."""
    return f"t{i}"


def device_name(d: int) -> str:
    """saga's name of device ``d``."""
    return f"d{d}"


def effective_link_speeds(problem: PlacementProblem) -> np.ndarray:
    """(devices, devices) symmetric saga link speeds: bandwidth with the delay folded in at the mean transfer size."""
    c, g = problem.cluster, problem.graph
    inv = 0.5 * (c.inv_bandwidth + c.inv_bandwidth.T)
    delay = 0.5 * (c.delay + c.delay.T)
    sizes = g.edge_bytes[g.edge_bytes > 0]
    mean = float(sizes.mean()) if sizes.size else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        per_byte = inv + (delay / mean if mean > 0 else 0.0)
        speed = np.where(per_byte > 0, 1.0 / per_byte, np.inf)
    np.fill_diagonal(speed, np.inf)
    return speed


def time_scale(problem: PlacementProblem) -> float:
    """The time unit saga works in: the median positive task duration on the mean device (1 if there is none)."""
    w = problem.exec_times[problem.mask]
    w = w[w > 0]
    return float(np.median(w)) if w.size else 1.0


#: A zero-cost task's cost in saga's task graph, relative to the largest task's (ranks never tie along an edge).
ZERO_COST_FLOOR = 1e-9


def to_saga(problem: PlacementProblem) -> tuple[FastNetwork, FastTaskGraph]:
    """saga's (Network, TaskGraph) of ``problem`` (see the module docstring for what is approximated).

    Devices are named ``d0``, ``d1``, ...; tasks ``t0``, ``t1``, ...; speeds are in units of :func:`time_scale`.

    Args:
        problem: The problem to convert.

    Returns:
        ``(network, task_graph)``: saga's network (node and effective link speeds) and task graph (task costs,
        dependency sizes).
    """
    g, c = problem.graph, problem.cluster
    d = c.num_devices
    unit = time_scale(problem)
    speed = effective_link_speeds(problem) * unit
    nodes = [_Node(name=device_name(i), speed=float(c.speed[i] * unit), idx=i) for i in range(d)]
    links = []
    for i in range(d):
        for j in range(i, d):
            links.append(_Link(source=device_name(i), target=device_name(j), speed=float(speed[i, j]), idx=len(links)))
    network = FastNetwork(nodes=frozenset(nodes), edges=frozenset(links))
    # a zero-cost task gets a negligible cost: saga's rank-based schedulers (HBMCT) sort tasks by upward rank, and
    # a parent whose rank ties its child's may be scheduled after it (KeyError on the parent in saga)
    floor = ZERO_COST_FLOOR * (float(g.compute.max()) if g.num_nodes and g.compute.max() > 0 else 1.0)
    tasks = [_Task(name=task_name(i), cost=max(float(g.compute[i]), floor), idx=i) for i in range(g.num_nodes)]
    sizes: dict[tuple[int, int], float] = {}
    src, dst = g.edge_index
    for u, v, b in zip(src.tolist(), dst.tolist(), g.edge_bytes.tolist(), strict=True):
        sizes[u, v] = max(sizes.get((u, v), 0.0), b)
    deps = [
        _Dependency(source=task_name(u), target=task_name(v), size=b, idx=k)
        for k, ((u, v), b) in enumerate(sizes.items())
    ]
    return network, FastTaskGraph(tasks=frozenset(tasks), dependencies=frozenset(deps))


@dataclass
class SagaPlacement:
    """What one saga schedule means for mlsysopt.

    Args:
        placement: Device id of every task (repaired ones included).
        saga_makespan: saga's own makespan, in the graph's time unit, in saga's model (no delay, effective link
            speeds, no hardware types).
        repaired: Tasks moved to a feasible device or placed because the scheduler left them out.
        order: The schedule's task order (by saga's start, then finish; topological): each device's own order.
        missing: Tasks the scheduler left out of its schedule; a schedule missing any is *invalid* (its
            makespan covers part of the work) and is never ranked.

    Shapes:
        placement: (num_tasks,) int64 device index per task
        order: (num_tasks,) int64 task ids
    """

    placement: np.ndarray
    saga_makespan: float
    repaired: int
    order: np.ndarray | None = None
    missing: int = 0


def from_saga(schedule: saga.Schedule, problem: PlacementProblem) -> SagaPlacement:
    """The feasible placement of a saga schedule of ``problem`` (infeasible or missing tasks repaired).

    Args:
        schedule: saga's schedule of the network and task graph :func:`to_saga` made of ``problem``.
        problem: The problem it schedules.

    Returns:
        The placement, saga's makespan in the graph's time unit, how many tasks were repaired, the schedule's task
        order and how many tasks it left out (see :class:`SagaPlacement`).
    """
    n = problem.num_tasks
    placement = np.full(n, -1, np.int64)
    start = np.full(n, np.inf)
    finish = np.full(n, np.inf)
    for node, scheduled in schedule.items():
        dev = int(node[1:])
        for t in scheduled:
            if t.name.startswith("t"):
                i = int(t.name[1:])
                placement[i], start[i], finish[i] = dev, t.start, t.end
    missing = int((placement < 0).sum())
    mask = problem.mask
    ok = placement >= 0
    ok[ok] = mask[np.flatnonzero(ok), placement[ok]]
    repaired = int((~ok).sum())
    if repaired:
        placement = _repair(problem, placement, ok, start)
    # saga's (start, finish) order, topological: a task never starts before its parent in a valid schedule, and
    # priority_order breaks the ties (zero-length tasks) by readiness
    key = np.empty(n)
    key[np.lexsort((np.arange(n), finish, start))] = np.arange(n)
    order = problem.graph.priority_order(key).astype(np.int64)
    makespan = float(schedule.makespan) * time_scale(problem)
    return SagaPlacement(problem.check(placement), makespan, repaired, order, missing)


def _repair(problem: PlacementProblem, placement: np.ndarray, ok: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Place the tasks not ``ok`` on their earliest-finish feasible device, in saga's start order."""
    w, mask = problem.exec_times, problem.mask
    big = np.where(np.isfinite(start), start, np.inf)
    order = problem.graph.priority_order(np.nan_to_num(big, posinf=np.finfo(np.float64).max))
    placement = placement.copy()
    finish = np.zeros(problem.num_tasks)
    free = np.zeros(problem.num_devices)
    for i in order:
        eft = np.maximum(problem.arrival_times(int(i), placement, finish), free) + w[i]
        if not ok[i]:
            eft[~mask[i]] = np.inf
            placement[i] = int(np.argmin(eft))
        d = placement[i]
        finish[i] = eft[d]
        free[d] = max(free[d], eft[d])
    return placement


#: The ``cache_clear`` of every ``lru_cache`` in saga's modules, found once per set of loaded modules: walking every
#: module of the process on each scheduler call cost ~5 ms in a test worker (~12,000 modules), more than a small
#: schedule takes.
_SAGA_CACHES: dict[str, Any] = {"modules": -1, "clears": []}


def _saga_cache_clears() -> list[Callable[[], None]]:
    """The ``cache_clear`` functions of saga's modules (recomputed when a module was imported since)."""
    if _SAGA_CACHES["modules"] != len(sys.modules):
        clears = []
        for name, module in list(sys.modules.items()):
            if name.startswith("saga.") and module is not None:
                for value in vars(module).values():
                    clear = getattr(value, "cache_clear", None)
                    if callable(clear):
                        clears.append(clear)
        _SAGA_CACHES.update(modules=len(sys.modules), clears=clears)
    return _SAGA_CACHES["clears"]


@contextmanager
def saga_context(seed: int) -> Any:
    """Around one saga scheduler call: Python's ``random`` seeded (WBA draws from it) and restored afterwards,
    saga's logging quiet, and saga's module-level rank caches (``lru_cache`` on every network/graph ever seen)
    cleared afterwards so that they do not grow without bound."""
    state = random.getstate()
    random.seed(seed)
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        random.setstate(state)
        logger.setLevel(level)
        for clear in _saga_cache_clears():
            clear()
