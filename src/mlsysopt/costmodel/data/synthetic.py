"""SYNTHETIC TpuGraphs-like and MalNet-like data, written in the exact published file formats.

The real data cannot be downloaded here, so everything these generators write is synthetic; file names say so.

**Layout graphs** (:func:`synth_layout_graph`, written by ``synth_files``). An XLA-like DAG whose node ids are a
topological order. Ops come from :data:`SYNTH_OPS`; operand 0 is usually the previous compute node (long chains,
short branches), binary ops take a second operand: dot/convolution (and 30% of add/multiply) a parameter, the
others a skip connection from up to ~3,000 nodes back (so effects cross segments). Each tensor has rank 2-4, dims
from a palette with awkward sizes (3, 49, 100, 1000...) and at most 2^16 elements. ``node_feat`` columns (the
rest is zero): 0 is-source, 1 rank, 2-7 dims (outer..inner, 0-padded), 8 log2 elements, 9 contraction size
(dot/conv/reduce), 10 log2 work, 11 #operands, 12 #users, 13-18 the node's native minor-to-major order (-1
padded), 19 element bits, 20-25 log2 dims, 26-31 log2 padding waste of each dim if it were minor-most (padded to
128), 32-37 the same as second-minor (padded to 8), 38-45 N(0, 0.1) noise.

Layout model. A tensor's layout is one of 4 classes; for rank r class 0 is row-major (minor-to-major
``[r-1, ..., 0]``), 1 swaps the two minor-most dims, 2 makes dim 0 minor-most, 3 makes dim 0 second-minor (on
rank 2, 2 = 1 and 3 = 0). Every node has a random native class (node_feat 13-18). Dot, convolution, ~30% of
reshapes/transposes and ~25% of parameters are configurable (~10-15% of nodes); a configuration picks their
class (config 0 = the native classes). Another node follows the class of the configurable node or source it
reaches within 2 operand-0 steps (operand 0 = its first row in ``edge_index``), else keeps its native class, so a
choice spreads to nearby consumers. ``node_config_feat[c, j]`` = minor-to-major orders (6 each, -1 padded) of
the node's output, operand 0 and operand 1 under the chosen class.
Node cost (ns) = overhead + work / throughput + a layout penalty ``U * sens(op) * log2(waste) *
log2(1 + work / throughput)``, where ``waste`` pads the minor-most dim to 128 and the second-minor to 8 (so it
depends on the node's dims AND its class), + for every input whose class differs from the node's (except the
operand 0 it follows) a transpose ``U * (1 + log2 elements(producer))``. So a node's cost depends on its own
layout and its producers'. Penalties are log-compressed in the op's size on purpose: with linear scaling a few
huge ops decide every ranking and a small GNN barely learns (measured: OPA ~0.6 instead of ~0.7).
``config_runtime`` = critical path (the shared ``mlsysopt.graph.topology.longest_paths_csr``) of those costs,
rounded to integer ns as in the published files, so no single segment determines it. :func:`layout_durations`
recomputes the costs from a file's arrays alone. Configurations other than 0 mutate a random fraction of nodes,
or (30%) give one class per block of nodes; class counts alone predict little (GBDT on aggregates: OPA ~0.65).

**Tile graphs** (:func:`~mlsysopt.costmodel.data.synthetic_tile.synth_tile_graph`): small kernels from the same
generator; a configuration tiles the kernel's output. Cost per node = work x (padding waste ^ sens) / (hardware
utilisation of the tile ^ 0.5) x spill factor, plus a per-tile overhead; runtime = critical path; the normalizer is
the default tiling's runtime.

**MalNet-like graphs**: :func:`synth_malnet` and :func:`malnet_like_graph` live in
:mod:`mlsysopt.costmodel.data.malnet_synthetic` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mlsysopt.costmodel.data.malnet_synthetic import MALNET_GENERATORS, malnet_like_graph, synth_malnet
from mlsysopt.costmodel.data.npz_checks import NODE_FEAT_DIM
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.topology import build_csr, longest_paths_csr

SYNTH_OPS: tuple[str, ...] = ("parameter", "constant", "add", "multiply", "tanh", "convert", "broadcast", "reshape",
                              "transpose", "reduce", "dot", "convolution", "concatenate", "slice")  # fmt: skip
PARAM, CONST, ADD, MUL, TANH, CONVERT, BCAST, RESHAPE, TRANSPOSE, REDUCE, DOT, CONV, CONCAT, SLICE = range(14)
_ELEMENTWISE = (ADD, MUL, TANH, CONVERT)
_BINARY, _BINARY_P = (ADD, MUL, DOT, CONV, CONCAT), (0.35, 0.15, 0.15, 0.1, 0.25)
_UNARY, _UNARY_P = (TANH, CONVERT, BCAST, RESHAPE, TRANSPOSE, REDUCE, SLICE), (0.25, 0.1, 0.1, 0.15, 0.1, 0.15, 0.15)
_PALETTE = np.array([1, 2, 3, 4, 7, 8, 16, 28, 32, 49, 64, 96, 100, 128, 196, 256, 384, 512, 1000, 1024])
_CAP = {2: 20, 3: 18, 4: 16}  # palette prefix per rank
_MAX_ELEMS = 2**16
_HOPS = 2  # a chosen layout reaches consumers at most this many operand-0 steps away
_CHAIN = 0.85  # probability that operand 0 is the previous node
_OVERHEAD = 200.0  # ns per executed op
_SENS = np.array([0, 0, 0.5, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3, 0.7, 1.0, 1.0, 0.3, 0.3])  # padding sensitivity per op
_TPUT = np.array([1, 1, 200, 200, 100, 200, 200, 200, 100, 800, 4e4, 4e4, 200, 200])  # work per ns per op
_UNIT = 50.0  # ns per unit of (log-compressed) layout penalty and transpose cost
SPLITS: tuple[str, ...] = ("train", "valid", "test")
__all__ = ["MALNET_GENERATORS", "SYNTH_OPS", "layout_durations", "layout_runtime", "malnet_like_graph",
           "synth_layout_graph", "synth_malnet"]  # fmt: skip


def _perm(r: int, k: int) -> list[int]:
    """Minor-to-major order of layout class ``k`` for rank ``r``."""
    base = list(range(r - 1, -1, -1))
    if k == 1:
        return [r - 2, r - 1, *base[2:]]
    if k == 2:
        return [0, *base[:-1]]
    if k == 3:
        return [r - 1, 0, *base[1:-1]]
    return base


_PERM = np.full((5, 4, 6), -1, np.int64)  # rank 0 row = "no such operand" (all -1)
_CANON = np.zeros((5, 4), np.int64)
for _r in (2, 3, 4):
    for _k in range(4):
        _PERM[_r, _k, :_r] = _perm(_r, _k)
        _CANON[_r, _k] = next(j for j in range(4) if _perm(_r, j) == _perm(_r, _k))
_CANON[0] = _CANON[1] = np.arange(4)


def _jump(anchor: np.ndarray) -> np.ndarray:
    """Follow ``anchor`` pointers (each to a smaller id or itself) to their fixed points (pointer jumping)."""
    while True:
        nxt = anchor[anchor]
        if np.array_equal(nxt, anchor):
            return anchor
        anchor = nxt


def _dag(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Opcodes, operands (-1 = none), shapes and configurability of an XLA-like DAG in topological id order."""
    idx = np.arange(n)
    is_src = rng.random(n) < 0.10
    is_src[0] = True
    cand = idx - np.where(rng.random(n) < _CHAIN, 1, 2 + rng.geometric(0.2, n))
    is_src |= cand < 0
    # operand 0 is the latest compute node at or before the candidate, so chains run past parameters
    last_op = np.maximum.accumulate(np.where(is_src, -1, idx))
    op0 = np.where(is_src, -1, np.where(last_op[np.maximum(cand, 0)] >= 0, last_op[np.maximum(cand, 0)], cand))
    binary = ~is_src & (rng.random(n) < 0.30)
    opc = np.where(rng.random(n) < 0.85, PARAM, CONST)
    opc[binary] = rng.choice(_BINARY, size=int(binary.sum()), p=_BINARY_P)
    unary = ~is_src & ~binary
    opc[unary] = rng.choice(_UNARY, size=int(unary.sum()), p=_UNARY_P)
    last_src = np.maximum.accumulate(np.where(is_src, idx, -1))
    skip = np.maximum(idx - np.exp(rng.uniform(np.log(2), np.log(3000), n)).astype(np.int64), 0)
    weights = np.isin(opc, (DOT, CONV)) | (np.isin(opc, (ADD, MUL)) & (rng.random(n) < 0.3))
    op1 = np.where(weights, last_src, skip)
    op1[~binary | (op1 == op0)] = -1
    rank = rng.choice([2, 3, 4], size=n, p=[0.4, 0.35, 0.25])
    dims = np.zeros((n, 6), np.int64)
    for r in (2, 3, 4):
        sel = np.flatnonzero(rank == r)
        dims[sel, :r] = _PALETTE[rng.integers(0, _CAP[r], (sel.size, r))]
    rows = np.arange(n)
    for _ in range(3):  # shrink the largest dim until a tensor has at most _MAX_ELEMS elements
        over = np.ceil(np.where(dims > 0, dims, 1).prod(axis=1) / _MAX_ELEMS)
        over = 2 ** np.ceil(np.log2(over)).astype(np.int64)  # by powers of two, so aligned dims stay aligned
        j = (dims + rng.random(dims.shape)).argmax(axis=1)  # random tie-break keeps dim positions symmetric
        dims[rows, j] = np.maximum(dims[rows, j] // over, 1)
    fresh = ~np.isin(opc, _ELEMENTWISE)
    shape_of = _jump(np.where(fresh, idx, op0))
    kdim = np.where(opc == DOT, _PALETTE[rng.integers(4, 20, n)], 0)
    kdim = np.where(opc == REDUCE, _PALETTE[rng.integers(1, 9, n)], kdim)
    kdim = np.where(opc == CONV, _PALETTE[rng.integers(2, 11, n)], kdim)
    u = rng.random(n)
    conf = np.isin(opc, (DOT, CONV)) | (np.isin(opc, (RESHAPE, TRANSPOSE)) & (u < 0.3)) | ((opc == PARAM) & (u < 0.25))
    layout = rng.integers(0, 4, n)  # every tensor's native layout class (what the compiler would pick alone)
    return {"opcode": opc, "op0": op0, "op1": op1, "rank": rank[shape_of], "dims": dims[shape_of], "kdim": kdim,
            "configurable": conf, "layout": layout}  # fmt: skip


def _edges(op0: np.ndarray, op1: np.ndarray) -> np.ndarray:
    """TpuGraphs ``edge_index`` (m, 2): rows ``[consumer, producer]`` by consumer, operand 0 first."""
    cons = np.concatenate([np.flatnonzero(op0 >= 0), np.flatnonzero(op1 >= 0)])
    prod = np.concatenate([op0[op0 >= 0], op1[op1 >= 0]])
    slot = np.concatenate([np.zeros((op0 >= 0).sum(), np.int64), np.ones((op1 >= 0).sum(), np.int64)])
    order = np.argsort(cons * 2 + slot, kind="stable")
    return np.stack([cons[order], prod[order]], axis=1).astype(np.int64)


def _work(opc: np.ndarray, elems: np.ndarray, kdim: np.ndarray) -> np.ndarray:
    work = elems.copy()
    work[np.isin(opc, (PARAM, CONST))] = 0.0
    work = np.where(opc == DOT, 2.0 * elems * kdim, work)
    work = np.where(opc == CONV, 18.0 * elems * kdim, work)
    return np.where(opc == REDUCE, elems * kdim, work)


def _node_feat(
    g: Mapping[str, np.ndarray], n_ops: np.ndarray, n_users: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    n = g["opcode"].shape[0]
    x = np.zeros((n, NODE_FEAT_DIM), np.float32)
    elems = np.where(g["dims"] > 0, g["dims"], 1).prod(axis=1).astype(np.float64)
    x[:, 0] = np.isin(g["opcode"], (PARAM, CONST))
    x[:, 1] = g["rank"]
    x[:, 2:8] = g["dims"]
    x[:, 8] = np.log2(elems)
    x[:, 9] = g["kdim"]
    x[:, 10] = np.log2(_work(g["opcode"], elems, g["kdim"].astype(np.float64)) + 1.0)
    x[:, 11] = n_ops
    x[:, 12] = n_users
    x[:, 13:19] = _PERM[g["rank"], g["layout"]]
    x[:, 19] = 32.0
    d = np.where(g["dims"] > 0, g["dims"], 1).astype(np.float64)
    x[:, 20:26] = np.log2(d)
    x[:, 26:32] = np.where(g["dims"] > 0, np.log2(np.ceil(d / 128) * 128 / d), 0)  # padding waste as minor-most dim
    x[:, 32:38] = np.where(g["dims"] > 0, np.log2(np.ceil(d / 8) * 8 / d), 0)  # ... as second-minor dim
    x[:, 38:46] = rng.normal(0.0, 0.1, (n, 8))
    return x


def _classes(ids: np.ndarray, native: np.ndarray, configs: int, rng: np.random.Generator) -> np.ndarray:
    """(configs, nc) layout classes: config 0 = native classes, then random mutations or per-block classes."""
    nc = ids.shape[0]
    q = rng.random((configs, 1))
    cls = np.where(rng.random((configs, nc)) < q, rng.integers(0, 4, (configs, nc)), native[None, :])
    for j in np.flatnonzero(rng.random(configs) < 0.3):
        block = int(rng.integers(20, 500))
        region = rng.integers(0, 4, int(ids.max()) // block + 1)
        cls[j] = np.where(rng.random(nc) < 0.9, region[ids // block], cls[j])
    cls[0] = native
    return cls


def _config_feat(cls: np.ndarray, ids: np.ndarray, rank: np.ndarray, op0: np.ndarray, op1: np.ndarray) -> np.ndarray:
    def rank_of(op: np.ndarray) -> np.ndarray:
        return np.where(op[ids] >= 0, rank[np.maximum(op[ids], 0)], 0)

    parts = [_PERM[r[None, :], cls] for r in (rank[ids], rank_of(op0), rank_of(op1))]
    return np.concatenate(parts, axis=2).astype(np.float32)


def synth_layout_graph(num_nodes: int, configs: int, rng: np.random.Generator, splits: bool | None = None) -> dict:
    """One SYNTHETIC layout graph in memory: the published ``.npz`` keys, shapes and dtypes (see module docs).

    ``splits=None`` stores ``node_splits`` (shape (1, s)) for about half the graphs; True/False forces it.

    Args:
        num_nodes: Number of nodes, >= 2.
        configs: Number of configurations, >= 1.
        rng: Random generator.
        splits: Whether to store ``node_splits`` (None: for about half the graphs, drawn from ``rng``).

    Returns:
        dict: Layout arrays ``node_feat``, ``node_opcode``, ``edge_index``, ``node_config_ids``,
        ``node_config_feat``, ``config_runtime`` (ns) and maybe ``node_splits``.

    Shapes:
        node_feat: (num_nodes, 140) float32
        node_opcode: (num_nodes,) uint8
        edge_index: (num_edges, 2) int64, [consumer, producer]
        node_config_ids: (num_config_nodes,) int64
        node_config_feat: (configs, num_config_nodes, 18) float32
        config_runtime: (configs,) int64
        node_splits: (1, num_splits) int64

    Raises:
        InvalidOption: For fewer than 2 nodes or no configuration.
    """
    if num_nodes < 2 or configs < 1:
        raise InvalidOption(f"a synthetic layout graph needs >= 2 nodes and >= 1 config (got {num_nodes}, {configs})")
    g = _dag(num_nodes, rng)
    ei = _edges(g["op0"], g["op1"])
    n_ops = np.bincount(ei[:, 0], minlength=num_nodes)
    n_users = np.bincount(ei[:, 1], minlength=num_nodes)
    ids = np.flatnonzero(g["configurable"]).astype(np.int64)
    if ids.size == 0:
        ids = np.array([num_nodes - 1])
    cls = _classes(ids, g["layout"][ids], configs, rng)
    arrays = {
        "node_feat": _node_feat(g, n_ops, n_users, rng),
        "node_opcode": g["opcode"].astype(np.uint8),
        "edge_index": ei,
        "node_config_ids": ids,
        "node_config_feat": _config_feat(cls, ids, g["rank"], g["op0"], g["op1"]),
    }
    if splits or (splits is None and rng.random() < 0.5):
        k = max(1, num_nodes // int(rng.integers(300, 3000)))
        arrays["node_splits"] = np.unique(rng.integers(1, num_nodes, k)).astype(np.int64)[None, :]
    arrays["config_runtime"] = np.rint(layout_runtime(arrays)).astype(np.int64)
    return arrays


def _decode_classes(ncf: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Layout class of each (config, configurable node) from its output minor-to-major order."""
    f0, f1 = ncf[..., 0].astype(np.int64), ncf[..., 1].astype(np.int64)
    out = np.zeros(f0.shape, np.int64)
    for k in (3, 2, 1):  # lowest matching class wins (rank 2 aliases)
        out = np.where((f0 == _PERM[rank, k, 0]) & (f1 == _PERM[rank, k, 1]), k, out)
    return out


def _anchors(op0: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Whose layout each node follows: itself, or the configurable node / source within ``_HOPS`` operand-0 steps.

    -1 means none is that close: the node keeps its native layout.
    """
    fixed = own | (op0 < 0)
    a = np.arange(op0.shape[0])
    for _ in range(_HOPS):
        a = np.where(fixed[a], a, op0[a])
    return np.where(fixed[a], a, -1)


def layout_durations(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-(config, node) SYNTHETIC costs in ns, from a synthetic layout file's arrays alone (see module docs)."""
    x, opc = arrays["node_feat"], np.asarray(arrays["node_opcode"], np.int64)
    n = x.shape[0]
    cons, prod = np.asarray(arrays["edge_index"], np.int64).T
    ids = np.asarray(arrays["node_config_ids"], np.int64)
    rank = x[:, 1].astype(np.int64)
    dims = x[:, 2:8].astype(np.float64)
    elems = np.where(dims > 0, dims, 1).prod(axis=1)
    work = _work(opc, elems, x[:, 9].astype(np.float64))
    rows = np.arange(n)
    busy = work / _TPUT[opc]
    pen = np.empty((n, 4))  # layout penalty of every node under each class
    for k in range(4):
        dm, ds = (dims[rows, np.maximum(_PERM[rank, k, j], 0)] for j in (0, 1))
        waste = np.ceil(dm / 128) * 128 / dm * np.ceil(ds / 8) * 8 / ds
        pen[:, k] = _UNIT * _SENS[opc] * np.log2(waste) * np.log2(1.0 + busy)
    first = np.unique(cons, return_index=True)[1]
    op0 = np.full(n, -1, np.int64)
    op0[cons[first]] = prod[first]
    own = np.zeros(n, bool)
    own[ids] = True
    anchor = _anchors(op0, own)
    inherit = np.zeros(cons.shape[0], bool)
    inherit[first] = ~own[cons[first]]
    tcost = _UNIT * (1.0 + np.log2(elems[prod]))
    base = np.where(np.isin(opc, (PARAM, CONST)), 0.0, _OVERHEAD) + busy
    cls_all = _decode_classes(np.asarray(arrays["node_config_feat"]), rank[ids])
    out = np.empty((cls_all.shape[0], n))
    native = _decode_classes(x[:, 13:19], rank)
    full = native.copy()
    for c in range(cls_all.shape[0]):
        full[ids] = cls_all[c]
        lc = _CANON[rank, np.where(anchor >= 0, full[anchor], native)]
        mism = (lc[prod] != lc[cons]) & ~inherit
        out[c] = base + pen[rows, lc] + np.bincount(cons, weights=tcost * mism, minlength=n)
    return out


def layout_runtime(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """SYNTHETIC runtime (ns, float) of every configuration: critical path of :func:`layout_durations`.

    Args:
        arrays: Layout arrays (``edge_index``, ``node_feat``, ``node_opcode``, ``node_config_ids``,
            ``node_config_feat``), node ids in topological order.

    Returns:
        np.ndarray: Runtime in ns of every configuration.

    Shapes:
        output: (num_configs,) float64

    Raises:
        InvalidOption: If a producer's id is not below its consumer's.
    """
    cons, prod = np.asarray(arrays["edge_index"], np.int64).T
    if (prod >= cons).any():
        raise InvalidOption("synthetic runtimes need node ids in topological order (every producer < consumer)")
    dur = layout_durations(arrays)
    n = dur.shape[1]
    indptr, par, _ = build_csr(cons, prod, n)  # parents of every consumer
    return longest_paths_csr(np.arange(n, dtype=np.int64), indptr, par, dur)
