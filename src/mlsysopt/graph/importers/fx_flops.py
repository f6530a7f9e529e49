"""FLOPs and tensor sizes of torch.fx nodes (formulas in ``mlsysopt.graph.importers.torch_fx``'s docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import TensorMetadata

import mlsysopt.graph.importers.expansion as ex
import mlsysopt.graph.importers.flop_formulas as ff

NORM_FLOPS_PER_ELEM = ff.NORM_FLOPS_PER_ELEM
SOFTMAX_FLOPS_PER_ELEM = ff.SOFTMAX_FLOPS_PER_ELEM

_ELEMENTWISE = ("add", "sub", "mul", "div", "elementwise", "relu", "gelu", "silu", "sigmoid", "tanh", "hardswish")
_NORMS = ("batch_norm", "layer_norm", "group_norm")


# ---------------------------------------------------------------------- tensor metadata
def _metas(value: Any) -> Iterator[TensorMetadata]:
    if isinstance(value, TensorMetadata):  # a NamedTuple, so test it before tuple
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _metas(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _metas(v)


def _numel(value: Any) -> int:
    return sum(math.prod(m.shape) for m in _metas(value))


def _nbytes(value: Any) -> float:
    return float(sum(math.prod(m.shape) * m.dtype.itemsize for m in _metas(value)))


def _shape(arg: Any) -> tuple[int, ...] | None:
    """Shape of an fx node argument that is a single tensor, else None."""
    if isinstance(arg, fx.Node):
        tm = arg.meta.get("tensor_meta")
        if isinstance(tm, TensorMetadata):
            return tuple(tm.shape)
    return None


def _arg(node: fx.Node, i: int, key: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(key, default)


# ---------------------------------------------------------------------- FLOPs
def _flops(op: str, node: fx.Node, mod: nn.Module | None) -> float:
    """FLOPs of one node (see the module docstring for the formulas)."""
    out = _numel(node.meta.get("tensor_meta"))
    in0 = _shape(node.args[0]) if node.args else None
    if op in _ELEMENTWISE:
        return out
    if op in _NORMS:
        return NORM_FLOPS_PER_ELEM * out
    if op == "softmax":
        return SOFTMAX_FLOPS_PER_ELEM * out
    if op in ("reduce", "adaptive_avg_pool") or (op == "max_pool" and "adaptive" in _fname(node, mod)):
        return math.prod(in0) if in0 else out
    if op in ("max_pool", "avg_pool"):
        kernel = getattr(mod, "kernel_size", 1) if mod is not None else _arg(node, 1, "kernel_size", 1)
        return out * _area(kernel, _spatial_dims(node, mod))
    if op == "linear":
        return _linear_flops(node, mod, out)
    if op in ("conv", "conv_transpose"):
        return _conv_flops(op, node, mod, out, in0)
    if op == "matmul":
        fused = _fname(node, mod) in ("addmm", "baddbmm")  # out = input + a @ b: one extra add
        a = _shape(node.args[1]) if fused and len(node.args) > 1 else in0
        return 2 * out * (a[-1] if a else 0) + (out if fused else 0)
    if op == "attention":
        return _attention_flops(node, mod)
    if op in ("rnn", "lstm", "gru"):
        return _rnn_flops(op, node, mod, in0)
    if op == "transformer":  # kept whole (expand_layers=False): the FLOPs of its ops
        expansion = _expand_encoder(node, mod) if mod is not None else None
        return float(sum(sub.flops for sub in expansion.nodes)) if expansion else 0.0
    if op == "einsum":
        return _einsum_flops(node)
    if op == "interpolate":
        return _interpolate_flops(node, mod, out, in0)
    if op == "lp_pool":
        kernel = getattr(mod, "kernel_size", 1) if mod is not None else _arg(node, 2, "kernel_size", 1)
        return ff.lp_pool_flops(out, _area(kernel, _spatial_dims(node, mod)))
    if op == "embedding_bag":
        return _embedding_bag_flops(node, mod, out)
    return 0.0  # data movement (views, copies, lookups, padding, constants): see the module docstring


def _rnn_flops(op: str, node: fx.Node, mod: nn.Module | None, x: tuple[int, ...] | None) -> float:
    if not isinstance(mod, (nn.RNNBase, nn.RNNCellBase)) or not x:
        return 0.0
    if isinstance(mod, nn.RNNCellBase):  # one step: (batch, input) or (input,)
        batch = math.prod(x[:-1]) if len(x) > 1 else 1
        return float(ff.rnn_flops(op, 1, batch, mod.input_size, mod.hidden_size, bias=mod.bias))
    if len(x) == 2:  # unbatched (steps, input)
        steps, batch = x[0], 1
    else:
        steps, batch = (x[1], x[0]) if mod.batch_first else (x[0], x[1])
    directions = 2 if mod.bidirectional else 1
    proj = int(getattr(mod, "proj_size", 0) or 0)
    return float(
        ff.rnn_flops(op, steps, batch, mod.input_size, mod.hidden_size, mod.num_layers, directions, mod.bias, proj)
    )


def _einsum_flops(node: fx.Node) -> float:
    if not node.args or not isinstance(node.args[0], str):
        return 0.0
    operands = node.args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    shapes = [_shape(a) for a in operands]
    if any(s is None for s in shapes):
        return 0.0
    flops = ff.einsum_flops(node.args[0], shapes)  # type: ignore[arg-type]
    return float(flops or 0)


def _interpolate_flops(node: fx.Node, mod: nn.Module | None, out: int, x: tuple[int, ...] | None) -> float:
    mode = str(getattr(mod, "mode", "nearest") if mod is not None else _arg(node, 3, "mode", "nearest"))
    dims = len(x) - 2 if x else 2
    return float(ff.interpolate_flops(mode, out, dims, math.prod(x) if x else 0))


def _embedding_bag_flops(node: fx.Node, mod: nn.Module | None, out: int) -> float:
    idx = _shape(_arg(node, 0, "input"))
    if idx is None:
        return 0.0
    if mod is not None:
        dim, mode = int(mod.embedding_dim), str(mod.mode)
        weighted = _arg(node, 2, "per_sample_weights") is not None
    else:
        w = _shape(_arg(node, 1, "weight"))
        dim, mode = (w[-1] if w else 0), str(_arg(node, 4, "mode", "mean"))
        weighted = _arg(node, 8, "per_sample_weights") is not None
    return float(ff.embedding_bag_flops(math.prod(idx), dim, out, mode, weighted))


def _fname(node: fx.Node, mod: nn.Module | None) -> str:
    """Lower-case module class name, method name or function ``__name__`` of a node."""
    if mod is not None:
        return type(mod).__name__.lower()
    if node.op == "call_method":
        return str(node.target).lower()
    return str(getattr(node.target, "__name__", node.target)).lower()


def _spatial_dims(node: fx.Node, mod: nn.Module | None) -> int:
    m = re.search(r"(\d)d$", _fname(node, mod))
    return int(m.group(1)) if m else 2


def _area(kernel: Any, dims: int) -> int:
    if isinstance(kernel, (tuple, list)):
        return math.prod(int(k) for k in kernel)
    return int(kernel) ** dims


def _linear_flops(node: fx.Node, mod: nn.Module | None, out: int) -> float:
    if isinstance(mod, nn.Linear):
        return 2 * out * mod.in_features + (out if mod.bias is not None else 0)
    w = _shape(_arg(node, 1, "weight"))
    has_bias = _arg(node, 2, "bias") is not None
    return 2 * out * (w[-1] if w else 0) + (out if has_bias else 0)


def _conv_flops(op: str, node: fx.Node, mod: nn.Module | None, out: int, in0: tuple[int, ...] | None) -> float:
    if mod is not None:
        weight = getattr(mod, "weight", None)
        w = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
        has_bias = getattr(mod, "bias", None) is not None
    else:
        w = _shape(_arg(node, 1, "weight"))
        has_bias = _arg(node, 2, "bias") is not None
    per = math.prod(w[1:]) if w else 0  # (Cin/groups)*kh*kw for conv, (Cout/groups)*kh*kw for transposed
    # A conv does `per` multiply-adds per output element; a transposed conv does them per input element.
    macs = (out if op == "conv" else (math.prod(in0) if in0 else 0)) * per
    return 2 * macs + (out if has_bias else 0)


def _attention_flops(node: fx.Node, mod: nn.Module | None) -> float:
    if isinstance(mod, nn.MultiheadAttention):
        q, k = _shape(_arg(node, 0, "query")), _shape(_arg(node, 1, "key"))
        if not q or not k:
            return 0.0
        # Unbatched (L, E) or batched (L, N, E) / (N, L, E): only the products matter.
        lq, lk = math.prod(q[:-1]), math.prod(k[:-1])
        n = q[1] if len(q) == 3 and not mod.batch_first else (q[0] if len(q) == 3 else 1)
        return float(ff.mha_flops(lq, lk, n, mod.embed_dim, mod.kdim, mod.vdim, mod.num_heads))
    q, k, v = (_shape(_arg(node, i, key)) for i, key in enumerate(("query", "key", "value")))
    if not q or not k or not v:
        return 0.0
    batch, length, e = math.prod(q[:-2]), q[-2], q[-1]
    s, ev = k[-2], v[-1]
    scores = batch * length * s
    return 2 * scores * e + 2 * scores * ev + SOFTMAX_FLOPS_PER_ELEM * scores


# ---------------------------------------------------------------------- layers expanded into their ops
def expand(node: fx.Node, mod: nn.Module | None) -> ex.Expansion | None:
    """The ops PyTorch runs for a GRU/RNN or transformer-encoder leaf (:mod:`~mlsysopt.graph.importers.expansion`).

    Args:
        node: A ``call_module`` node with shapes propagated.
        mod: Its module.

    Returns:
        The expansion, or None for any other module, an input without a known shape, or a layer over the bound.
    """
    if isinstance(mod, (nn.GRU, nn.RNN)):
        return _expand_recurrent(node, mod)
    if isinstance(mod, (nn.TransformerEncoder, nn.TransformerEncoderLayer)):
        return _expand_encoder(node, mod)
    return None


def kept_whole_layer(node: fx.Node, mod: nn.Module) -> dict[str, Any] | None:
    """What a layer :func:`expand` would expand is when kept one node (``expand_layers=False``).

    The ops are counted without building the expansion (a GRU over a long sequence would be up to
    :data:`~mlsysopt.graph.importers.expansion.MAX_EXPANDED_NODES` nodes), and a layer over that bound is listed too:
    it stays one node even where layers are expanded.

    Args:
        node: A ``call_module`` node with shapes propagated.
        mod: Its module.

    Returns:
        ``{"module": class name, "ops": ops PyTorch runs for it, "layers": its layers (and directions), "kind":
        recurrent | transformer}`` (and ``"over_bound": True`` for a layer :func:`expand` keeps whole too), or None
        when it would not be expanded.
    """
    if isinstance(mod, (nn.GRU, nn.RNN)):
        shape = _recurrent_shape(node, mod)
        if shape is None:
            return None
        layers = mod.num_layers * (2 if mod.bidirectional else 1)
        ops = ex.recurrent_size(shape[0], shape[1], mod.num_layers, 2 if mod.bidirectional else 1)
        kind = "recurrent"
    else:
        expansion = expand(node, mod)  # an encoder (7 ops a layer, no bound), or None
        if expansion is None:
            return None
        ops, layers, kind = len(expansion.nodes), sum(1 for n in expansion.nodes if n.layer), expansion.kind
    whole: dict[str, Any] = {"module": type(mod).__name__, "ops": ops, "layers": layers, "kind": kind}
    if not ex.fits(ops):
        whole["over_bound"] = True
    return whole


def _input_meta(node: fx.Node, key: str) -> TensorMetadata | None:
    arg = _arg(node, 0, key)
    meta = arg.meta.get("tensor_meta") if isinstance(arg, fx.Node) else None
    return meta if isinstance(meta, TensorMetadata) else None


def _recurrent_shape(node: fx.Node, mod: nn.RNNBase) -> tuple[str, int, int, int] | None:
    """``(mode, steps, batch, itemsize)`` of a GRU/RNN call, or None when its input's shape is unknown."""
    meta = _input_meta(node, "input")
    if meta is None or len(meta.shape) not in (2, 3):
        return None
    x = tuple(meta.shape)
    if len(x) == 2:  # unbatched (steps, input)
        steps, batch = x[0], 1
    else:
        steps, batch = (x[1], x[0]) if mod.batch_first else (x[0], x[1])
    return ("gru" if isinstance(mod, nn.GRU) else "rnn"), steps, batch, meta.dtype.itemsize


