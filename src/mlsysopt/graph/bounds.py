"""Bounds on a placement's makespan: CP_MIN, longest node-weighted paths, and the schedule length ratio (SLR)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsysopt.errors import InvalidGraph
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.topology import longest_paths_csr


def cp_min(graph: CompGraph, cluster: DeviceCluster) -> float:
    """CP_MIN: longest path with every task on its fastest feasible device and free communication.

    A lower bound on the makespan of every feasible placement.

    Args:
        graph: The computation graph.
        cluster: The devices it may run on.

    Returns:
        The bound, in seconds.

    Raises:
        ConstraintViolation: If some task needs a hardware type no device supports.
    """
    feas = cluster.check_feasible(graph)
    times = np.asarray(graph.compute, np.float64)[:, None] / cluster.speed[None, :] + cluster.overhead[None, :]
    fastest = np.where(feas, times, np.inf).min(axis=1)
    indptr, par, _ = graph.parents_csr
    return float(longest_paths_csr(graph.topo_order, indptr, par, fastest)[0])


def longest_path(graph: CompGraph, durations: Any) -> float:
    """Critical-path length of ``graph`` with per-node durations, shape (n,) (no devices, no communication).

    Args:
        graph: The computation graph.
        durations: Run time of every node (finite, >= 0), e.g. seconds.

    Returns:
        The longest node-weighted path length, in the unit of ``durations``.

    Shapes:
        durations: (num_nodes,) float

    Raises:
        InvalidGraph: If ``durations`` has the wrong shape, or a value that is negative or not finite.
    """
    dur = np.ascontiguousarray(durations, dtype=np.float64)
    if dur.shape != (graph.num_nodes,):
        raise InvalidGraph(f"durations has shape {dur.shape}, expected ({graph.num_nodes},)")
    return float(longest_paths(graph, dur[None, :])[0])


def longest_paths(graph: CompGraph, durations: Any) -> np.ndarray:
    """Critical-path lengths for a batch of per-node durations: shape (B, n) -> (B,).

    Args:
        graph: The computation graph.
        durations: One row of node run times (finite, >= 0) per case.

    Returns:
        The longest node-weighted path length of every row.

    Shapes:
        durations: (B, num_nodes) float
        return: (B,) float64

    Raises:
        InvalidGraph: If ``durations`` is not 2-D with one column per node, or holds a negative or non-finite value.
    """
    dur = np.ascontiguousarray(durations, dtype=np.float64)
    if dur.ndim != 2 or dur.shape[1] != graph.num_nodes:
        raise InvalidGraph(f"durations has shape {dur.shape}, expected (B, {graph.num_nodes})")
    if not np.isfinite(dur).all() or (dur < 0).any():
        raise InvalidGraph("durations must be finite and >= 0")
    indptr, par, _ = graph.parents_csr
    return longest_paths_csr(graph.topo_order, indptr, par, dur)


def slr(makespan: float, graph: CompGraph, cluster: DeviceCluster) -> float:
    """Schedule length ratio: makespan / CP_MIN (>= 1 for every feasible placement).

    Args:
        makespan: Makespan of a placement, in seconds.
        graph: The graph it places.
        cluster: The cluster it places on.

    Returns:
        ``makespan / cp_min(graph, cluster)`` (see :func:`slr_from_bound` for a zero bound).

    Raises:
        ConstraintViolation: If some task needs a hardware type no device supports.
    """
    return slr_from_bound(makespan, cp_min(graph, cluster))


def slr_from_bound(makespan: float, bound: float) -> float:
    """makespan / bound, for callers that already hold CP_MIN (1 for an all-zero graph, inf for 0 bound).

    Args:
        makespan: Makespan of a placement, in seconds.
        bound: A lower bound on the makespan (CP_MIN), in seconds.

    Returns:
        ``makespan / bound``; 1.0 when both are 0, inf when only ``bound`` is 0.
    """
    if bound > 0:
        return float(makespan / bound)
    return 1.0 if makespan == 0 else float("inf")
