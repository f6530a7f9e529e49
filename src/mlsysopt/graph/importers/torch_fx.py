"""Import a PyTorch ``nn.Module`` into a CompGraph with torch.fx symbolic tracing and shape propagation.

One node per fx node (same names), except that a GRU/RNN leaf is unrolled per layer, direction and time step and a
``TransformerEncoder``/``TransformerEncoderLayer`` leaf becomes its fast-path ops, as PyTorch runs them
(:mod:`~mlsysopt.graph.importers.expansion`; ``expand_layers=False`` keeps them one node, op ``transformer`` for the
encoder with the FLOPs of its ops, and names them with their op counts in ``meta["kept_whole"]``). What a device model
by op group (:mod:`mlsysopt.graph.op_profile`) needs besides the features is in ``meta``: ``expanded`` (per expanded
layer its kind, node range ``[start, stop)`` and the first node of each of its layers), ``depthwise`` (the node ids
of convolutions with ``groups == in_channels > 1``) and ``lstm_layers`` (``[node id, layers x directions]`` of each
``nn.LSTM``, one fused op per layer and direction). Per-node features:

* ``flops``: a multiply-add counts 2 FLOPs. Linear ``2*in*out*batch`` (+ ``out*batch`` bias);
  Conv ``2*N*Cout*Hout*Wout*(Cin/groups)*kh*kw`` (+ output numel bias); matmul ``2*M*N*K*batch``;
  scaled_dot_product_attention ``2*B*H*L*S*(E+Ev)`` (``4*B*H*L*S*E`` when ``Ev == E``) + softmax;
  elementwise ops (add, activations, casts) 1 per output element; normalisations ~5 per element
  (mean, variance, normalise, scale, shift); pooling ``out numel * kernel area`` (adaptive: input numel);
  softmax ~3 per element (exp, sum, divide); reductions input numel; RNN/GRU/LSTM (any layers, directions,
  ``batch_first``, ``proj_size``), einsum, interpolate/Upsample, LP pooling and EmbeddingBag as in
  :mod:`mlsysopt.graph.importers.flop_formulas`; views, copies, padding, embedding lookups and unpooling 0.
  Grouped and depthwise convolutions count through the weight's ``Cin/groups``.
* an op without a formula (``call_module:Bilinear``, ``call_method:sort``, ...) that produces a tensor counts
  0 FLOPs, is listed in ``meta["unknown_ops"]`` (op -> count) and gives one
  :class:`~mlsysopt.errors.MlsysoptWarning` per import.
* ``bytes_in``: sum of the bytes on the node's incoming edges; ``bytes_out``/``out_elems``: bytes/elements
  of the tensors it produces (0 for non-tensor values such as shapes).
* ``params``: elements of the parameters a ``call_module`` node owns, or of the tensor a ``get_attr`` node
  fetches; a tensor shared by several nodes counts once, at its first user.
* ``compute`` = ``flops``: the simulator divides compute by device speed, so device speeds are FLOP/s.

Edge ``u -> v`` carries ``u``'s output bytes (the selected element's bytes when ``v`` indexes a tuple).
"""

from __future__ import annotations

import operator
import os
import traceback
from typing import Any

import torch
from torch import fx, nn
from torch.fx.node import map_aggregate
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata, _extract_tensor_metadata

from mlsysopt.errors import ImportFailed
from mlsysopt.graph.importers.flop_formulas import record_unknown_ops
from mlsysopt.graph.importers.fx_flops import _flops, _nbytes, _numel, _shape, expand, kept_whole_layer
from mlsysopt.graph.importers.fx_rows import Rows, splice
from mlsysopt.graph.ir import CompGraph


def _table(spec: dict[str, str]) -> dict[str, str]:
    """Invert ``{op: "name name ..."}`` into ``{name: op}``."""
    return {name: op for op, names in spec.items() for name in names.split()}


