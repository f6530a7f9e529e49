"""Placements: one device id per task; checking them and reading/writing them as JSON."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import ConstraintViolation, InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.io import read_json

#: The ``format`` prefix of the device maps ``placement place`` writes for PyTorch models.
DEVICE_MAP_FORMAT = "mlsysopt.device_map/"


def check_placement(graph: CompGraph, cluster: DeviceCluster, placement: Any) -> np.ndarray:
    """Return ``placement`` as an int64 array, or raise naming the first bad task.

    InvalidPlacement for a wrong shape or an unknown device id; ConstraintViolation for a task placed on a
    device that does not support its hardware type.

    Args:
        graph: The computation graph.
        cluster: The devices it runs on.
        placement: Device id of every task (any integer array-like).

    Returns:
        The placement as an int64 array.

    Shapes:
        placement: (num_tasks,) int device index per task

    Raises:
        InvalidPlacement: If the shape is wrong, the ids are not integers, or a device id is out of range.
        ConstraintViolation: If a task is on a device that does not support its hardware type.
    """
    p = np.asarray(placement)
    if p.shape != (graph.num_nodes,):
        raise InvalidPlacement(f"placement has shape {p.shape}, expected ({graph.num_nodes},): one device per task")
    if not np.issubdtype(p.dtype, np.integer):
        raise InvalidPlacement(f"placement must hold integer device ids, got {p.dtype}")
    p = p.astype(np.int64)
    bad = np.flatnonzero((p < 0) | (p >= cluster.num_devices))
    if bad.size:
        i = int(bad[0])
        raise InvalidPlacement(
            f"task '{graph.names[i]}' is placed on device {p[i]}, but the cluster has {cluster.num_devices}"
        )
    ok = cluster.feasible(graph)[np.arange(graph.num_nodes), p]
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ConstraintViolation(
            f"task '{graph.names[i]}' needs hardware type {int(graph.hw_type[i])}, which device "
            f"'{cluster.names[p[i]]}' does not support"
        )
    return p


def placement_from_dict(
    graph: CompGraph, cluster: DeviceCluster, data: Mapping[str, Any], where: str = "placement"
) -> np.ndarray:
    """Read ``{task name: device name or id}`` (every task once) into a checked device-id array.

    Also reads what mlsysopt writes: a ``result.json`` (its ``placement``) and a ``device_map.json`` (format
    ``mlsysopt.device_map/N``: each of its ``nodes`` has a ``device``).

    Args:
        graph: The graph whose task names the keys are.
        cluster: The cluster whose device names (or ids) the values are.
        data: The parsed JSON object.
        where: What to name in error messages (e.g. a file path).

    Returns:
        Device id of every task, shape (num_tasks,) int64.

    Raises:
        InvalidPlacement: If a task or device is unknown, a task has no device, or the object has the wrong form.
        ConstraintViolation: If a task is on a device that does not support its hardware type.
    """
    if not isinstance(data, Mapping):
        raise InvalidPlacement(f"{where}: expected a JSON object mapping task names to devices")
    if "placement" in data and isinstance(data["placement"], Mapping):
        data = data["placement"]
    elif str(data.get("format", "")).startswith(DEVICE_MAP_FORMAT):
        nodes = data.get("nodes")
        if not isinstance(nodes, Mapping) or not all(isinstance(v, Mapping) and "device" in v for v in nodes.values()):
            raise InvalidPlacement(f"{where}: a device map needs 'nodes': {{node: {{'device': ...}}}}")
        data = {name: node["device"] for name, node in nodes.items()}
    names = {s: i for i, s in enumerate(graph.names)}
    devices = {s: i for i, s in enumerate(cluster.names)}
    p = np.full(graph.num_nodes, -1, np.int64)
    for task, dev in data.items():
        if task not in names:
            raise InvalidPlacement(f"{where}: unknown task '{task}' (not a node of the graph)")
        if isinstance(dev, str):
            if dev not in devices:
                raise InvalidPlacement(f"{where}: task '{task}' is placed on unknown device '{dev}'")
            p[names[task]] = devices[dev]
        elif isinstance(dev, int) and not isinstance(dev, bool) and 0 <= dev < cluster.num_devices:
            p[names[task]] = dev
        else:
            raise InvalidPlacement(f"{where}: task '{task}' is placed on unknown device {dev!r}")
    missing = np.flatnonzero(p < 0)
    if missing.size:
        raise InvalidPlacement(f"{where}: {missing.size} task(s) have no device, e.g. '{graph.names[int(missing[0])]}'")
    try:
        return check_placement(graph, cluster, p)
    except InvalidPlacement as exc:
        raise type(exc)(f"{where}: {exc}") from None


def load_placement(path: str | Path, graph: CompGraph, cluster: DeviceCluster) -> np.ndarray:
    """Read a placement JSON file: ``{task: device}``, a ``result.json`` holding one, or a list of device ids.

    Args:
        path: The JSON file.
        graph: The graph it places.
        cluster: The cluster it places on.

    Returns:
        Device id of every task, shape (num_tasks,) int64.

    Raises:
        InvalidPlacement: If the file is missing, not JSON, or does not describe a valid placement.
        ConstraintViolation: If a task is on a device that does not support its hardware type.
    """

    data = read_json(path, InvalidPlacement, expect=None)
    if isinstance(data, list):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in data):
            raise InvalidPlacement(f"{path}: a list placement must hold one integer device id per task")
        try:
            return check_placement(graph, cluster, data)
        except InvalidPlacement as exc:
            raise type(exc)(f"{path}: {exc}") from None
    return placement_from_dict(graph, cluster, data, where=str(path))


def placement_to_dict(graph: CompGraph, cluster: DeviceCluster, placement: np.ndarray) -> dict[str, str]:
    """``{task name: device name}`` for JSON output.

    Args:
        graph: The graph (for task names).
        cluster: The cluster (for device names).
        placement: Device id of every task, shape (num_tasks,) int.

    Returns:
        A dict from every task name to its device name.
    """
    return {graph.names[i]: cluster.names[int(d)] for i, d in enumerate(placement)}


def random_placement(graph: CompGraph, cluster: DeviceCluster, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random feasible placement.

    Args:
        graph: The computation graph.
        cluster: The devices it may run on.
        rng: Random generator to draw from.

    Returns:
        Device id of every task, shape (num_tasks,) int64; each drawn uniformly among the task's feasible devices.

    Raises:
        ConstraintViolation: If some task needs a hardware type no device supports.
    """
    return random_from_mask(cluster.check_feasible(graph), rng)


