"""FLOP formulas shared by the torch.fx and ONNX importers (pure arithmetic on shapes; a multiply-add is 2 FLOPs).

Recurrent layers, per time step, batch element, layer and direction, with layer input size ``I``, hidden size
``H``, recurrent state size ``S`` (``H``, or ``proj_size`` for a projected LSTM) and ``G`` gates (RNN 1, GRU 3,
LSTM 4)::

    2*G*H*(I + S)        input and recurrent matrix products
  + 2*G*H                the two biases (when the layer has them)
  + G*H                  adding the input and recurrent parts of every gate
  + H * (1 | 7 | 9)      RNN: tanh/relu; GRU: 3 activations, r*(W_hn h + b_hn), h' = (h - n)*z + n (as
                         PyTorch computes (1-z)*n + z*h); LSTM: 4 activations, c = f*c + i*g, h = o*tanh(c)
  + 2*S*H                LSTM projection (proj_size > 0 only)

Layers after the first read ``directions * S`` inputs. Multi-head attention (``nn.MultiheadAttention``, and the
attention of ``nn.TransformerEncoderLayer``) over ``Lq`` query and ``Lk`` key tokens (summed over the batch), width
``E``, key/value widths ``Ek``/``Ev`` and ``h`` heads: the projections ``2*Lq*E*E`` (query) + ``2*Lk*Ek*E`` +
``2*Lk*Ev*E`` + ``2*Lq*E*E`` (output), then ``4*E`` per score (QKᵀ and the weighted sum) and a softmax of 3 per
score and head, with ``Lq*Lk/batch`` scores. Other families:

* ``einsum``: with ``N`` the product of every index's size and ``k`` operands, ``N*(k-1)`` multiplications plus
  ``N`` additions when some index is summed (so ``ij,jk->ik`` is ``2*i*j*k``, like a matmul);
* interpolation, per output element: nearest 0 (a copy), d-linear ``2**(d+1) - 1`` (weights of ``2**d``
  neighbours), bicubic ``2*4**d - 1``, area = adaptive average pooling (input elements);
* LP pooling: ``2 * kernel area`` per output element (a power per input, a sum, a root); global: ``2 * input``;
* EmbeddingBag: an add (or comparison, for max) per looked-up element, plus a divide per output for mean;
  a plain embedding lookup, unpooling, padding and shuffles move data and count 0 FLOPs.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from mlsysopt.errors import MlsysoptWarning

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
ELEMENTWISE_PER_H = {"rnn": 1, "gru": 7, "lstm": 9}
NORM_FLOPS_PER_ELEM = 5
SOFTMAX_FLOPS_PER_ELEM = 3


def mha_flops(lq: int, lk: int, batch: int, embed: int, kdim: int, vdim: int, heads: int) -> int:
    """FLOPs of multi-head attention over ``lq`` query and ``lk`` key tokens summed over ``batch`` (module docstring).

    Args:
        lq: Query tokens over the batch.
        lk: Key/value tokens over the batch.
        batch: Batch size.
        embed: Embedding width ``E``.
        kdim: Key width.
        vdim: Value width.
        heads: Attention heads.

    Returns:
        The FLOPs.
    """
    proj = 2 * lq * embed * embed + 2 * lk * kdim * embed + 2 * lk * vdim * embed + 2 * lq * embed * embed
    scores = lq * lk // max(batch, 1)  # sum over the batch of L*S
    return proj + 4 * scores * embed + SOFTMAX_FLOPS_PER_ELEM * scores * heads


def rnn_step_flops(mode: str, input_size: int, hidden: int, bias: bool = True, proj: int = 0) -> int:
    """FLOPs of one time step of one layer and direction for one batch element (see the module docstring)."""
    g, h = GATES[mode], hidden
    s = proj if proj else h
    flops = 2 * g * h * (input_size + s) + g * h + ELEMENTWISE_PER_H[mode] * h
    if bias:
        flops += 2 * g * h
    if proj:
        flops += 2 * s * h
    return flops


def rnn_flops(
    mode: str,
    steps: int,
    batch: int,
    input_size: int,
    hidden: int,
    layers: int = 1,
    directions: int = 1,
    bias: bool = True,
    proj: int = 0,
) -> int:
    """FLOPs of a whole (possibly stacked, bidirectional) RNN/GRU/LSTM over ``steps`` x ``batch``."""
    total = 0
    for layer in range(layers):
        i = input_size if layer == 0 else directions * (proj or hidden)
        total += directions * rnn_step_flops(mode, i, hidden, bias, proj)
    return steps * batch * total


def einsum_flops(equation: str, shapes: Sequence[Sequence[int]]) -> int | None:
    """FLOPs of ``einsum(equation, *operands)`` with these operand shapes; None when they do not match."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    sizes: dict[str, int] = {}
    broadcast: list[int] = []
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        extra = len(shape) - len(letters)
        if extra < 0 or (extra and "..." not in term):
            return None
        head, _, _tail = term.partition("...")
        dims = list(shape)
        ell = dims[len(head) : len(head) + extra] if "..." in term else []
        named = dims[: len(head)] + dims[len(head) + extra :]
        for letter, size in zip(letters, named, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), int(size))
        width = max(len(broadcast), len(ell))
        broadcast = [1] * (width - len(broadcast)) + broadcast
        ell = [1] * (width - len(ell)) + ell
        broadcast = [max(a, int(b)) for a, b in zip(broadcast, ell, strict=True)]
    if arrow:
        kept = set(rhs.replace("...", ""))
        ellipsis_summed = "..." not in rhs
    else:  # implicit output: the letters used once, and the broadcast dims
        counts = {c: lhs.count(c) for c in sizes}
        kept = {c for c, n in counts.items() if n == 1}
        ellipsis_summed = False
    total = math.prod(sizes.values()) * math.prod(broadcast)
    summed = bool(set(sizes) - kept) or (ellipsis_summed and math.prod(broadcast) > 1)
    return total * (len(shapes) - 1) + (total if summed else 0)