# Module class name -> canonical op; the MRO is searched, so subclasses of e.g. nn.Conv2d map too.
_MODULE_OPS = _table(
    {
        "linear": "Linear",
        "conv": "_ConvNd",
        "conv_transpose": "_ConvTransposeNd",
        "attention": "MultiheadAttention",
        "transformer": "TransformerEncoder TransformerEncoderLayer",
        "embedding": "Embedding",
        "embedding_bag": "EmbeddingBag",
        "rnn": "RNN RNNCell",
        "lstm": "LSTM LSTMCell",
        "gru": "GRU GRUCell",
        "batch_norm": "_BatchNorm",
        "layer_norm": "LayerNorm RMSNorm LocalResponseNorm",
        "group_norm": "GroupNorm _InstanceNorm",
        "max_pool": "_MaxPoolNd _AdaptiveMaxPoolNd FractionalMaxPool2d FractionalMaxPool3d",
        "avg_pool": "_AvgPoolNd",
        "adaptive_avg_pool": "_AdaptiveAvgPoolNd",
        "lp_pool": "_LPPoolNd",
        "unpool": "_MaxUnpoolNd",
        "interpolate": "Upsample",
        "relu": "ReLU ReLU6 LeakyReLU",
        "gelu": "GELU",
        "silu": "SiLU",
        "sigmoid": "Sigmoid",
        "tanh": "Tanh",
        "hardswish": "Hardswish",
        "softmax": "Softmax LogSoftmax Softmin Softmax2d",
        "dropout": "_DropoutNd",
        "reshape": "Flatten Unflatten",
        "pad": "_ConstantPadNd _ReflectionPadNd _ReplicationPadNd ZeroPad2d CircularPad1d CircularPad2d CircularPad3d",
        "other": "Identity",
        "elementwise": "ELU SELU CELU Mish Softplus PReLU Hardsigmoid Hardtanh LogSigmoid Softsign Tanhshrink "
        "Threshold GLU Hardshrink Softshrink",
    }
)

# Function ``__name__`` or method name -> canonical op (call_function and call_method share it).
_CALL_OPS = _table(
    {
        "linear": "linear",
        "conv": "conv1d conv2d conv3d",
        "conv_transpose": "conv_transpose1d conv_transpose2d conv_transpose3d",
        "matmul": "matmul mm bmm addmm baddbmm __matmul__",
        "attention": "scaled_dot_product_attention",
        "embedding": "embedding",
        "embedding_bag": "embedding_bag",
        "einsum": "einsum",
        "interpolate": "interpolate upsample upsample_nearest upsample_bilinear",
        "lp_pool": "lp_pool1d lp_pool2d lp_pool3d",
        "unpool": "max_unpool1d max_unpool2d max_unpool3d",
        "pad": "pad",
        "add": "add iadd add_ __add__ __radd__",
        "sub": "sub isub sub_ rsub __sub__",
        "mul": "mul imul mul_ __mul__ __rmul__",
        "div": "div truediv itruediv floordiv div_ __truediv__",
        "relu": "relu relu_ relu6 leaky_relu",
        "gelu": "gelu",
        "silu": "silu",
        "sigmoid": "sigmoid",
        "tanh": "tanh",
        "hardswish": "hardswish",
        "softmax": "softmax log_softmax",
        "batch_norm": "batch_norm",
        "layer_norm": "layer_norm rms_norm",
        "group_norm": "group_norm instance_norm",
        "max_pool": "max_pool1d max_pool2d max_pool3d adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d "
        "fractional_max_pool2d fractional_max_pool3d",
        "avg_pool": "avg_pool1d avg_pool2d avg_pool3d",
        "adaptive_avg_pool": "adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d",
        "reduce": "sum mean amax amin max min var std norm prod logsumexp argmax argmin cumsum cumprod",
        "reshape": "view reshape flatten unflatten squeeze unsqueeze expand expand_as view_as contiguous repeat clone "
        "roll repeat_interleave",
        "transpose": "permute transpose t swapaxes movedim",
        "concat": "cat concat concatenate stack",
        "split": "split chunk unbind tensor_split",
        "slice": "narrow select index_select gather",
        "dropout": "dropout dropout1d dropout2d dropout3d alpha_dropout",
        "constant": "arange zeros ones full empty randn rand tensor zeros_like ones_like full_like empty_like "
        "new_zeros new_ones new_full new_empty",
        "other": "size dim numel getattr detach",
        "elementwise": "neg exp log sqrt rsqrt pow abs clamp clip where masked_fill erf sin cos reciprocal "
        "hardtanh hardsigmoid elu softplus mish float half to type type_as eq ne lt le gt ge maximum minimum floor "
        "ceil round sign square logical_not logical_and logical_or addcmul addcdiv lerp logsigmoid softsign glu "
        "hardshrink softshrink tanhshrink threshold relu6 selu celu prelu",
    }
)


