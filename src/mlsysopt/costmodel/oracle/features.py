"""Features of a (model, setting) pair: per-op-category sums of the node table, and the setting.

Ops are grouped into :data:`CATEGORIES` (convolutions split into depthwise, 1x1 and k x k, as their arithmetic
intensity differs by an order of magnitude); an op outside every category counts as ``unknown`` and makes a model
out of distribution. Under PyTorch eager, an op inside a module PyTorch runs as a few kernels (the node table's
``fused`` column, :mod:`mlsysopt.graph.importers.fused_modules`) counts as ``fused`` whatever it is: most such ops
are the export's shape arithmetic, which PyTorch never runs. Per category the features are the node count, FLOPs x
batch, activation bytes (in + out) x batch and weight bytes (parameters x 4, read once per inference whatever the
batch; none for the ops of :data:`NO_WEIGHT_READ`).
"""

from __future__ import annotations

import numpy as np

from mlsysopt.costmodel.oracle.dataset import COLUMNS
from mlsysopt.costmodel.oracle.settings import Setting

_GROUPS: dict[str, tuple[str, ...]] = {
    "linear": ("linear", "embedding"),
    "matmul": ("matmul", "einsum", "attention"),
    "gru": ("gru",),
    "lstm": ("lstm", "rnn"),
    "norm": ("batch_norm", "layer_norm", "group_norm"),
    "softmax": ("softmax",),
    "pool": ("max_pool", "avg_pool", "adaptive_avg_pool", "lp_pool", "reduce"),
    "activation": ("relu", "gelu", "sigmoid", "tanh", "hardswish", "elementwise"),
    "arith": ("add", "sub", "mul", "div"),
    "memory": ("reshape", "transpose", "concat", "slice", "split", "pad", "interpolate", "unpool"),
    "free": ("input", "output", "constant", "other", "dropout"),
}
#: Feature categories, in column order.
CATEGORIES: tuple[str, ...] = ("conv_dw", "conv_1x1", "conv_kxk", "conv_transpose", *_GROUPS, "fused", "unknown")
#: The engine that runs the ``fused`` category's modules as a few kernels (ONNX Runtime runs the exported ops).
FUSING_ENGINE = "torch"
#: Categories whose ops do not read a parameter as weights: a slice, reshape or transpose of one is a view in PyTorch
#: and folded into a constant when ONNX Runtime loads the model. Few training models hold such an op on a parameter,
#: so a weight coefficient there was fitted on almost nothing: the additive model learned 24 ms per MB for PyTorch
#: with 1 thread and charged the zoo transformer's position-embedding slice 0.8 ms (measured: the model takes 0.4).
NO_WEIGHT_READ = ("memory", "free")
_NO_WEIGHT_READ_INDEX = [CATEGORIES.index(c) for c in NO_WEIGHT_READ]
_OF_OP = {op: cat for cat, ops in _GROUPS.items() for op in ops} | {"conv_transpose": "conv_transpose"}
#: Every op name a category covers.
OP_NAMES: tuple[str, ...] = tuple(sorted({*_OF_OP, "conv"}))
PER_CATEGORY = ("count", "gflops", "act_mb", "weight_mb")
SETTING_FEATURES = ("log2_batch", "threads", "parallel", "torch")
GLOBAL = ("log_gflops", "log_act_mb", "log_weight_mb", "nodes", "misaligned_gflops_share")
#: Every column of :func:`features`, in order.
FEATURE_NAMES: tuple[str, ...] = (*(f"{c}_{k}" for c in CATEGORIES for k in PER_CATEGORY), *GLOBAL, *SETTING_FEATURES)


def categories(ops: np.ndarray, nodes: np.ndarray, engine: str = "onnxruntime") -> np.ndarray:
    """The category index of every node (``unknown`` for ops no category names; ``fused`` for a node the
    :data:`FUSING_ENGINE` runs inside a module of a few kernels, when ``engine`` is that engine).

    Shapes:
        ops: (n,) str; nodes: (n, len(COLUMNS)); returns (n,) int
    """
    groups = nodes[:, COLUMNS.index("groups")]
    area = nodes[:, COLUMNS.index("kernel_area")]
    out = np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        if op == "conv":
            cat = "conv_dw" if groups[i] > 1 else ("conv_1x1" if area[i] <= 1 else "conv_kxk")
        else:
            cat = _OF_OP.get(str(op), "unknown")
        out[i] = CATEGORIES.index(cat)
    if engine == FUSING_ENGINE:
        out[nodes[:, COLUMNS.index("fused")] > 0] = CATEGORIES.index("fused")
    return out


