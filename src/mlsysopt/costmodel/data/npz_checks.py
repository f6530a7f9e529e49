"""Checks of the arrays in a graph ``.npz`` file: each names the file and the key it refuses (InvalidDataFile).

Used by the TpuGraphs loaders (:mod:`mlsysopt.costmodel.data.tpugraphs`); every check either returns the array in
the record's dtype or raises one clear error, so a loader reads top to bottom as the file format's specification.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidDataFile
from mlsysopt.graph.topology import build_csr, kahn_levels

#: Width of a TpuGraphs node-feature row.
NODE_FEAT_DIM = 140

#: Largest |node feature| a file may hold: real TpuGraphs features (dims, sizes, strides) stay far below it; 3e38
#: (float32's limit) would overflow the first product the model or the tree baselines compute.
MAX_FEATURE = 1e15


def require_key(a: Mapping[str, np.ndarray], key: str, where: str) -> np.ndarray:
    if key not in a:
        raise InvalidDataFile(f"{where}: missing key '{key}' (has: {', '.join(sorted(a)) or 'nothing'})")
    return np.asarray(a[key])


def check_shape(arr: np.ndarray, key: str, expected: tuple[int, ...], where: str, why: str = "") -> None:
    if arr.shape != expected:
        note = f" ({why})" if why else ""
        raise InvalidDataFile(f"{where}: key '{key}' has shape {arr.shape}, expected {expected}{note}")


def as_ints(arr: np.ndarray, key: str, where: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidDataFile(f"{where}: key '{key}' has dtype {arr.dtype}, expected integers")
    return arr.astype(np.int64, copy=False)


def as_floats(arr: np.ndarray, key: str, where: str, dtype: Any = np.float32) -> np.ndarray:
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidDataFile(f"{where}: key '{key}' has dtype {arr.dtype}, expected numbers")
    out = arr.astype(dtype, copy=False)
    bad = ~np.isfinite(out)
    if bad.any():
        pos = tuple(int(v[0]) for v in np.nonzero(bad))
        raise InvalidDataFile(f"{where}: key '{key}' has a non-finite value {out[pos]} at index {pos}")
    return out


def check_in_range(arr: np.ndarray, key: str, n: int, where: str, what: str) -> None:
    bad = np.argwhere((arr < 0) | (arr >= n))
    if bad.size:
        k = tuple(int(v) for v in bad[0])
        at = f"row {k[0]} ({arr[k[0]].tolist()})" if arr.ndim == 2 else f"entry {k[0]} ({int(arr[k])})"
        raise InvalidDataFile(f"{where}: key '{key}' {at} is out of range: {what} has {n} nodes (ids 0..{n - 1})")


def check_positive(arr: np.ndarray, key: str, where: str) -> None:
    bad = np.flatnonzero(arr <= 0)
    if bad.size:
        k = int(bad[0])
        raise InvalidDataFile(f"{where}: key '{key}' entry {k} is {arr[k]} (runtimes must be > 0)")


def graph_arrays(a: Mapping[str, np.ndarray], where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """node_feat, node_opcode and the flipped (2, m) edge_index, validated."""
    nf = require_key(a, "node_feat", where)
    if nf.ndim != 2:
        raise InvalidDataFile(f"{where}: key 'node_feat' has shape {nf.shape}, expected (n, {NODE_FEAT_DIM})")
    n = nf.shape[0]
    if n == 0:
        raise InvalidDataFile(f"{where}: key 'node_feat' has 0 rows: the graph is empty")
    check_shape(nf, "node_feat", (n, NODE_FEAT_DIM), where)
    x = as_floats(nf, "node_feat", where)
    op = as_ints(require_key(a, "node_opcode", where), "node_opcode", where)
    check_shape(op, "node_opcode", (n,), where, f"node_feat has {n} rows")
    if (op < 0).any():
        k = int(np.flatnonzero(op < 0)[0])
        raise InvalidDataFile(f"{where}: key 'node_opcode' entry {k} is negative ({op[k]})")
    ei = require_key(a, "edge_index", where)
    if ei.size == 0:
        ei = ei.reshape(0, 2)
    if ei.ndim != 2 or ei.shape[1] != 2:
        raise InvalidDataFile(f"{where}: key 'edge_index' has shape {ei.shape}, expected (m, 2)")
    ei = as_ints(ei, "edge_index", where)
    check_in_range(ei, "edge_index", n, where, "the graph")
    big = np.abs(x) > MAX_FEATURE
    if big.any():
        r, c = (int(v[0]) for v in np.nonzero(big))
        raise InvalidDataFile(
            f"{where}: key 'node_feat' row {r} column {c} is {x[r, c]:.3g}, beyond the {MAX_FEATURE:.0e} no TpuGraphs "
            "feature (dims, sizes, strides) comes near: a corrupt file"
        )
    loops = np.flatnonzero(ei[:, 0] == ei[:, 1])
    if loops.size:
        k = int(loops[0])
        raise InvalidDataFile(
            f"{where}: key 'edge_index' row {k} ({ei[k].tolist()}) is a self-loop: HLO graphs are DAGs"
        )
    check_acyclic(ei, n, where)
    # TpuGraphs row [u, v]: u consumes v, i.e. data flows v -> u.
    return x, op, np.ascontiguousarray(ei[:, ::-1].T)


def check_acyclic(ei: np.ndarray, n: int, where: str) -> None:
    """InvalidDataFile naming a node on a cycle of ``edge_index`` (rows ``[consumer, producer]``)."""

    indptr, child, _ = build_csr(ei[:, 1], ei[:, 0], n)
    indeg = np.bincount(ei[:, 0], minlength=n).astype(np.int64)
    _, ordered = kahn_levels(indptr, child, indeg)
    if ordered < n:
        node = int(np.flatnonzero(indeg > 0)[0])
        raise InvalidDataFile(
            f"{where}: key 'edge_index' has a cycle through node {node} ({n - ordered} nodes on or after cycles): "
            "HLO graphs are DAGs"
        )


def runtime_array(a: Mapping[str, np.ndarray], key: str, where: str) -> np.ndarray:
    rt = require_key(a, key, where)
    if rt.ndim != 1:
        raise InvalidDataFile(f"{where}: key '{key}' has shape {rt.shape}, expected (c,)")
    if rt.shape[0] == 0:
        raise InvalidDataFile(f"{where}: key '{key}' has 0 entries: the graph has zero configurations")
    rt = as_floats(rt, key, where, np.float64)
    check_positive(rt, key, where)
    return rt


def node_splits_array(a: Mapping[str, np.ndarray], n: int, where: str) -> np.ndarray | None:
    if "node_splits" not in a:
        return None
    s = as_ints(np.asarray(a["node_splits"]).reshape(-1), "node_splits", where)
    bad = np.flatnonzero((s < 0) | (s > n))
    if bad.size:
        k = int(bad[0])
        raise InvalidDataFile(
            f"{where}: key 'node_splits' entry {k} is {s[k]}, outside 0..{n} (the graph has {n} nodes)"
        )
    s = np.unique(s)
    return s[(s > 0) & (s < n)]
