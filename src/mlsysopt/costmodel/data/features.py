"""A real computation graph (:class:`~mlsysopt.graph.ir.CompGraph`) as TpuGraphs layout arrays: 140 node features.

TpuGraphs' 140 node features describe XLA ops (shapes, layouts, window sizes, ...). A graph imported from PyTorch
(torch.fx), ONNX or a saved CompGraph gets the same width with these columns (the rest are 0), so every loader,
model and baseline of :mod:`mlsysopt.costmodel` reads it unchanged. The columns the trees baseline reads keep
their synthetic meaning (1: rank, 10: log2 work).

====  ==============================  ====  ==============================
col   feature                         col   feature
====  ==============================  ====  ==============================
0     constant / parameter node       16    kernel height
1     output rank                     17    kernel width
2-7   output dims (0-padded)          18    stride
8     log2 output elements            19    padding
9     reduction size (K of a conv      20    groups
      / linear: cin/groups*kh*kw)     21    dilation
10    log2(FLOPs + 1)                 22    input channels
11    operands (in-degree)            23    output channels
12    users (out-degree)              24    depthwise (groups == cin > 1)
13    log2(bytes read + 1)            25    log2 batch (dim 0 of the output)
14    log2(bytes written + 1)         26-31 operand-0 dims (0-padded)
15    log2(parameters + 1)            32    position in topological order (0..1)
====  ==============================  ====  ==============================

Columns 16-24 and the dims come from ``attrs`` (per node: ``shape``, ``in_shape``, ``kernel``, ``stride``, ...);
an importer that has no shapes (a bare CompGraph) leaves them 0. Opcodes are the canonical op ids of
:data:`mlsysopt.graph.vocab.DEFAULT_VOCAB`; an op outside it gets a stable id from its name's CRC-32 in
``len(DEFAULT_VOCAB)..OPCODE_VOCAB - 1``, so one op has one id in every graph.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidDataFile
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.vocab import DEFAULT_VOCAB

NODE_FEAT_DIM = 140
#: Opcode ids stay below this (the cost model's default opcode vocabulary).
OPCODE_VOCAB = 128
MAX_DIMS = 6
#: Names of the columns this module fills (see the module docstring), by column.
COLUMNS: dict[int, str] = {0: "constant", 1: "rank", **{2 + i: f"out_dim{i}" for i in range(MAX_DIMS)},
                           8: "log2_out_elems", 9: "reduction", 10: "log2_flops", 11: "in_degree",
                           12: "out_degree", 13: "log2_bytes_in", 14: "log2_bytes_out", 15: "log2_params",
                           16: "kernel_h", 17: "kernel_w", 18: "stride", 19: "padding", 20: "groups",
                           21: "dilation", 22: "in_channels", 23: "out_channels", 24: "depthwise",
                           25: "log2_batch", **{26 + i: f"in0_dim{i}" for i in range(MAX_DIMS)},
                           32: "topo_position"}  # fmt: skip


def torch_graph(module: Any, inputs: tuple[Any, ...], name: str) -> tuple[CompGraph, list[dict[str, Any]], Any]:
    """A PyTorch model as ``(CompGraph, per-node attrs, traced torch.fx GraphModule with shapes)``.

    The CompGraph comes from :func:`mlsysopt.graph.importers.torch_fx.from_module` (FLOPs, bytes, parameters);
    the attrs (output and operand-0 shapes, convolution windows, channels) from a shape-propagated trace whose
    nodes are the CompGraph's, one for one.
    """
    from torch import fx, nn  # deferred: torch loads only when a PyTorch model is traced

    # deferred: imports torch
    from mlsysopt.graph.importers.torch_fx import from_traced, trace_module

    gm = trace_module(module, inputs, name)  # traced once: the CompGraph's nodes are the trace's, one for one
    graph = from_traced(gm, name)
    nodes = list(gm.graph.nodes)

    def shape(node: Any) -> tuple[int, ...] | None:
        meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
        return tuple(int(d) for d in meta.shape) if meta is not None and hasattr(meta, "shape") else None

    attrs: list[dict[str, Any]] = []
    for node in nodes:
        a: dict[str, Any] = {"shape": shape(node), "in_shape": shape(node.args[0]) if node.args else None}
        mod = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
        if isinstance(mod, nn.Conv2d):
            pad = mod.padding if isinstance(mod.padding, tuple) else (0,)
            a |= {"kernel": mod.kernel_size, "stride": mod.stride, "dilation": mod.dilation, "padding": pad,
                  "groups": mod.groups, "in_channels": mod.in_channels, "out_channels": mod.out_channels}  # fmt: skip
        elif isinstance(mod, nn.Linear):
            a |= {"in_channels": mod.in_features, "out_channels": mod.out_features}
        attrs.append(a)
    return graph, attrs, gm


def opcode_id(op: str) -> int:
    """The op's id: its index in the canonical vocabulary, else a stable hash into the rest of the id range."""
    if op in DEFAULT_VOCAB:
        return DEFAULT_VOCAB.index(op)
    spare = OPCODE_VOCAB - len(DEFAULT_VOCAB)
    return len(DEFAULT_VOCAB) + zlib.crc32(op.encode()) % spare