def random_from_mask(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random placement among the allowed devices of a (tasks, devices) feasibility mask.

    Args:
        mask: Which devices each task may use; every row needs at least one True (a row of all False gives 0).
        rng: Random generator to draw from.

    Returns:
        Device id of every task.

    Shapes:
        mask: (num_tasks, num_devices) bool
        return: (num_tasks,) int64 device index per task
    """
    u = rng.random(mask.shape) * mask
    return np.argmax(u, axis=1).astype(np.int64)


def is_schedule(data: Any) -> bool:
    """Whether JSON ``data`` is a ``schedule.json`` (``{"devices": {device: [tasks in order]}}``)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("devices"), dict)
        and all(isinstance(v, list) for v in data["devices"].values())
    )


def schedule_from_dict(
    graph: CompGraph, cluster: DeviceCluster, data: dict[str, Any], where: str = "schedule"
) -> tuple[np.ndarray, np.ndarray]:
    """The placement and the task order of a ``schedule.json``: each device's tasks in the order it runs them.

    Entries are task names or ``{"task": name, ...}`` objects (``place`` writes start and finish besides, which are
    not needed: the order is what a static executor follows).

    Args:
        graph: The graph it schedules.
        cluster: The cluster it schedules on.
        data: The parsed JSON.
        where: The file, for messages.

    Returns:
        ``(placement, order)``: device id of every task, and a topological order of the tasks that runs each
        device's tasks in the file's order.

    Raises:
        InvalidPlacement: If a device or task is unknown, a task is missing or listed twice, or a device's order
            contradicts the graph (a task listed before one of its inputs' ancestors on the same device).
        ConstraintViolation: If a task is on a device that does not support its hardware type.
    """
    index = {name: i for i, name in enumerate(graph.names)}
    n = graph.num_nodes
    placement = np.full(n, -1, np.int64)
    chains: list[list[int]] = []
    for dev, entries in data["devices"].items():
        if dev not in cluster.names:
            raise InvalidPlacement(f"{where}: 'devices' names '{dev}', which is not a device of the cluster")
        d = cluster.names.index(dev)
        chain = []
        for k, entry in enumerate(entries):
            name = entry.get("task") if isinstance(entry, dict) else entry
            if not isinstance(name, str) or name not in index:
                raise InvalidPlacement(f"{where}: 'devices'['{dev}'][{k}] is {name!r}, not a task of the graph")
            i = index[name]
            if placement[i] >= 0:
                raise InvalidPlacement(f"{where}: task '{name}' is listed twice")
            placement[i] = d
            chain.append(i)
        chains.append(chain)
    missing = np.flatnonzero(placement < 0)
    if missing.size:
        raise InvalidPlacement(
            f"{where}: task '{graph.names[int(missing[0])]}' is on no device ({missing.size} missing)"
        )
    try:
        placement = check_placement(graph, cluster, placement)
    except InvalidPlacement as exc:
        raise type(exc)(f"{where}: {exc}") from None
    # Kahn's algorithm over the graph's edges plus each device's chain: a topological order that keeps the file's
    # per-device order, or the proof that the file's order cannot run
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = np.zeros(n, np.int64)
    for u, v in graph.edge_index.T.tolist():
        succ[u].append(v)
        indeg[v] += 1
    for chain in chains:
        for u, v in itertools.pairwise(chain):
            succ[u].append(v)
            indeg[v] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    order = []
    while ready:
        u = ready.pop()
        order.append(u)
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if len(order) < n:
        stuck = graph.names[int(np.flatnonzero(indeg > 0)[0])]
        raise InvalidPlacement(
            f"{where}: the devices' orders contradict the graph: task '{stuck}' waits on a task listed after one "
            "of its inputs' successors on the same device (no executor can follow this order)"
        )
    return placement, np.asarray(order, np.int64)
