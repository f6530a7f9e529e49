"""ONNX ``RNN``/``GRU``/``LSTM`` nodes: their FLOPs, and the GRU/RNN unrolled per time step.

One ONNX node is one layer: input ``X`` is ``(steps, batch, input)`` (``(batch, steps, input)`` with ``layout=1``),
``W``/``R``/``B`` its weights, ``initial_h`` its input 5; attributes ``hidden_size``, ``direction`` and
``activations`` (an RNN's first activation, ``Tanh`` or ``Relu``). The unrolled ops are those of
:func:`mlsysopt.graph.importers.expansion.recurrent`, as PyTorch runs the layer the file was exported from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import helper

import mlsysopt.graph.importers.expansion as ex
import mlsysopt.graph.importers.flop_formulas as ff

Shape = tuple[int, ...]
#: ONNX input number of ``initial_h``.
INITIAL_H = 5


@dataclass(frozen=True)
class Dims:
    """A recurrent node's sizes: steps, batch, input features, hidden size, directions, bias, nonlinearity."""

    steps: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    bias: bool
    nonlinearity: str


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def dims(node: onnx.NodeProto, shape: Callable[[str], Shape | None]) -> Dims | None:
    """The sizes of an RNN/GRU/LSTM node from its attributes and shapes; None when X's shape is not known.

    Args:
        node: The ONNX node.
        shape: Tensor name -> static shape (or None).

    Returns:
        Its :class:`Dims`, or None.
    """
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    ins = list(node.input)
    x = shape(ins[0]) if ins and ins[0] else None
    r = shape(ins[2]) if len(ins) > 2 and ins[2] else None
    hidden = int(attrs.get("hidden_size", 0) or (r[-1] if r else 0))
    if not x or len(x) != 3 or not hidden:
        return None
    steps, batch = (x[1], x[0]) if attrs.get("layout", 0) else (x[0], x[1])
    directions = 2 if _text(attrs.get("direction", b"forward")) == "bidirectional" else 1
    acts = [_text(a) for a in attrs.get("activations", [b"Tanh"])]
    relu = bool(acts) and acts[0].lower() == "relu"
    bias = len(ins) > 3 and bool(ins[3])
    return Dims(steps, batch, x[2], hidden, directions, bias, "relu" if relu else "tanh")


def flops(op: str, node: onnx.NodeProto, shape: Callable[[str], Shape | None]) -> float:
    """FLOPs of the whole layer (:func:`mlsysopt.graph.importers.flop_formulas.rnn_flops`); 0 without shapes."""
    d = dims(node, shape)
    if d is None:
        return 0.0
    return float(ff.rnn_flops(op, d.steps, d.batch, d.input_size, d.hidden, 1, d.directions, d.bias))


def expand(op: str, node: onnx.NodeProto, shape: Callable[[str], Shape | None], itemsize: int,
           label: str) -> ex.Expansion | None:  # fmt: skip
    """A GRU/RNN node unrolled per step, its reads numbered as the node's inputs (X 0, ``initial_h`` 5).

    Args:
        op: ``gru`` or ``rnn``.
        node: The ONNX node.
        shape: Tensor name -> static shape (or None).
        itemsize: Bytes per element of X.
        label: The node's name (for the warning over the bound).

    Returns:
        The expansion, or None without shapes or over the bound.
    """
    d = dims(node, shape)
    if d is None:
        return None
    expansion = ex.recurrent(label, op, d.steps, d.batch, d.input_size, d.hidden, 1, d.directions, d.bias,
                             itemsize, d.nonlinearity)  # fmt: skip
    if expansion is not None:
        for sub in expansion.nodes:
            sub.reads = [(INITIAL_H if a == 1 else a, b) for a, b in sub.reads]
    return expansion


def itemsize(nbytes: float, x: Shape | None) -> int:
    """Bytes per element of a tensor of ``nbytes`` bytes and shape ``x`` (4 when unknown)."""
    return round(nbytes / math.prod(x)) if x and math.prod(x) else 4