def _dims(shape: Sequence[int] | None) -> np.ndarray:
    out = np.zeros(MAX_DIMS, np.float32)
    if shape:
        d = [int(v) for v in shape][:MAX_DIMS]
        out[: len(d)] = d
    return out


def layout_graph(graph: CompGraph, attrs: Sequence[Mapping[str, Any]] | None = None,
                 configurable: Sequence[int] | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """``node_feat`` (n, 140) float32, ``node_opcode`` (n,), ``edge_index`` (m, 2) [consumer, producer] and, with
    ``configurable`` (node ids of ``graph``), ``node_config_ids``.

    Nodes are renumbered into a topological order (the graph's own order when it is one, as torch.fx and ONNX
    graphs are). ``attrs[i]`` (optional) describes node ``i``: ``shape``, ``in_shape``, ``kernel``, ``stride``,
    ``padding``, ``groups``, ``dilation``, ``in_channels``, ``out_channels``.

    Args:
        graph: The computation graph.
        attrs: Per-node descriptions (``shape``, ``in_shape``, ``kernel``, ``stride``, ``padding``, ``groups``,
            ``dilation``, ``in_channels``, ``out_channels``); None: none.
        configurable: Node ids of ``graph`` that take a layout configuration (None: no ``node_config_ids``).

    Returns:
        dict[str, np.ndarray]: TpuGraphs layout arrays ``node_feat``, ``node_opcode``, ``edge_index`` and, with
        ``configurable``, ``node_config_ids`` (in the new node order).

    Shapes:
        node_feat: (num_nodes, 140) float32
        node_opcode: (num_nodes,) uint8
        edge_index: (num_edges, 2) int64, [consumer, producer]
        node_config_ids: (num_config_nodes,) int64

    Raises:
        InvalidDataFile: If ``attrs`` does not have one entry per node.
    """
    n = graph.num_nodes
    name = graph.meta.get("name", "graph")
    if attrs is not None and len(attrs) != n:
        raise InvalidDataFile(f"{name}: {len(attrs)} node descriptions for {n} nodes")
    src0, dst0 = graph.edge_index
    order = np.arange(n)
    if src0.size and (src0 >= dst0).any():
        order = np.asarray(graph.topo_order, np.int64)
    new = np.empty(n, np.int64)
    new[order] = np.arange(n)
    src, dst = new[src0], new[dst0]
    feat = {k: graph.feature(k)[order] for k in ("out_elems", "flops", "bytes_in", "bytes_out", "params")}
    all_ops = graph.ops
    ops = [all_ops[i] for i in order]
    x = np.zeros((n, NODE_FEAT_DIM), np.float32)
    x[:, 0] = [op == "constant" for op in ops]
    x[:, 8] = np.log2(feat["out_elems"] + 1.0)
    x[:, 10] = np.log2(feat["flops"] + 1.0)
    x[:, 11] = np.bincount(dst, minlength=n)
    x[:, 12] = np.bincount(src, minlength=n)
    x[:, 13] = np.log2(feat["bytes_in"] + 1.0)
    x[:, 14] = np.log2(feat["bytes_out"] + 1.0)
    x[:, 15] = np.log2(feat["params"] + 1.0)
    x[:, 32] = np.arange(n) / max(1, n - 1)
    for i, a in enumerate([attrs[j] for j in order] if attrs is not None else ()):
        _node_attrs(x[i], a)
    edges = np.stack([dst, src], axis=1).astype(np.int64) if src.size else np.zeros((0, 2), np.int64)
    out = {"node_feat": x, "node_opcode": np.array([opcode_id(op) for op in ops], np.uint8), "edge_index": edges}
    if configurable is not None:
        ids = np.asarray(configurable, np.int64)
        if ids.size == 0 or ids.min() < 0 or ids.max() >= n:
            raise InvalidDataFile(f"{name}: configurable node ids must be 0..{n - 1} and at least one")
        out["node_config_ids"] = new[ids]
    return out


def _node_attrs(row: np.ndarray, a: Mapping[str, Any]) -> None:
    """Fill the shape and window columns of one node's feature ``row`` from its description ``a``."""
    shape = a.get("shape")
    if shape:
        row[1] = len(shape)
        row[2:8] = _dims(shape)
        row[25] = np.log2(max(1, int(shape[0])))
    row[26:32] = _dims(a.get("in_shape"))
    kernel = tuple(a.get("kernel") or (0, 0))
    row[16:18] = (kernel[0], kernel[-1])
    for col, key in ((18, "stride"), (19, "padding"), (21, "dilation")):
        v = a.get(key) or 0
        row[col] = v[0] if isinstance(v, (tuple, list)) else v
    groups, cin = int(a.get("groups") or 0), int(a.get("in_channels") or 0)
    row[20], row[22], row[23] = groups, cin, int(a.get("out_channels") or 0)
    row[24] = float(groups > 1 and groups == cin)
    if cin:
        row[9] = cin // max(1, groups) * kernel[0] * kernel[-1] if kernel[0] else cin
