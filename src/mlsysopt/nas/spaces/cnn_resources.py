"""Params, FLOPs and bytes of a CNN-space model counted in closed form, node for node as the fx importer counts them.

:func:`mlsysopt.graph.importers.torch_fx.from_module` is the reference: it traces the built model, runs a shape
pass and applies its per-node formulas (a multiply-add is 2 FLOPs, batch norm 5 per element, ReLU and add 1,
a 3x3 pooling 9 per output element, adaptive average pooling 1 per input element; every node reads its inputs and
writes its output once, float32). That costs ~20-50 ms per model, and a search looks at thousands of candidates,
so :func:`static_resources` walks the same node list arithmetically (~20 us): the CNN space's blocks are simple
enough that every node's shape follows from the input shape, the ops and the widths. ``tests/nas/test_cnn_space.py``
checks that both give *exactly* the same numbers on every op pair, every width and several block counts, on
digits' 8x8 grey images and on 32x32 RGB images (stride-2 stem); :meth:`CnnSpace.importer_resources` runs the
reference path for any architecture.
"""

from __future__ import annotations

BYTES_PER_ELEM = 4  # float32
NORM_FLOPS_PER_ELEM = 5
POOL_AREA = 9  # 3x3 pooling windows


class _Tally:
    """Sums over nodes: FLOPs, bytes read plus written, parameters."""

    def __init__(self) -> None:
        self.flops = self.bytes = self.params = 0

    def node(self, out: int, inputs: tuple[int, ...], flops: int = 0, params: int = 0) -> int:
        """Count one node producing ``out`` elements from inputs of ``inputs`` elements; returns ``out``."""
        self.flops += flops
        self.bytes += BYTES_PER_ELEM * (out + sum(inputs))
        self.params += params
        return out

    def conv_bn_relu(self, x: int, c_in: int, c_out: int, hw: int, kernel: int, groups: int = 1) -> int:
        """A bias-free conv (``hw`` output pixels) -> BatchNorm -> ReLU; returns the output elements."""
        out = c_out * hw
        self.node(out, (x,), 2 * out * (c_in // groups) * kernel * kernel, c_out * (c_in // groups) * kernel * kernel)
        self.node(out, (out,), NORM_FLOPS_PER_ELEM * out, 2 * c_out)
        return self.node(out, (out,), out)


def _op(t: _Tally, name: str, c: int, hw: int) -> int:
    """Count op ``name`` on ``c`` channels of ``hw`` pixels (shape-preserving); returns its output elements."""
    e = c * hw
    if name in ("conv3x3", "conv5x5"):
        return t.conv_bn_relu(e, c, c, hw, 3 if name == "conv3x3" else 5)
    if name == "sepconv3x3":
        t.node(e, (e,), 2 * e * 9, c * 9)  # depthwise 3x3
        t.node(e, (e,), 2 * e * c, c * c)  # pointwise 1x1
        t.node(e, (e,), NORM_FLOPS_PER_ELEM * e, 2 * c)
        return t.node(e, (e,), e)
    if name in ("maxpool3x3", "avgpool3x3"):
        return t.node(e, (e,), POOL_AREA * e)
    return t.node(e, (e,))  # identity: a node with no FLOPs that still passes its tensor on


def static_resources(
    spec: list[tuple[str, str, int]], input_shape: tuple[int, int, int], n_classes: int, stem: int
) -> dict[str, float]:
    """``params``, ``flops`` and ``intensity`` (FLOPs / (node bytes + 4 · params)) of ``build_model(spec, ...)``."""
    c, h, w = input_shape
    stride = 2 if h >= 32 else 1
    h, w = (h - 1) // stride + 1, (w - 1) // stride + 1  # 3x3 conv, padding 1
    hw = h * w
    t = _Tally()
    x = t.node(c * input_shape[1] * input_shape[2], ())  # the input placeholder
    x = t.conv_bn_relu(x, c, stem, hw, 3)
    width = stem
    for op_a, op_b, out_w in spec:
        a, b = _op(t, op_a, width, hw), _op(t, op_b, width, hw)
        x = t.node(a, (a, b), a)  # a + b
        x = t.conv_bn_relu(x, width, out_w, hw, 1)
        width = out_w
    x = t.node(width, (x,), x)  # adaptive average pool to 1x1
    x = t.node(width, (x,))  # flatten
    x = t.node(n_classes, (x,), 2 * n_classes * width + n_classes, width * n_classes + n_classes)
    t.node(n_classes, (x,))  # the output node
    params, flops = float(t.params), float(t.flops)
    nbytes = float(t.bytes) + BYTES_PER_ELEM * params
    return {"params": params, "flops": flops, "intensity": flops / nbytes if nbytes > 0 else 0.0}