def from_module(
    module: nn.Module, example_inputs: Any, name: str | None = None, expand_layers: bool = True
) -> CompGraph:
    """Trace ``module`` with torch.fx, run it on ``example_inputs`` for shapes, and build its CompGraph.

    Args:
        module: The PyTorch model.
        example_inputs: One input tensor or a tuple of them.
        name: The graph's name (default: the module's class name).
        expand_layers: Expand GRU/RNN and transformer-encoder layers into the ops PyTorch runs for them
            (:mod:`~mlsysopt.graph.importers.expansion`); False keeps one node per fx node (what a device map of
            the model places).

    Returns:
        The CompGraph.
    """
    name = name or type(module).__name__
    return from_traced(trace_module(module, example_inputs, name), name, expand_layers)


def trace_module(module: nn.Module, example_inputs: Any, name: str | None = None) -> fx.GraphModule:
    """``module`` traced with torch.fx, every node's ``tensor_meta`` set by a run on ``example_inputs``."""
    if not isinstance(module, nn.Module):
        raise ImportFailed(f"expected a torch.nn.Module, got {type(module).__name__}")
    name = name or type(module).__name__
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    gm = _trace(module, name)
    _propagate_shapes(gm, inputs, name)
    return gm


def from_traced(gm: fx.GraphModule, name: str, expand_layers: bool = True) -> CompGraph:
    """The CompGraph of a shape-propagated trace (:func:`trace_module`): one node per fx node, except that a GRU/RNN
    or transformer-encoder leaf becomes the ops PyTorch runs for it (:mod:`~mlsysopt.graph.importers.expansion`)."""
    nodes = list(gm.graph.nodes)
    rows = Rows()
    gid: dict[fx.Node, int] = {}  # fx node -> the graph node that makes its output
    seen_tensors: set[int] = set()
    out_bytes = {n: _nbytes(n.meta.get("tensor_meta")) for n in nodes}
    unknown: list[str] = []
    kept_whole: dict[str, dict[str, Any]] = {}  # expand_layers=False: the layers that stay one node, and their ops
    expanded: list[dict[str, Any]] = []  # the node ranges of expanded layers, for a device model by op group
    depthwise: list[int] = []
    lstm_layers: list[list[int]] = []
    for node in nodes:
        op, mod = _classify(gm, node)
        expansion = expand(node, mod) if mod is not None and expand_layers else None
        if mod is not None and not expand_layers and (whole := kept_whole_layer(node, mod)) is not None:
            kept_whole[node.name] = whole
        if expansion is not None:
            owned = _params(gm, node, mod, seen_tensors) > 0  # a module called twice owns its weights once
            start = len(rows.names)
            gid[node] = splice(rows, node, expansion, gid, out_bytes, owned)
            expanded.append(
                {
                    "layer": node.name,
                    "kind": expansion.kind,
                    "start": start,
                    "stop": len(rows.names),
                    "layer_starts": [start + i for i, sub in enumerate(expansion.nodes) if sub.layer],
                }
            )
            continue
        params = float(_params(gm, node, mod, seen_tensors))
        elems = float(_numel(node.meta.get("tensor_meta")))
        v = rows.add(node.name, op, float(_flops(op, node, mod)), out_bytes[node], params, elems)
        for parent in node.all_input_nodes:
            b = out_bytes[parent]
            if op == "other" and out_bytes[node] == 0:
                b = 0.0  # x.size() / x.shape read metadata, not the tensor
            elif _is_tuple_getitem(node, parent):
                b = out_bytes[node]
            rows.edge(gid[parent], v, b)
        gid[node] = v
        if isinstance(mod, nn.Conv2d | nn.Conv1d | nn.Conv3d) and 1 < mod.groups == mod.in_channels:
            depthwise.append(v)
        elif isinstance(mod, nn.LSTM):  # one fused op per layer and direction: a device model pays each one's set-up
            lstm_layers.append([v, mod.num_layers * (2 if mod.bidirectional else 1)])
        if op.startswith(UNKNOWN_PREFIXES) and _makes_tensor(node):
            unknown.append(op)
    meta: dict[str, Any] = {"name": name, "source": "torch.fx"}
    if kept_whole:
        meta["kept_whole"] = kept_whole
    if expanded:
        meta["expanded"] = expanded
    if depthwise:
        meta["depthwise"] = depthwise
    if lstm_layers:
        meta["lstm_layers"] = lstm_layers
    record_unknown_ops(meta, unknown, name)
    return rows.build(meta)


#: Op names the importer gives nodes it has no formula for (``call_module:GRU``-style).
UNKNOWN_PREFIXES = ("call_module:", "call_function:", "call_method:")


def _makes_tensor(node: fx.Node) -> bool:
    """Whether a node produces tensor data (Python-level shape arithmetic such as ``len(x)`` costs nothing)."""
    return _numel(node.meta.get("tensor_meta")) > 0