def interpolate_flops(mode: str, out_numel: int, spatial_dims: int, in_numel: int = 0) -> int:
    """FLOPs of resizing to ``out_numel`` elements over ``spatial_dims`` dims (see the module docstring)."""
    m = mode.lower()
    d = max(1, spatial_dims)
    if "nearest" in m:
        return 0
    if "cubic" in m:
        return out_numel * (2 * 4**d - 1)
    if m == "area":
        return in_numel
    return out_numel * (2 ** (d + 1) - 1)  # linear, bilinear, trilinear


def lp_pool_flops(out_numel: int, kernel_area: int) -> int:
    """FLOPs of LP pooling: a power per window element, their sum and a root per output."""
    return 2 * out_numel * kernel_area


def embedding_bag_flops(indices: int, dim: int, out_numel: int, mode: str = "mean", weighted: bool = False) -> int:
    """FLOPs of an EmbeddingBag: reduce ``indices`` looked-up rows of ``dim`` into bags."""
    flops = indices * dim
    if weighted:
        flops += indices * dim
    if mode == "mean":
        flops += out_numel
    return flops


def record_unknown_ops(meta: dict[str, Any], ops: Iterable[str], where: str) -> None:
    """Record ``{op: count}`` of the nodes without a FLOP formula in ``meta["unknown_ops"]`` and warn once."""
    counts = Counter(ops)
    meta["unknown_ops"] = dict(counts.most_common())
    if counts:
        listed = ", ".join(f"{op} x{n}" for op, n in counts.most_common())
        warnings.warn(
            f"{where}: {sum(counts.values())} node(s) of {len(counts)} op type(s) have no FLOP formula and count "
            f"as 0 FLOPs: {listed}",
            MlsysoptWarning,
            stacklevel=3,
        )