def _expand_recurrent(node: fx.Node, mod: nn.RNNBase) -> ex.Expansion | None:
    shape = _recurrent_shape(node, mod)
    if shape is None:
        return None
    mode, steps, batch, itemsize = shape
    return ex.recurrent(node.name, mode, steps, batch, mod.input_size, mod.hidden_size, mod.num_layers,
                        2 if mod.bidirectional else 1, mod.bias, itemsize,
                        str(getattr(mod, "nonlinearity", "tanh")))  # fmt: skip


def _expand_encoder(node: fx.Node, mod: nn.Module) -> ex.Expansion | None:
    meta = _input_meta(node, "src")
    layers = list(mod.layers) if isinstance(mod, nn.TransformerEncoder) else [mod]
    if (
        meta is None
        or len(meta.shape) not in (2, 3)
        or not all(isinstance(m, nn.TransformerEncoderLayer) for m in layers)
    ):
        return None
    expansion = ex.Expansion([], ("src",), kind="transformer")
    out, item = -1, meta.dtype.itemsize
    for k, layer in enumerate(layers):
        tokens, batch = ex.shape_tokens(tuple(meta.shape), layer.self_attn.batch_first)
        params = {name: sum(p.numel() for p in getattr(layer, key).parameters())
                  for name, key in (("attention", "self_attn"), ("norm1", "norm1"), ("norm2", "norm2"),
                                    ("linear1", "linear1"), ("linear2", "linear2"))}  # fmt: skip
        prefix = f"layers.{k}." if isinstance(mod, nn.TransformerEncoder) else ""
        out = ex.transformer_layer(expansion, prefix, tokens, batch, layer.linear1.in_features,
                                   layer.linear1.out_features, layer.self_attn.num_heads, layer.norm_first, item,
                                   params, out)  # fmt: skip
    norm = getattr(mod, "norm", None) if isinstance(mod, nn.TransformerEncoder) else None
    if norm is not None:
        elems = float(math.prod(meta.shape))
        node_ = ex.SubNode("norm", "layer_norm", NORM_FLOPS_PER_ELEM * elems, elems * item, elems,
                           params=sum(p.numel() for p in norm.parameters()),
                           parents=[(out, expansion.nodes[out].bytes_out)])  # fmt: skip
        expansion.add(node_)
    return expansion
