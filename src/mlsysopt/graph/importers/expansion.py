"""Layers the importers expand into the ops PyTorch runs for them, so the simulator pays one per-op overhead per op.

A graph importer sees a recurrent or transformer layer as one call (a torch.fx leaf module, an ONNX ``GRU`` node),
yet PyTorch runs it as many operators, and on a CPU each one costs its dispatch besides its FLOPs. Measured with
``torch.profiler`` (torch 2.13, CPU, one thread, inference mode):

* ``nn.GRU``: per layer and direction one ``linear`` projects the whole input sequence (``W_ih x + b_ih``), then
  every time step runs 11 ops on the hidden state: ``linear`` (``W_hh h + b_hh``), ``add_``, ``sigmoid_`` (reset
  gate), ``add_``, ``sigmoid_`` (update gate), ``mul_``, ``add``, ``tanh_`` (new gate), ``sub``, ``mul_``, ``add_``
  (``h' = (h - n) * z + n``); the step outputs are stacked once per layer.
* ``nn.RNN``: the same projection, then per step ``linear``, ``add_``, ``tanh`` (or ``relu``).
* ``nn.LSTM``: one fused oneDNN op (``mkldnn_rnn_layer``) per layer: it stays one node (FLOPs counted).
* ``nn.TransformerEncoderLayer`` in inference: PyTorch's fast path (``_transformer_encoder_layer_fwd``) runs
  attention (``_native_multi_head_attention``: projections, scores, softmax, weighted sum), ``add_``,
  ``layer_norm``, ``linear`` with the activation fused (``_addmm_activation``), ``linear``, ``add_``,
  ``layer_norm``: 7 nodes per layer (``norm_first`` reorders them); ``nn.TransformerEncoder`` chains its layers
  (and its final norm).

:func:`recurrent` and :func:`transformer_encoder` return these ops as an :class:`Expansion`: nodes in topological
order with FLOPs, output bytes, parameters and their edges; the last node stands for the layer's output and keeps
its name. A recurrent layer is a chain of step nodes carrying the hidden state, so the steps of one layer and
direction run in order; the two directions and the gates inside a step may run in parallel.

The size is bounded: a layer whose expansion would exceed :data:`MAX_EXPANDED_NODES` nodes (a sequence of 10⁶
steps) is not expanded. It stays one node with its FLOPs counted, and one :class:`~mlsysopt.errors.MlsysoptWarning`
names the node, the count and the bound; nothing is allocated for the count first.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import mlsysopt.graph.importers.flop_formulas as ff
from mlsysopt.errors import MlsysoptWarning

#: Most nodes one layer may expand into; a larger layer stays one node (with a warning).
MAX_EXPANDED_NODES = 100_000

#: Ops of one recurrent time step, as PyTorch's CPU cells run them: (suffix, op, parents). A parent is an earlier
#: op of the step, ``"h"`` (the previous hidden state) or ``"x"`` (this step's slice of the input projection).
#: Every op but the first (``W_hh h + b_hh``, ``G*H`` wide) makes ``H`` elements.
STEP_OPS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "gru": (
        ("hh", "linear", ("h",)),
        ("add_r", "add", ("hh", "x")),
        ("sigmoid_r", "sigmoid", ("add_r",)),
        ("add_z", "add", ("hh", "x")),
        ("sigmoid_z", "sigmoid", ("add_z",)),
        ("mul_r", "mul", ("hh", "sigmoid_r")),
        ("add_n", "add", ("x", "mul_r")),
        ("tanh_n", "tanh", ("add_n",)),
        ("sub", "sub", ("h", "tanh_n")),
        ("mul_z", "mul", ("sub", "sigmoid_z")),
        ("add_h", "add", ("mul_z", "tanh_n")),
    ),
    "rnn": (
        ("hh", "linear", ("h",)),
        ("add", "add", ("hh", "x")),
        ("act", "tanh", ("add",)),
    ),
}
#: Modes :func:`recurrent` unrolls (LSTM runs as one fused op on a CPU).
UNROLLED = tuple(STEP_OPS)


@dataclass
class SubNode:
    """One op of an expanded layer.

    Args:
        name: Name suffix (the importer prefixes the layer's name).
        op: Canonical op name (``linear``, ``add``, ``attention``, ...).
        flops: FLOPs of the op.
        bytes_out: Bytes of the tensor it makes.
        out_elems: Elements of that tensor.
        params: Parameter elements it owns (each weight counted once, at its first user).
        parents: ``(index of an earlier SubNode, bytes)`` per input edge.
        reads: ``(argument of the layer, bytes)`` per input from outside: 0 the input sequence, 1 the initial
            hidden state.
        layer: Whether it is the first op of one layer (and direction): where a device model pays the layer's own
            cost, its call and set-up (:mod:`mlsysopt.graph.op_profile`).
    """

    name: str
    op: str
    flops: float
    bytes_out: float
    out_elems: float
    params: float = 0.0
    parents: list[tuple[int, float]] = field(default_factory=list)
    reads: list[tuple[int, float]] = field(default_factory=list)
    layer: bool = False


@dataclass
class Expansion:
    """The ops of one layer in topological order; the last one is the layer's output (it keeps the layer's name).

    Args:
        nodes: The ops.
        arg_names: Keyword names of the layer's arguments that :attr:`SubNode.reads` index (PyTorch's).
        kind: ``recurrent`` or ``transformer``: what runs these ops (one C++ call per layer).
    """

    nodes: list[SubNode]
    arg_names: tuple[str, ...] = ("input", "hx")
    kind: str = "recurrent"

    def add(self, node: SubNode) -> int:
        """Append ``node``; returns its index."""
        self.nodes.append(node)
        return len(self.nodes) - 1


def recurrent_size(mode: str, steps: int, layers: int = 1, directions: int = 1) -> int:
    """Nodes :func:`recurrent` makes for this layer: per layer and direction a projection and the step ops, plus one
    output node per layer."""
    return layers * (directions * (1 + len(STEP_OPS[mode]) * steps) + 1)


def fits(count: int) -> bool:
    """Whether an expansion of ``count`` nodes is within :data:`MAX_EXPANDED_NODES` (else the layer stays one node)."""
    return count <= MAX_EXPANDED_NODES


def within_bound(name: str, what: str, count: int) -> bool:
    """Whether ``count`` nodes fit :data:`MAX_EXPANDED_NODES`; warns (naming ``name``) when they do not."""
    if fits(count):
        return True
    warnings.warn(
        f"{name}: {what} would make {count:,} nodes, over the bound of {MAX_EXPANDED_NODES:,} "
        "(mlsysopt.graph.importers.expansion.MAX_EXPANDED_NODES); it stays one node with its FLOPs counted, so the "
        "simulator pays its per-op overhead once instead of per op",
        MlsysoptWarning,
        stacklevel=3,
    )
    return False


def recurrent(
    name: str,
    mode: str,
    steps: int,
    batch: int,
    input_size: int,
    hidden: int,
    layers: int = 1,
    directions: int = 1,
    bias: bool = True,
    itemsize: int = 4,
    nonlinearity: str = "tanh",
) -> Expansion | None:
    """A GRU or RNN (``mode`` ``gru`` | ``rnn``) unrolled per layer, direction and time step.

    Args:
        name: The layer's node name (for the warning when it is too large).
        mode: ``gru`` or ``rnn``.
        steps: Sequence length.
        batch: Batch size (1 for an unbatched input).
        input_size: Features of the input sequence.
        hidden: Hidden size.
        layers: Stacked layers.
        directions: 1, or 2 for a bidirectional layer.
        bias: Whether the layer has biases.
        itemsize: Bytes per element.
        nonlinearity: ``tanh`` or ``relu`` (RNN).

    Returns:
        The expansion, or None when it would exceed :data:`MAX_EXPANDED_NODES` (one warning names the node).
    """
    count = recurrent_size(mode, steps, layers, directions)
    if not within_bound(name, f"unrolling {mode.upper()} over {steps:,} time steps", count):
        return None
    g, h, b = ff.GATES[mode], hidden, batch
    row = b * h * itemsize  # one step's hidden state
    ex = Expansion([])
    layer_in, in_bytes = -1, float(steps * b * input_size * itemsize)  # -1: the layer's argument 0
    last_steps: list[int] = []  # the last step of every layer and direction (they make h_n)
    for layer in range(layers):
        size_in = input_size if layer == 0 else directions * h
        outs: list[int] = []
        for d in range(directions):
            tag = f"l{layer}" + ("_reverse" if d else "")
            w_ih = g * h * size_in + (g * h if bias else 0)
            wide = steps * b * g * h  # W_ih x + b_ih over the whole sequence
            proj = SubNode(f"{tag}.ih", "linear", 2.0 * wide * size_in + (wide if bias else 0), wide * itemsize, wide,
                           params=w_ih, layer=True)  # fmt: skip
            if layer_in < 0:
                proj.reads.append((0, in_bytes))
            else:
                proj.parents.append((layer_in, in_bytes))
            p = ex.add(proj)
            prev = -1  # -1: the initial hidden state
            for k in range(steps):
                t = steps - 1 - k if d else k
                local: dict[str, int] = {}
                for j, (suffix, op, parents) in enumerate(STEP_OPS[mode]):
                    wide = g if j == 0 else 1
                    flops = (2.0 * h * g * h + (g * h if bias else 0)) * b if j == 0 else float(b * h)
                    if op == "tanh" and mode == "rnn" and nonlinearity == "relu":
                        op = "relu"
                    node = SubNode(f"{tag}.t{t}.{suffix}", op, flops, wide * row, wide * b * h)
                    if j == 0 and k == 0:
                        node.params = g * h * h + (g * h if bias else 0)
                    for parent in parents:
                        if parent == "x":
                            node.parents.append((p, float(row)))
                        elif parent == "h":
                            if prev < 0:
                                node.reads.append((1, float(row)))
                            else:
                                node.parents.append((prev, float(row)))
                        else:
                            node.parents.append((local[parent], float(ex.nodes[local[parent]].bytes_out)))
                    local[suffix] = ex.add(node)
                prev = local[STEP_OPS[mode][-1][0]]
                outs.append(prev)
            last_steps.append(prev)
        out_elems = steps * b * directions * h
        out = SubNode(f"l{layer}.out", "concat", 0.0, out_elems * itemsize, out_elems, parents=[(i, row) for i in outs])
        if layer == layers - 1:  # the layer's output also stacks h_n: the last step of every layer and direction
            out.parents += [(i, row) for i in last_steps[:-directions]]
        layer_in, in_bytes = ex.add(out), float(out_elems * itemsize)
    return ex


def transformer_layer(
    ex: Expansion,
    prefix: str,
    tokens: int,
    batch: int,
    embed: int,
    ffn: int,
    heads: int,
    norm_first: bool,
    itemsize: int,
    params: dict[str, int],
    source: int = -1,
) -> int:
    """Append one ``nn.TransformerEncoderLayer`` (its 7 fast-path ops) to ``ex``; returns its output node.

    Args:
        ex: The expansion to extend.
        prefix: Name prefix of its nodes (e.g. ``layers.0.``).
        tokens: Tokens over the batch (batch x sequence length).
        batch: Batch size.
        embed: Model width ``E``.
        ffn: Feed-forward width.
        heads: Attention heads.
        norm_first: Whether the layer normalises before attention and feed-forward.
        itemsize: Bytes per element.
        params: Parameter elements of ``attention``, ``norm1``, ``norm2``, ``linear1``, ``linear2``.
        source: Node index of the layer's input, or -1 for the expanded layer's argument 0.

    Returns:
        The index of the layer's last node.
    """
    act = float(tokens * embed)
    size = act * itemsize
    first = len(ex.nodes)

    def op(suffix: str, kind: str, flops: float, inputs: list[int], elems: float = act, p: str = "") -> int:
        node = SubNode(prefix + suffix, kind, flops, elems * itemsize, elems, params=params.get(p, 0),
                       layer=len(ex.nodes) == first)  # fmt: skip
        for i in inputs:
            if i < 0:
                node.reads.append((0, size))
            else:
                node.parents.append((i, ex.nodes[i].bytes_out))
        return ex.add(node)

    attention = ff.mha_flops(tokens, tokens, batch, embed, embed, embed, heads)
    norm = ff.NORM_FLOPS_PER_ELEM * act
    if norm_first:
        n1 = op("norm1", "layer_norm", norm, [source], p="norm1")
        a = op("self_attn", "attention", attention, [n1], p="attention")
        r1 = op("add1", "add", act, [source, a])
        n2 = op("norm2", "layer_norm", norm, [r1], p="norm2")
        f1 = op("linear1", "linear", 2.0 * tokens * embed * ffn + 2 * tokens * ffn, [n2], tokens * ffn, p="linear1")
        f2 = op("linear2", "linear", 2.0 * tokens * ffn * embed + act, [f1], p="linear2")
        return op("add2", "add", act, [r1, f2])
    a = op("self_attn", "attention", attention, [source], p="attention")
    r1 = op("add1", "add", act, [source, a])
    n1 = op("norm1", "layer_norm", norm, [r1], p="norm1")
    f1 = op("linear1", "linear", 2.0 * tokens * embed * ffn + 2 * tokens * ffn, [n1], tokens * ffn, p="linear1")
    f2 = op("linear2", "linear", 2.0 * tokens * ffn * embed + act, [f1], p="linear2")
    r2 = op("add2", "add", act, [n1, f2])
    return op("norm2", "layer_norm", norm, [r2], p="norm2")


def shape_tokens(shape: tuple[int, ...], batch_first: bool) -> tuple[int, int]:
    """(tokens over the batch, batch) of a transformer input ``(L, E)``, ``(N, L, E)`` or ``(L, N, E)``."""
    tokens = math.prod(shape[:-1])
    if len(shape) == 3:
        return tokens, shape[0] if batch_first else shape[1]
    return tokens, 1
