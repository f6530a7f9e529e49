"""Import an ONNX model file into a CompGraph, and export a PyTorch module to ONNX.

One node per ONNX ``NodeProto`` plus an ``input`` node per graph input and one ``output`` node; initializers
are not nodes, their elements count as ``params`` of their first consumer. An edge ``u -> v`` carries the
bytes of the tensors ``v`` reads from ``u`` (shape x dtype size). Shapes come from
:func:`~mlsysopt.graph.importers.onnx_shapes.resolve_shapes`: the inputs' dynamic dims (a batch axis) count as 1,
and the shapes that follow are inferred (onnx, then ONNX Runtime's symbolic inference) or, where inference gives
up, measured in one ONNX Runtime run; ``meta["shape_inference"]`` says which. A dynamic input dim sets
``meta["dynamic_shapes"] = True`` (``meta["dynamic_dims"]`` names them); a dynamic dim other than an input's first,
and any dim still unknown (counted as 1), give a :class:`~mlsysopt.errors.MlsysoptWarning` naming them.

FLOPs follow the torch.fx importer (a multiply-add is 2 FLOPs): Conv ``2*numel(Y)*prod(W.shape[1:])``
(+ numel(Y) bias; grouped and depthwise convolutions through W's ``Cin/groups``), ConvTranspose the same per
input element, Gemm/MatMul ``2*numel(Y)*K`` (+ numel(Y) for Gemm's C), elementwise 1 per output element,
normalisations (Batch/Layer/Group/InstanceNormalization) 5, softmax 3, pooling ``numel(Y) * kernel area``
(global pooling and reductions: numel of the input); RNN/GRU/LSTM, Einsum, Resize/Upsample and LpPool as in
:mod:`mlsysopt.graph.importers.flop_formulas`. With ``unroll_recurrent`` a GRU or RNN node is unrolled per
direction and time step into the ops PyTorch runs (:mod:`mlsysopt.graph.importers.expansion`: names
``NODE.l0.t3.add_r``, the last op keeps the node's name); by default it stays one node, as ONNX Runtime runs it.
An op without a formula counts 0 FLOPs, is listed in ``meta["unknown_ops"]`` and gives one
:class:`~mlsysopt.errors.MlsysoptWarning` per file. ``compute`` = ``flops``.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

import mlsysopt.graph.importers.expansion as ex
import mlsysopt.graph.importers.flop_formulas as ff
import mlsysopt.graph.importers.onnx_recurrent as rec
from mlsysopt.errors import ImportFailed, InvalidGraph, MlsysoptWarning, UnsupportedFormat
from mlsysopt.graph.importers.onnx_export import export_onnx  # noqa: F401  (its import path since it was here)
from mlsysopt.graph.importers.onnx_shapes import resolve_shapes, shape_warnings
from mlsysopt.graph.ir import CompGraph

NORM_FLOPS_PER_ELEM = ff.NORM_FLOPS_PER_ELEM
SOFTMAX_FLOPS_PER_ELEM = ff.SOFTMAX_FLOPS_PER_ELEM

_OPS: dict[str, str] = {
    "Conv": "conv",
    "ConvTranspose": "conv_transpose",
    "Gemm": "linear",
    "MatMul": "matmul",
    "Attention": "attention",
    "MultiHeadAttention": "attention",
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Relu": "relu",
    "LeakyRelu": "relu",
    "Gelu": "gelu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "HardSwish": "hardswish",
    "Softmax": "softmax",
    "LogSoftmax": "softmax",
    "BatchNormalization": "batch_norm",
    "LayerNormalization": "layer_norm",
    "SimplifiedLayerNormalization": "layer_norm",
    "RMSNormalization": "layer_norm",
    "GroupNormalization": "group_norm",
    "InstanceNormalization": "group_norm",
    "MaxPool": "max_pool",
    "GlobalMaxPool": "max_pool",
    "AveragePool": "avg_pool",
    "GlobalAveragePool": "adaptive_avg_pool",
    "Transpose": "transpose",
    "Concat": "concat",
    "Split": "split",
    "Slice": "slice",
    "GatherElements": "slice",
    "Dropout": "dropout",
    "Constant": "constant",
    "ConstantOfShape": "constant",
    "Identity": "other",
    "Shape": "other",
    "Size": "other",
    "Range": "constant",
    "EyeLike": "constant",
    "RNN": "rnn",
    "GRU": "gru",
    "LSTM": "lstm",
    "Einsum": "einsum",
    "Resize": "interpolate",
    "Upsample": "interpolate",
    "LpPool": "lp_pool",
    "GlobalLpPool": "lp_pool",
    "MaxUnpool": "unpool",
    "Pad": "pad",
    "LRN": "layer_norm",
    "MeanVarianceNormalization": "layer_norm",
    "SkipLayerNormalization": "layer_norm",
    "FusedMatMul": "matmul",
    "DepthToSpace": "reshape",
    "SpaceToDepth": "reshape",
    **dict.fromkeys(("GatherND", "ScatterND", "ScatterElements", "Compress", "NonZero", "OneHot"), "slice"),
    **dict.fromkeys(("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile"), "reshape"),
    **dict.fromkeys(("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"), "reduce"),
    **dict.fromkeys(("ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"), "reduce"),
    **dict.fromkeys(("ArgMax", "ArgMin", "CumSum"), "reduce"),
    **dict.fromkeys(("Erf", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Clip"), "elementwise"),
    **dict.fromkeys(("Where", "Max", "Min", "Cast", "Elu", "Selu", "Softplus", "Mish"), "elementwise"),
    **dict.fromkeys(("HardSigmoid", "PRelu", "Sin", "Cos", "Equal", "Less", "Greater", "Not"), "elementwise"),
    **dict.fromkeys(("LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Floor", "Ceil", "Round"), "elementwise"),
    **dict.fromkeys(("Sign", "Mod", "Sum", "Mean", "CastLike", "IsNaN", "IsInf", "Softsign"), "elementwise"),
    **dict.fromkeys(("ThresholdedRelu", "Celu", "Trilu", "QuantizeLinear", "DequantizeLinear"), "elementwise"),
    **dict.fromkeys(("BiasGelu", "FastGelu", "QuickGelu"), "gelu"),
    **dict.fromkeys(("ReduceLogSum",), "reduce"),
}
_ONE_PER_ELEM = ("add", "sub", "mul", "div", "elementwise", "relu", "gelu", "sigmoid", "tanh", "hardswish")
_PER_INPUT_ELEM = ("reduce", "adaptive_avg_pool")

Shape = tuple[int, ...]


def from_onnx(path: str | Path, unroll_recurrent: bool = False) -> CompGraph:
    """Read an ``.onnx`` file (shapes inferred with onnx.shape_inference) into a CompGraph.

    Args:
        path: The ``.onnx`` file.
        unroll_recurrent: Unroll GRU/RNN nodes per time step as PyTorch runs them. Off by default: ONNX Runtime
            runs each as one kernel, and the latency oracle reads one graph node per file node.

    Returns:
        The CompGraph.
    """
    path = Path(path)
    if not path.is_file():
        raise ImportFailed(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise UnsupportedFormat(f"{path}: not a valid ONNX model ({type(exc).__name__}: {exc})") from None
    # Protobuf decodes some junk (an empty file, for one) into an empty ModelProto: reject that too.
    if model.ir_version <= 0 or not model.graph.node:
        raise UnsupportedFormat(f"{path}: not a valid ONNX model (no IR version or no graph nodes)")

    shapes = resolve_shapes(model)
    for message in shape_warnings(shapes, str(path)):
        warnings.warn(message, MlsysoptWarning, stacklevel=2)
    graph = _build(shapes.model, path, shapes.measured, unroll_recurrent)
    graph.meta["dynamic_shapes"] = bool(shapes.dynamic_inputs) or bool(shapes.unresolved)
    graph.meta["dynamic_dims"] = {name: [n for _, n in dims] for name, dims in shapes.dynamic_inputs.items()}
    graph.meta["shape_inference"] = shapes.method
    if shapes.unresolved:
        graph.meta["unresolved_shapes"] = len(shapes.unresolved)
    return graph


def _build(model: onnx.ModelProto, path: Path, measured: dict[str, tuple[int, ...]] | None = None,
           unroll: bool = False) -> CompGraph:  # fmt: skip
    g = model.graph
    inits = {t.name: (tuple(int(d) for d in t.dims), t.data_type) for t in g.initializer}
    types: dict[str, Any] = {v.name: v.type for v in [*g.input, *g.output, *g.value_info]}
    measured = measured or {}
    dynamic = False

    def shape(name: str) -> Shape | None:
        """Static shape of a tensor (unknown dims as 1), or None when nothing is known about it."""
        nonlocal dynamic
        if name in inits:
            return inits[name][0]
        if name in measured:
            return measured[name]
        t = types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            dynamic = True
            return None
        dims = []
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dynamic = True
                dims.append(1)
        return tuple(dims)

    def nbytes(name: str) -> float:
        s = shape(name)
        if s is None:
            return 0.0
        if name not in inits and name not in types:  # measured, not typed: assume 32-bit
            return float(math.prod(s) * 4)
        elem = inits[name][1] if name in inits else types[name].tensor_type.elem_type
        return float(math.prod(s) * _itemsize(elem))

    names: list[str] = []
    ops: list[str] = []
    used: set[str] = set()
    producer: dict[str, int] = {}
    feats: dict[str, list[float]] = {k: [] for k in ("flops", "params", "bytes_out", "out_elems")}
    in_edges: list[dict[int, float]] = []

    def add_node(name: str, op: str, outputs: list[str], flops: float = 0.0, params: float = 0.0) -> int:
        base, k = name, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        i = len(names)
        names.append(name)
        ops.append(op)
        shapes = [shape(o) for o in outputs if o]
        feats["flops"].append(flops)
        feats["params"].append(params)
        feats["bytes_out"].append(sum(nbytes(o) for o in outputs if o))
        feats["out_elems"].append(float(sum(math.prod(s) for s in shapes if s is not None)))
        in_edges.append({})
        for o in outputs:
            producer[o] = i
        return i

    def connect(v: int, tensors: list[str]) -> None:
        seen: set[str] = set()
        for t in tensors:
            if t and t in producer and t not in seen:
                seen.add(t)
                u = producer[t]
                in_edges[v][u] = in_edges[v].get(u, 0.0) + nbytes(t)

    for inp in g.input:
        if inp.name not in inits:
            add_node(inp.name, "input", [inp.name])
    counted: set[str] = set()
    reads: list[tuple[int, list[str]]] = []
    for k, node in enumerate(g.node):
        op = _canonical(node, inits)
        params = 0
        for t in node.input:
            if t in inits and t not in counted:
                counted.add(t)
                params += math.prod(inits[t][0])
        label = node.name or f"{node.op_type}_{k}"
        x0 = shape(node.input[0]) if unroll and op in ex.UNROLLED and node.input and node.input[0] else None
        expansion = rec.expand(op, node, shape, rec.itemsize(nbytes(node.input[0]), x0), label) if x0 else None
        if expansion is None:
            v = add_node(label, op, list(node.output), _flops(op, node, shape), float(params))
            reads.append((v, list(node.input)))
            continue
        # A GRU/RNN node unrolled per step (expansion.py); its last op makes the node's outputs and keeps its name.
        base, last = len(names), len(expansion.nodes) - 1
        spare = float(params) - sum(sub.params for sub in expansion.nodes) if params else 0.0
        for i, sub in enumerate(expansion.nodes):
            own = (sub.params if params else 0.0) + (spare if i == last else 0.0)
            v = add_node(label if i == last else f"{label}.{sub.name}", sub.op,
                         list(node.output) if i == last else [], sub.flops, own)  # fmt: skip
            if i < last:
                feats["bytes_out"][v], feats["out_elems"][v] = sub.bytes_out, sub.out_elems
            for j, b in sub.parents:
                in_edges[v][base + j] = in_edges[v].get(base + j, 0.0) + b
            reads.append((v, [node.input[a] for a, _ in sub.reads if len(node.input) > a]))
        reads.append((base, list(node.input[4:5])))  # sequence_lens, when a node makes it
    outs = [o.name for o in g.output]
    v = add_node("output", "output", [])
    feats["bytes_out"][v] = sum(nbytes(o) for o in outs)
    feats["out_elems"][v] = float(sum(math.prod(s) for o in outs if (s := shape(o)) is not None))
    reads.append((v, outs))
    # Connect once every producer is known, so a file whose nodes are out of order still gets all edges.
    for v, tensors in reads:
        connect(v, tensors)

    edges = [(u, v) for v, parents in enumerate(in_edges) for u in parents]
    edge_bytes = [b for parents in in_edges for b in parents.values()]
    features: dict[str, Any] = dict(feats)
    features["bytes_in"] = [sum(p.values()) for p in in_edges]
    features["compute"] = feats["flops"]
    meta: dict[str, Any] = {"name": path.stem, "source": "onnx", "path": str(path), "dynamic_shapes": dynamic}
    ff.record_unknown_ops(meta, [op for op in ops if op.startswith("onnx:")], str(path))
    try:
        return CompGraph.build(names, ops, features, edges, edge_bytes, meta=meta)
    except InvalidGraph as exc:  # a cycle, ...: say which file
        raise InvalidGraph(f"{path}: {exc}") from None


def _itemsize(elem_type: int) -> int:
    try:
        return int(helper.tensor_dtype_to_np_dtype(elem_type).itemsize) or 4
    except Exception:
        return 4  # undefined or exotic element type: assume 32-bit


def _canonical(node: onnx.NodeProto, inits: dict[str, Any]) -> str:
    """Canonical op name; a MatMul by a 2-D initializer is a linear layer, a Gather from one an embedding."""
    t = node.op_type
    if t == "MatMul" and len(node.input) > 1 and len(inits.get(node.input[1], ((),))[0]) == 2:
        return "linear"
    if t == "Gather":
        return "embedding" if node.input and node.input[0] in inits else "slice"
    if node.domain not in ("", "ai.onnx", "com.microsoft") and t not in _OPS:
        return f"onnx:{node.domain}.{t}"
    return _OPS.get(t, f"onnx:{t}")


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _flops(op: str, node: onnx.NodeProto, shape: Any) -> float:
    """FLOPs of one ONNX node (see the module docstring)."""
    ins = [i for i in node.input]
    y = shape(node.output[0]) if node.output and node.output[0] else None
    x = shape(ins[0]) if ins and ins[0] else None
    out = math.prod(y) if y is not None else 0
    if y is None and x is not None and op in (*_ONE_PER_ELEM, "batch_norm", "layer_norm", "group_norm", "softmax"):
        out = math.prod(x)  # shape inference knows no output shape: these ops keep their input's
    has = lambda i: len(ins) > i and bool(ins[i])  # noqa: E731 - optional ONNX inputs are empty names
    if op in _ONE_PER_ELEM:
        return out
    if op in ("batch_norm", "layer_norm", "group_norm"):
        return NORM_FLOPS_PER_ELEM * out
    if op == "softmax":
        return SOFTMAX_FLOPS_PER_ELEM * out
    if op in _PER_INPUT_ELEM or node.op_type == "GlobalMaxPool":
        return math.prod(x) if x is not None else out
    if op in ("max_pool", "avg_pool"):
        return out * math.prod(_attr(node, "kernel_shape", [1]))
    if op in ("conv", "conv_transpose"):
        w = shape(ins[1]) if has(1) else None
        per = math.prod(w[1:]) if w else 0
        macs = (out if op == "conv" else (math.prod(x) if x else 0)) * per
        return 2 * macs + (out if has(2) else 0)
    if node.op_type == "Gemm":
        a = shape(ins[0]) if has(0) else None
        k = (a[0] if _attr(node, "transA", 0) else a[-1]) if a else 0
        return 2 * out * k + (out if has(2) else 0)
    if node.op_type == "MatMul":
        return 2 * out * (x[-1] if x else 0)
    if op == "attention" and has(2):
        q, k, v = shape(ins[0]), shape(ins[1]), shape(ins[2])
        if q and k and v and len(q) == len(k) == 4:  # (B, H, L, E) layout
            scores = q[0] * q[1] * q[2] * k[2]
            return 2 * scores * q[3] + 2 * scores * v[-1] + SOFTMAX_FLOPS_PER_ELEM * scores
    if op in ("rnn", "gru", "lstm"):
        return rec.flops(op, node, shape)
    if op == "einsum":
        shapes = [shape(i) for i in ins]
        eq = _attr(node, "equation", b"")
        eq = eq.decode() if isinstance(eq, bytes) else str(eq)
        return float(ff.einsum_flops(eq, shapes) or 0) if all(s is not None for s in shapes) else 0.0
    if op == "interpolate":
        mode = _attr(node, "mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        dims = sum(1 for a, b in zip(x, y, strict=False) if a != b) if x and y and len(x) == len(y) else 0
        return float(ff.interpolate_flops(mode, out, dims or (len(x) - 2 if x else 2), math.prod(x) if x else 0))
    if op == "lp_pool":
        if node.op_type == "GlobalLpPool":
            return 2.0 * (math.prod(x) if x else 0)
        return float(ff.lp_pool_flops(out, math.prod(_attr(node, "kernel_shape", [1]))))
    return 0.0
