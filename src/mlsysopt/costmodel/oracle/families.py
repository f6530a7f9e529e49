"""The models the latency collection times: eleven families of generated networks, CNNs to sequence models.

A model is a *spec* (a small JSON-able dict) that :func:`build` turns into ``(module in eval mode, one example input
at batch 1)`` deterministically, so a resumed collection rebuilds exactly the model it timed. :func:`plan` draws
``count`` distinct specs from a seed, round-robin over :data:`FAMILIES`:

* the CNN families of ``costmodel collect`` (:mod:`mlsysopt.costmodel.collection.families`): ``vgg``,
  ``resnet``, ``mobilenet`` (inverted residuals, depthwise), ``inception`` and ``nas`` (cells of the NAS CNN space);
* ``separable``: Xception-style stacks of depthwise + pointwise convolutions with residuals;
* ``vit``: ViT-style transformers (patch embedding, pre-norm attention and MLP blocks written out op by op, class
  token);
* ``encoder``: the same ViTs built from ``nn.TransformerEncoder`` (post- or pre-norm, ReLU or GELU, an even number
  of heads), which PyTorch eager runs as a few kernels per layer and ONNX Runtime as the ~130 exported ops
  (:mod:`mlsysopt.graph.importers.fused_modules`);
* ``mlp``: fully connected networks on flat features (ReLU or GELU, optional LayerNorm);
* ``gru`` and ``lstm``: recurrent sequence models (1-2 layers, optionally bidirectional) with a linear head.

Every spec stays below :data:`MAX_MFLOPS` at batch 1, so that batch 8 runs in tens of milliseconds on one core.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.costmodel.collection import families as cnn
from mlsysopt.errors import InvalidOption

FAMILIES: tuple[str, ...] = ("vgg", "resnet", "mobilenet", "inception", "nas", "separable", "vit", "encoder", "mlp",
                             "gru", "lstm")  # fmt: skip
#: A generated model stays below this many million FLOPs per sample.
MAX_MFLOPS = 40.0
#: ... and above this many (a model that takes microseconds times the runtime's overhead, not the model).
MIN_MFLOPS = 0.02
#: Outputs of every generated model's linear head.
CLASSES = 10


def spec_name(spec: dict[str, Any]) -> str:
    """A stable name for ``spec``: family plus a short hash of the whole spec."""
    return cnn.spec_name(spec)


class _Separable(nn.Module):
    """Depthwise k x k then pointwise 1 x 1, each with BN (+ ReLU), and a residual when shapes match."""

    def __init__(self, cin: int, cout: int, k: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*cnn._conv_bn(cin, cin, k, stride, groups=cin), *cnn._conv_bn(cin, cout, 1))
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block, plus the identity when it is residual."""
        y = self.body(x)
        return x + y if self.res else y


