"""JSON-ready one-glance summaries of graphs, clusters and schedules (used by the CLI and every report)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph


def graph_summary(graph: CompGraph, name: str | None = None) -> dict[str, Any]:
    """Tasks, edges, depth, op histogram, FLOPs, compute, edge bytes and hardware-type counts of a graph."""
    types, counts = np.unique(graph.hw_type, return_counts=True)
    return {
        "name": name or str(graph.meta.get("name", "")),
        "tasks": graph.num_nodes,
        "edges": graph.num_edges,
        "depth": graph.depth,
        "ops": graph.op_histogram(),
        "total_flops": graph.total_flops,
        "total_compute": float(graph.compute.sum()),
        "total_edge_bytes": float(graph.edge_bytes.sum()),
        "hw_types": {str(int(t)): int(c) for t, c in zip(types, counts, strict=True)},
    }


def cluster_summary(cluster: DeviceCluster) -> dict[str, Any]:
    """Device count, types, and speed / bandwidth / delay ranges of a cluster (off-diagonal links only)."""
    d = cluster.num_devices
    off = ~np.eye(d, dtype=bool)
    bw = cluster.bandwidth[off]
    dl = cluster.delay[off]
    return {
        "devices": d,
        "hw_types": cluster.num_types,
        "names": list(cluster.names),
        "speed": _range(cluster.speed),
        "bandwidth": _range(bw) if bw.size else None,
        "delay": _range(dl) if dl.size else None,
        "devices_per_type": cluster.supports.sum(axis=0).astype(int).tolist(),
    }


def _range(a: np.ndarray) -> dict[str, float]:
    return {"min": float(a.min()), "mean": float(a.mean()), "max": float(a.max())}