# ---------------------------------------------------------------------- tracing
def _trace(module: nn.Module, name: str) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(module)
    except Exception as exc:
        where = _user_frame(exc)
        at = f" at {where}" if where else ""
        hint = (
            "Data-dependent Python control flow (if/while on tensor values) cannot be traced; "
            "rewrite it with torch.where or move it into a leaf module."
            if "control flow" in str(exc)
            else "Make the code at that line traceable (no Python logic on tensor values) or a leaf module."
        )
        raise ImportFailed(
            f"torch.fx could not symbolically trace '{name}'{at}: {type(exc).__name__}: {exc}. {hint}"
        ) from None


def _user_frame(exc: BaseException) -> str:
    """``file:line in func: code`` of the innermost traceback frame outside torch and this file."""
    torch_dir = os.path.dirname(torch.__file__)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        fname = os.path.abspath(frame.filename)
        if fname.startswith(torch_dir) or fname == os.path.abspath(__file__):
            continue
        code = (frame.line or "").strip()
        return f"{frame.filename}:{frame.lineno} in {frame.name}" + (f": `{code}`" if code else "")
    return ""


class _NodeFailed(Exception):
    def __init__(self, node: fx.Node, cause: Exception) -> None:
        super().__init__(node.name)
        self.node, self.cause = node, cause


class _QuietShapeProp(ShapeProp):
    """ShapeProp that raises :class:`_NodeFailed` instead of printing a traceback to stderr."""

    def run_node(self, n: fx.Node) -> Any:
        """Run one node and record its ``tensor_meta`` (as ShapeProp does)."""
        try:
            result = fx.Interpreter.run_node(self, n)
        except Exception as exc:
            raise _NodeFailed(n, exc) from None
        found = False

        def extract(obj: Any) -> Any:
            nonlocal found
            if isinstance(obj, torch.Tensor):
                found = True
                return _extract_tensor_metadata(obj)
            return obj

        meta = map_aggregate(result, extract)
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result


def _propagate_shapes(gm: fx.GraphModule, inputs: tuple[Any, ...], name: str) -> None:
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    if len(inputs) > n_placeholders:
        raise ImportFailed(f"'{name}' takes {n_placeholders} input(s) but {len(inputs)} example inputs were given")
    prop = _QuietShapeProp(gm)
    prop.extra_traceback = False
    try:
        with torch.no_grad():
            prop.propagate(*inputs)
    except _NodeFailed as exc:
        raise ImportFailed(
            f"running '{name}' on its example inputs failed at node '{exc.node.name}' "
            f"({exc.node.format_node()}): {type(exc.cause).__name__}: {exc.cause}"
        ) from None
    except Exception as exc:  # e.g. the wrong number of example inputs
        raise ImportFailed(f"running '{name}' on its example inputs failed: {type(exc).__name__}: {exc}") from None


def _is_tuple_getitem(node: fx.Node, parent: fx.Node) -> bool:
    """Whether ``node`` picks one element out of ``parent``'s tuple/list of tensors."""
    meta = parent.meta.get("tensor_meta")
    is_container = meta is not None and not isinstance(meta, TensorMetadata)
    return node.target is operator.getitem and bool(node.args) and node.args[0] is parent and is_container


# ---------------------------------------------------------------------- classification
def _classify(gm: fx.GraphModule, node: fx.Node) -> tuple[str, nn.Module | None]:
    """Canonical op name of a node (and its submodule for call_module)."""
    if node.op == "placeholder":
        return "input", None
    if node.op == "output":
        return "output", None
    if node.op == "get_attr":
        return "constant", None
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        for cls in type(mod).__mro__:
            if cls.__name__ in _MODULE_OPS:
                return _MODULE_OPS[cls.__name__], mod
        return f"call_module:{type(mod).__name__}", mod
    fname = str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
    if fname == "getitem":
        return ("slice" if _shape(node.args[0]) is not None else "other"), None
    if fname in _CALL_OPS:
        return _CALL_OPS[fname], None
    return f"{node.op}:{fname}", None


def _params(gm: fx.GraphModule, node: fx.Node, mod: nn.Module | None, seen: set[int]) -> int:
    if mod is not None:
        tensors = list(mod.parameters())
    elif node.op == "get_attr":
        obj = operator.attrgetter(str(node.target))(gm)
        tensors = [obj] if isinstance(obj, torch.Tensor) else []
    else:
        return 0
    total = 0
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel()
    return total