class _Block(nn.Module):
    """A pre-norm transformer block: multi-head self-attention and an MLP, each residual."""

    def __init__(self, dim: int, heads: int, ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, ratio * dim), nn.GELU(), nn.Linear(ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention then MLP on ``x`` of shape (batch, tokens, dim)."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class _ViT(nn.Module):
    """A ViT: patch embedding, class token, position embedding, :meth:`blocks_of` ``p``, norm and linear head."""

    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        dim, patch = p["dim"], p["patch"]
        self.embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (p["size"] // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = self.blocks_of(p)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, CLASSES)

    @staticmethod
    def blocks_of(p: dict[str, Any]) -> nn.Module:
        """The transformer blocks, written out op by op (:class:`_Block`)."""
        return nn.Sequential(*[_Block(p["dim"], p["heads"], p["ratio"]) for _ in range(p["depth"])])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits of images ``x`` (batch, 3, size, size)."""
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class _Encoder(_ViT):
    """The same ViT with ``nn.TransformerEncoderLayer`` blocks (PyTorch runs each as a few kernels)."""

    @staticmethod
    def blocks_of(p: dict[str, Any]) -> nn.Module:
        """The blocks as ``nn.TransformerEncoder`` (post- or pre-norm, ReLU or GELU)."""
        dim = p["dim"]
        layer = nn.TransformerEncoderLayer(dim, p["heads"], p["ratio"] * dim, dropout=0.0, activation=p["act"],
                                           batch_first=True, norm_first=p["norm_first"])  # fmt: skip
        return nn.TransformerEncoder(layer, p["depth"], enable_nested_tensor=False)


class _Recurrent(nn.Module):
    def __init__(self, p: dict[str, Any]) -> None:
        super().__init__()
        rnn = nn.GRU if p["family"] == "gru" else nn.LSTM
        self.rnn = rnn(p["features"], p["hidden"], p["layers"], batch_first=True, bidirectional=p["bidirectional"])
        self.head = nn.Linear(p["hidden"] * (2 if p["bidirectional"] else 1), CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits from the last step of sequences ``x`` (batch, steps, features)."""
        return self.head(self.rnn(x)[0][:, -1])


def _separable(p: dict[str, Any]) -> nn.Module:
    layers: list[nn.Module] = [*cnn._conv_bn(3, p["width"], 3, 2 if p["size"] >= 32 else 1)]
    cin = p["width"]
    for s, (cout, n) in enumerate(zip(p["widths"], p["blocks"], strict=True)):
        for b in range(n):
            layers.append(_Separable(cin, cout, p["kernel"][s], 2 if (b == 0 and s > 0) else 1))
            cin = cout
    return nn.Sequential(*layers, *cnn._head(cin))


def _mlp(p: dict[str, Any]) -> nn.Module:
    act = nn.GELU if p["act"] == "gelu" else nn.ReLU
    layers: list[nn.Module] = []
    cin = p["features"]
    for w in p["widths"]:
        layers += [nn.Linear(cin, w), *([nn.LayerNorm(w)] if p["norm"] else []), act()]
        cin = w
    return nn.Sequential(*layers, nn.Linear(cin, CLASSES))


_BUILDERS: dict[str, Callable[[dict[str, Any]], nn.Module]] = {
    "separable": _separable, "vit": _ViT, "encoder": _Encoder, "mlp": _mlp, "gru": _Recurrent, "lstm": _Recurrent,
}  # fmt: skip


def example_input(spec: dict[str, Any], batch: int = 1) -> torch.Tensor:
    """A seeded input of ``spec`` at ``batch``: images (batch, C, H, W), features (batch, F) or sequences
    (batch, steps, F)."""
    g = torch.Generator().manual_seed(0)
    family = spec["family"]
    if family == "mlp":
        return torch.randn(batch, spec["features"], generator=g)
    if family in ("gru", "lstm"):
        return torch.randn(batch, spec["steps"], spec["features"], generator=g)
    size = int(spec["size"])
    return torch.randn(batch, int(spec.get("channels", 3)), size, size, generator=g)


def build(spec: dict[str, Any]) -> tuple[nn.Module, torch.Tensor]:
    """``(module in eval mode, example input at batch 1)`` of ``spec`` (weights seeded by the spec's hash).

    Raises:
        InvalidOption: If the family is unknown.
    """
    family = spec.get("family")
    seed = int(hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8], 16)
    torch.manual_seed(seed)
    if family in _BUILDERS:
        module = _BUILDERS[family](spec)
    elif family in FAMILIES:
        module, _ = cnn.build(spec | {"batch": 1})
    else:
        raise InvalidOption(f"unknown model family '{family}' (choose from: {', '.join(FAMILIES)})")
    return module.eval(), example_input(spec)


def _draw(family: str, rng: np.random.Generator) -> dict[str, Any]:
    ch = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    if family in ("vgg", "resnet", "mobilenet", "inception", "nas"):
        spec = cnn._draw(family, rng)
        spec.pop("batch", None)
        return spec
    p: dict[str, Any] = {"family": family}
    if family == "separable":
        stages = int(rng.integers(2, 5))
        p |= {"size": int(ch((16, 24, 32, 48, 64))), "width": int(ch((8, 16, 24, 32))),
              "widths": sorted(int(ch((16, 24, 32, 48, 64, 96, 128))) for _ in range(stages)),
              "blocks": [int(rng.integers(1, 4)) for _ in range(stages)],
              "kernel": [int(ch((3, 3, 5, 7))) for _ in range(stages)]}  # fmt: skip
    elif family in ("vit", "encoder"):
        heads = int(ch((1, 2, 4) if family == "vit" else (2, 4)))  # PyTorch's fast path needs an even count
        p |= {"size": int(ch((16, 24, 32, 48))), "patch": int(ch((4, 8))), "heads": heads,
              "dim": heads * int(ch((8, 16, 24, 32, 48))), "depth": int(rng.integers(1, 7)),
              "ratio": int(ch((2, 4)))}  # fmt: skip
        if family == "encoder":
            p |= {"act": ch(("relu", "gelu")), "norm_first": bool(rng.random() < 0.5)}
    elif family == "mlp":
        layers = int(rng.integers(1, 7))
        p |= {"features": int(ch((16, 32, 64, 128, 256, 512, 784, 1024))), "act": ch(("relu", "gelu")),
              "widths": [int(ch((32, 64, 128, 256, 512, 1024, 2048))) for _ in range(layers)],
              "norm": bool(rng.random() < 0.3)}  # fmt: skip
    elif family in ("gru", "lstm"):
        p |= {"features": int(ch((8, 16, 32, 64, 128))), "hidden": int(ch((16, 32, 64, 128, 256))),
              "steps": int(ch((4, 8, 16, 32, 64))), "layers": int(ch((1, 1, 2))),
              "bidirectional": bool(rng.random() < 0.3)}  # fmt: skip
    return p


def _recurrent_flops(gates: int, steps: int, features: int, hidden: int, layers: int, dirs: int) -> float:
    """FLOPs of one sequence through a GRU (3 gates) or LSTM (4 gates) of ``layers`` layers and ``dirs``
    directions: the gates' input and hidden matrix products of every step."""
    total = 0.0
    for layer in range(layers):
        fin = features if layer == 0 else hidden * dirs
        total += 2.0 * gates * steps * dirs * (fin * hidden + hidden * hidden)
    return total


def mflops(spec: dict[str, Any]) -> float:
    """Million FLOPs of one sample through the convolutions, linear layers, attention and recurrent cells
    (counted by hooks on the meta device: shapes only, nothing computed; recurrent models and MLPs in closed form,
    the meta device steps through recurrent cells one op at a time, ~0.3 s a model)."""
    if spec.get("family") in ("gru", "lstm"):
        dirs = 2 if spec["bidirectional"] else 1
        gates = 3 if spec["family"] == "gru" else 4
        rnn = _recurrent_flops(gates, spec["steps"], spec["features"], spec["hidden"], spec["layers"], dirs)
        return (rnn + 2.0 * CLASSES * spec["hidden"] * dirs) / 1e6  # + the linear head on the last step
    if spec.get("family") == "mlp":  # closed form too: one row through the linear layers (the meta device's
        total, cin = 0.0, spec["features"]  # matrix products import torch._dynamo, ~2 s, for this sum)
        for w in [*spec["widths"], CLASSES]:
            total += 2.0 * w * cin
            cin = w
        return total / 1e6
    with torch.device("meta"):
        module, x = build(spec)
    total = [0.0]

    def count(mod: nn.Module, inp: Any, out: Any) -> None:
        if isinstance(mod, nn.Conv2d):
            total[0] += 2.0 * out.numel() * mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        elif isinstance(mod, nn.Linear):
            total[0] += 2.0 * out.numel() * mod.in_features
        elif isinstance(mod, _Block):
            b, n, d = inp[0].shape
            total[0] += 4.0 * b * n * n * d
        elif isinstance(mod, nn.MultiheadAttention):  # its projections are functional calls, not nn.Linear hooks
            b, n, d = inp[0].shape
            total[0] += 4.0 * b * n * n * d + 8.0 * b * n * d * d
        elif isinstance(mod, (nn.GRU, nn.LSTM)):
            b, t, f = inp[0].shape
            gates, dirs = (3 if isinstance(mod, nn.GRU) else 4), (2 if mod.bidirectional else 1)
            total[0] += b * _recurrent_flops(gates, t, f, mod.hidden_size, mod.num_layers, dirs)

    kinds = (nn.Conv2d, nn.Linear, _Block, nn.MultiheadAttention, nn.GRU, nn.LSTM)
    hooks = [m.register_forward_hook(count) for m in module.modules() if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for h in hooks:
            h.remove()
    return total[0] / 1e6


def plan(count: int, seed: int, families: tuple[str, ...] = FAMILIES) -> list[dict[str, Any]]:
    """``count`` distinct specs drawn round-robin over ``families`` from ``seed``, each within
    [:data:`MIN_MFLOPS`, :data:`MAX_MFLOPS`] per sample.

    Raises:
        InvalidOption: If a family is unknown or cannot give that many distinct specs.
    """
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise InvalidOption(f"unknown model family '{bad[0]}' (choose from: {', '.join(FAMILIES)})")
    return cnn.draw_distinct(count, seed, families, _draw, lambda spec: MIN_MFLOPS <= mflops(spec) <= MAX_MFLOPS,
                             "models", 500)  # fmt: skip