def weight_mb(cat: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Every node's weight MB (parameters x 4 bytes; 0 in the categories of :data:`NO_WEIGHT_READ`).

    Shapes:
        cat: (n,) int (:func:`categories`); nodes: (n, len(COLUMNS)); returns (n,) float
    """
    read = ~np.isin(cat, _NO_WEIGHT_READ_INDEX)
    return nodes[:, COLUMNS.index("params")] * 4 / 1e6 * read


def per_category(ops: np.ndarray, nodes: np.ndarray, batch: int, engine: str = "onnxruntime") -> np.ndarray:
    """Per-category sums at ``batch`` under ``engine``: ``(len(CATEGORIES), 4)`` = count, GFLOPs, activation MB,
    weight MB."""
    cat = categories(ops, nodes, engine)
    flops = nodes[:, COLUMNS.index("flops")] * batch / 1e9
    act = (nodes[:, COLUMNS.index("bytes_in")] + nodes[:, COLUMNS.index("bytes_out")]) * batch / 1e6
    weight = weight_mb(cat, nodes)
    out = np.zeros((len(CATEGORIES), 4))
    for j, v in enumerate((np.ones(len(ops)), flops, act, weight)):
        np.add.at(out[:, j], cat, v)
    return out


def setting_vector(s: Setting) -> np.ndarray:
    """The setting's features: log2 batch, threads, parallel executor, PyTorch engine."""
    return np.array([np.log2(s.batch), s.threads, float(s.mode == "par"), float(s.engine == "torch")])


def features(ops: np.ndarray, nodes: np.ndarray, s: Setting) -> np.ndarray:
    """One row of :data:`FEATURE_NAMES` for a model's node table under setting ``s``."""
    cat = per_category(ops, nodes, s.batch, s.engine)
    tot = cat.sum(axis=0)
    cin, cout = nodes[:, COLUMNS.index("in_channels")], nodes[:, COLUMNS.index("out_channels")]
    flops = nodes[:, COLUMNS.index("flops")]
    mis = float(flops[(cin % ALIGN != 0) | (cout % ALIGN != 0)].sum() / max(flops.sum(), 1.0))
    glob = [np.log(tot[1] + 1e-9), np.log(tot[2] + 1e-9), np.log(tot[3] + 1e-9), tot[0], mis]
    return np.concatenate([cat.ravel(), glob, setting_vector(s)])


def unknown_ops(ops: np.ndarray) -> list[str]:
    """Op names no category covers (a model with them is outside what the oracle learned)."""
    return sorted({str(o) for o in ops if str(o) not in _OF_OP and o != "conv"})


#: Per-op size bins of the additive basis: FLOPs (at the batch) and activation bytes edges.
FLOP_BINS = (1e5, 1e7)
BYTE_BINS = (2e4, 1e6)
#: Channel counts that are multiples of this run on the CPU's vector kernels without a remainder.
ALIGN = 16
BASIS_PER_CATEGORY = (
    "count", "weight_mb", *(f"gflops_bin{b}_{a}" for b in range(3) for a in ("misaligned", "aligned")),
    *(f"act_mb_bin{b}" for b in range(3)),
)  # fmt: skip


def additive_basis_nodes(ops: np.ndarray, nodes: np.ndarray, batch: int, engine: str = "onnxruntime") -> np.ndarray:
    """Every node's row of the additive basis (see :func:`additive_basis`): its own count, weight MB and size-binned
    GFLOPs and activation MB in its category's columns.

    Shapes:
        returns (n, len(CATEGORIES) * len(BASIS_PER_CATEGORY))
    """
    n = len(ops)
    cat = categories(ops, nodes, engine)
    flops = nodes[:, COLUMNS.index("flops")] * batch
    act = (nodes[:, COLUMNS.index("bytes_in")] + nodes[:, COLUMNS.index("bytes_out")]) * batch
    k = len(BASIS_PER_CATEGORY)
    out = np.zeros((n, len(CATEGORIES) * k))
    rows = np.arange(n)
    out[rows, cat * k] = 1.0
    out[rows, cat * k + 1] = weight_mb(cat, nodes)
    cin, cout = nodes[:, COLUMNS.index("in_channels")], nodes[:, COLUMNS.index("out_channels")]
    aligned = ((cin % ALIGN == 0) & (cout % ALIGN == 0)).astype(np.int64)
    out[rows, cat * k + 2 + 2 * np.searchsorted(FLOP_BINS, flops) + aligned] = flops / 1e9
    out[rows, cat * k + 8 + np.searchsorted(BYTE_BINS, act)] = act / 1e6
    return out


def additive_basis(ops: np.ndarray, nodes: np.ndarray, batch: int, engine: str = "onnxruntime") -> np.ndarray:
    """The additive model's basis: per category, the node count, weight MB, and GFLOPs and activation MB each split
    into three bins by the op's own size (small ops run far below a core's peak, so each size class gets its own
    coefficient: a piecewise-linear per-op time); GFLOPs also by whether the op's input and output channels are
    multiples of :data:`ALIGN` (a convolution of 24 channels runs ~1.4x slower per FLOP than one of 16 or 32 here).
    The sum of :func:`additive_basis_nodes` over nodes.

    Shapes:
        returns (len(CATEGORIES) * len(BASIS_PER_CATEGORY),)
    """
    return additive_basis_nodes(ops, nodes, batch, engine).sum(axis=0)
