"""SYNTHETIC tile kernels: the DAG generator and the op costs of :mod:`mlsysopt.costmodel.data.synthetic`, one
configuration per tiling of the kernel's output (the TpuGraphs tile task's form; the cost model in that module's
docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mlsysopt.costmodel.data.synthetic import _OVERHEAD, _SENS, _TPUT, _dag, _edges, _node_feat, _work
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.topology import build_csr, longest_paths_csr


def _tile_costs(g: Mapping[str, np.ndarray], tiles: np.ndarray) -> np.ndarray:
    """(c, n) SYNTHETIC node costs of a kernel under each tiling of its output (the last node)."""
    r = int(g["rank"][-1])
    d = g["dims"][-1, :r].astype(np.float64)
    t = tiles[:, :r].astype(np.float64)
    n_tiles = np.ceil(d / t).prod(axis=1)
    waste = (np.ceil(d / t) * t).prod(axis=1) / d.prod()
    util = np.minimum(t[:, -1], 128) / 128 * np.minimum(t[:, -2], 8) / 8
    spill = 1.0 + np.maximum(t.prod(axis=1) / 2**18 - 1.0, 0.0)
    elems = np.where(g["dims"] > 0, g["dims"], 1).prod(axis=1).astype(np.float64)
    work = _work(g["opcode"], elems, g["kdim"].astype(np.float64)) / _TPUT[g["opcode"]]
    sens = _SENS[g["opcode"]][None, :]
    cost = _OVERHEAD + work[None, :] * waste[:, None] ** sens / np.sqrt(util)[:, None] * spill[:, None]
    cost[:, -1] += 30.0 * n_tiles
    return cost


def synth_tile_graph(num_nodes: int, configs: int, rng: np.random.Generator) -> dict:
    """One SYNTHETIC tile kernel in memory: the published tile ``.npz`` keys, shapes and dtypes.

    Args:
        num_nodes: Number of nodes, >= 2.
        configs: Number of tile configurations, >= 1.
        rng: Random generator.

    Returns:
        dict: Tile arrays ``node_feat``, ``node_opcode``, ``edge_index``, ``config_feat``, ``config_runtime`` and
        ``config_runtime_normalizers``.

    Shapes:
        node_feat: (num_nodes, 140) float32
        edge_index: (num_edges, 2) int64
        config_feat: (configs, 24) float32
        config_runtime: (configs,)

    Raises:
        InvalidOption: For fewer than 2 nodes or no configuration.
    """
    if num_nodes < 2 or configs < 1:
        raise InvalidOption(f"a synthetic tile graph needs >= 2 nodes and >= 1 config (got {num_nodes}, {configs})")
    g = _dag(num_nodes, rng)
    ei = _edges(g["op0"], g["op1"])
    r = int(g["rank"][-1])
    d = g["dims"][-1, :r]
    top = np.ceil(np.log2(np.maximum(d, 1))).astype(np.int64) + 1
    tiles = np.zeros((configs, 6), np.int64)
    tiles[:, :r] = 2 ** np.floor(rng.random((configs, r)) * (top + 1)).astype(np.int64)
    default = np.zeros((1, 6), np.int64)
    default[0, :r] = 1
    default[0, r - 1], default[0, r - 2] = min(128, 2 ** top[-1]), min(8, 2 ** top[-2])
    cf = np.zeros((configs, 24), np.float32)
    cf[:, :6] = tiles
    cf[:, 6], cf[:, 7] = tiles[:, :r].sum(axis=1), tiles[:, :r].prod(axis=1)
    cf[:, 8 : 8 + r] = np.log2(tiles[:, :r])
    indptr, par, _ = build_csr(ei[:, 0], ei[:, 1], num_nodes)  # parents of every consumer
    topo = np.arange(num_nodes, dtype=np.int64)
    rt = longest_paths_csr(topo, indptr, par, _tile_costs(g, np.concatenate([default, tiles]))).tolist()
    return {
        "node_feat": _node_feat(
            g, np.bincount(ei[:, 0], minlength=num_nodes), np.bincount(ei[:, 1], minlength=num_nodes), rng
        ),
        "node_opcode": g["opcode"].astype(np.uint8),
        "edge_index": ei,
        "config_feat": cf,
        "config_runtime": np.rint(rt[1:]).astype(np.int64),
        "config_runtime_normalizers": np.full(configs, round(rt[0]), np.int64),
    }
