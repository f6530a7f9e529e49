"""The graphs ``costmodel collect`` measures: the zoo, NAS-space CNNs and five families of generated CNNs.

A graph is a *spec* (a small JSON-able dict) that :func:`build` turns into ``(module in eval mode, example
inputs)`` deterministically, so a resumed collection rebuilds exactly the graph it measured. :func:`plan` draws
``count`` distinct specs from a seed, over the families in :data:`FAMILIES`:

* ``zoo``: the bundled ``cnn``, ``mobilenet`` and ``resnet`` at several batch sizes and image sizes;
* ``nas``: cells of the NAS CNN space (:func:`mlsysopt.models.cnn_cell.build_model`), 1-4 blocks of two ops
  (3x3/5x5/separable convolutions, pooling, identity) and a 1x1 projection; 40% on the digits space's own input
  (one 1 x 8 x 8 image), the rest on 3-channel images;
* ``vgg``: stages of conv-BN-ReLU (kernel 1, 3 or 5) and pooling, widths doubling;
* ``resnet``: basic or bottleneck residual blocks with strided 1x1 shortcuts;
* ``mobilenet``: inverted residuals (expansion 2-6, depthwise 3x3 or 5x5, ReLU6 or hardswish);
* ``inception``: modules of parallel 1x1 / 3x3 / 5x5 / pooling branches, concatenated.

Images are 3 x H x W with H = W in 16-64, batch 1-8; every spec is kept below :data:`MAX_MFLOPS` so one forward pass
takes milliseconds on a CPU core. A user's own model enters as ``{"family": "source", "source": "file.py:factory"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt import zoo
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.importers.source import resolve_source
from mlsysopt.models.cnn_cell import OPS, build_model

FAMILIES: tuple[str, ...] = ("zoo", "nas", "vgg", "resnet", "mobilenet", "inception")
#: Generated graphs stay below this many million FLOPs per forward pass (a few ms on one core).
MAX_MFLOPS = 120.0
SIZES = (16, 24, 32, 48, 64)
BATCHES = (1, 1, 2, 4, 8)


def spec_name(spec: dict[str, Any]) -> str:
    """A stable file-name stem for ``spec``: family plus a short hash of the whole spec."""
    digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    return f"{spec['family']}_{digest}"


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] = nn.ReLU) -> list:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return layers + ([act()] if act is not None else [])


class _Residual(nn.Module):
    """``act(body(x) + shortcut(x))``: basic or bottleneck body, identity or strided 1x1 shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        if bottleneck:
            mid = max(4, cout // 4)
            body = [*_conv_bn(cin, mid, 1), *_conv_bn(mid, mid, 3, stride), *_conv_bn(mid, cout, 1, act=None)]
        else:
            body = [*_conv_bn(cin, cout, 3, stride), *_conv_bn(cout, cout, 3, act=None)]
        self.body = nn.Sequential(*body)
        self.short = (nn.Sequential(*_conv_bn(cin, cout, 1, stride, act=None)) if stride != 1 or cin != cout
                      else nn.Identity())  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The residual sum, then ReLU."""
        return torch.relu(self.body(x) + self.short(x))


class _Inverted(nn.Module):
    """MobileNet-v2 inverted residual: 1x1 expand, depthwise k x k, 1x1 project (+ identity when shapes match)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, k: int, act: type[nn.Module]) -> None:
        super().__init__()
        hid = cin * expand
        layers = [*_conv_bn(cin, hid, 1, act=act)] if expand > 1 else []
        layers += [*_conv_bn(hid, hid, k, stride, groups=hid, act=act), *_conv_bn(hid, cout, 1, act=None)]
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block (plus the identity when it is residual)."""
        y = self.body(x)
        return x + y if self.res else y


class _InceptionModule(nn.Module):
    """Parallel branches on one input, concatenated on channels."""

    def __init__(self, cin: int, widths: list[int], pool: bool) -> None:
        super().__init__()
        w1, w3, w5 = widths
        self.b1 = nn.Sequential(*_conv_bn(cin, w1, 1))
        self.b3 = nn.Sequential(*_conv_bn(cin, max(4, w3 // 2), 1), *_conv_bn(max(4, w3 // 2), w3, 3))
        self.b5 = nn.Sequential(*_conv_bn(cin, max(4, w5 // 2), 1), *_conv_bn(max(4, w5 // 2), w5, 5))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), *_conv_bn(cin, w1, 1)) if pool else None
        self.out_channels = w1 + w3 + w5 + (w1 if pool else 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Every branch on ``x``, concatenated."""
        parts = [self.b1(x), self.b3(x), self.b5(x)] + ([self.bp(x)] if self.bp is not None else [])
        return torch.cat(parts, dim=1)


def _head(c: int) -> list[nn.Module]:
    return [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]


def _vgg(p: dict[str, Any]) -> nn.Module:
    layers: list[nn.Module] = []
    cin, w = 3, p["width"]
    for s in range(p["stages"]):
        for _ in range(p["convs"][s]):
            layers += _conv_bn(cin, w, p["kernel"][s])
            cin = w
        layers.append(nn.MaxPool2d(2) if p["pool"] == "max" else nn.AvgPool2d(2))
        w = min(256, w * 2)
    return nn.Sequential(*layers, *_head(cin))


def _resnet(p: dict[str, Any]) -> nn.Module:
    layers: list[nn.Module] = [*_conv_bn(3, p["width"], 3)]
    cin, w = p["width"], p["width"]
    for s in range(p["stages"]):
        for b in range(p["blocks"][s]):
            layers.append(_Residual(cin, w, 2 if (b == 0 and s > 0) else 1, p["bottleneck"]))
            cin = w
        w = min(256, w * 2)
    return nn.Sequential(*layers, *_head(cin))


def _mobilenet(p: dict[str, Any]) -> nn.Module:
    act = nn.Hardswish if p["act"] == "hardswish" else nn.ReLU6
    layers: list[nn.Module] = [*_conv_bn(3, p["width"], 3, 2 if p["size"] >= 32 else 1, act=act)]
    cin = p["width"]
    for s, (cout, n) in enumerate(zip(p["widths"], p["blocks"], strict=True)):
        for b in range(n):
            layers.append(_Inverted(cin, cout, 2 if (b == 0 and s > 0) else 1, p["expand"], p["kernel"][s], act))
            cin = cout
    return nn.Sequential(*layers, *_conv_bn(cin, 4 * cin, 1, act=act), *_head(4 * cin))


def _inception(p: dict[str, Any]) -> nn.Module:
    layers: list[nn.Module] = [*_conv_bn(3, p["width"], 3)]
    cin = p["width"]
    for m, widths in enumerate(p["modules"]):
        mod = _InceptionModule(cin, widths, p["pool"][m])
        layers.append(mod)
        cin = mod.out_channels
        if m % 2 == 1:
            layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, *_head(cin))


def _nas(p: dict[str, Any]) -> nn.Module:

    return build_model([tuple(b) for b in p["blocks"]], (p.get("channels", 3), p["size"], p["size"]), 10, p["stem"])


_BUILDERS: dict[str, Callable[[dict[str, Any]], nn.Module]] = {
    "vgg": _vgg, "resnet": _resnet, "mobilenet": _mobilenet, "inception": _inception, "nas": _nas,
}  # fmt: skip


def build(spec: dict[str, Any]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``(module in eval mode, example inputs)`` of a spec (weights and inputs seeded by the spec's hash)."""
    seed = int(hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8], 16)
    torch.manual_seed(seed)
    family = spec.get("family")
    if family == "source":
        module, inputs = resolve_source(spec["source"]).pytorch(tuple(spec["input_shape"]) if spec.get(
            "input_shape") else None)  # fmt: skip
        return module.eval(), tuple(inputs)
    if family == "zoo":
        module, _ = zoo.get(spec["model"])
    elif family in _BUILDERS:
        module = _BUILDERS[family](spec)
    else:
        raise InvalidOption(f"unknown graph family '{family}' (choose from: {', '.join(FAMILIES)}, source)")
    size, batch = int(spec["size"]), int(spec["batch"])
    return module.eval(), (torch.randn(batch, int(spec.get("channels", 3)), size, size),)


def _draw(family: str, rng: np.random.Generator) -> dict[str, Any]:
    """One random spec of ``family`` (sizes only; :func:`plan` checks its FLOPs)."""
    ch = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    p: dict[str, Any] = {"family": family, "size": int(ch(SIZES)), "batch": int(ch(BATCHES))}
    if family == "zoo":
        p["model"] = ch(("cnn", "mobilenet", "resnet"))
        p["size"] = int(ch((16, 24, 32))) if p["model"] == "resnet" else p["size"]
    elif family == "vgg":
        stages = int(rng.integers(2, 5))
        p |= {"stages": stages, "width": int(ch((8, 12, 16, 24, 32))), "pool": ch(("max", "avg")),
              "convs": [int(rng.integers(1, 4)) for _ in range(stages)],
              "kernel": [int(ch((1, 3, 3, 5))) for _ in range(stages)]}  # fmt: skip
    elif family == "resnet":
        stages = int(rng.integers(2, 5))
        p |= {"stages": stages, "width": int(ch((8, 16, 24, 32))), "bottleneck": bool(rng.random() < 0.4),
              "blocks": [int(rng.integers(1, 3)) for _ in range(stages)]}  # fmt: skip
    elif family == "mobilenet":
        stages = int(rng.integers(2, 5))
        widths = sorted(int(ch((8, 12, 16, 24, 32, 48, 64))) for _ in range(stages))
        p |= {"width": int(ch((8, 16, 24))), "widths": widths, "expand": int(ch((2, 3, 4, 6))),
              "blocks": [int(rng.integers(1, 3)) for _ in range(stages)], "act": ch(("relu6", "hardswish")),
              "kernel": [int(ch((3, 3, 5))) for _ in range(stages)]}  # fmt: skip
    elif family == "inception":
        mods = int(rng.integers(1, 5))
        p |= {"width": int(ch((8, 16, 24))), "pool": [bool(rng.random() < 0.5) for _ in range(mods)],
              "modules": [[int(ch((4, 8, 16, 24))) for _ in range(3)] for _ in range(mods)]}  # fmt: skip
    elif family == "nas":
        blocks = int(rng.integers(1, 5))
        if rng.random() < 0.4:  # the NAS digits space's own input: one 8x8 grey image
            p |= {"channels": 1, "size": 8, "batch": 1}
        p |= {"stem": int(ch((8, 16, 32))),
              "blocks": [[ch(OPS), ch(OPS), int(ch((8, 16, 32, 64)))] for _ in range(blocks)]}  # fmt: skip
    return p


def draw_distinct(count: int, seed: int, families: tuple[str, ...],
                  draw: Callable[[str, np.random.Generator], dict[str, Any]],
                  ok: Callable[[dict[str, Any]], bool] = lambda _spec: True, what: str = "graphs",
                  max_misses: int = 200) -> list[dict[str, Any]]:  # fmt: skip
    """``count`` distinct specs drawn round-robin over ``families`` from ``seed`` with ``draw(family, rng)``, each
    accepted by ``ok``; a family that fails ``max_misses`` draws in a row is exhausted.

    Raises:
        InvalidOption: If every family is exhausted before ``count`` specs.
    """
    rng = np.random.default_rng(seed)
    specs: list[dict[str, Any]] = []
    seen: set[str] = set()
    misses = dict.fromkeys(families, 0)  # failed draws in a row
    turn = 0
    while len(specs) < count:
        live = [f for f in families if misses[f] < max_misses]
        if not live:
            raise InvalidOption(f"could not draw {count} distinct {what} from families {', '.join(families)} "
                                f"(drew {len(specs)})")  # fmt: skip
        family = live[turn % len(live)]
        spec = draw(family, rng)
        name = spec_name(spec)
        if name in seen or not ok(spec):
            misses[family] += 1
            continue
        misses[family] = 0
        turn += 1
        seen.add(name)
        specs.append(spec)
    return specs


def plan(count: int, seed: int, families: tuple[str, ...] = FAMILIES,
         mflops: Callable[[dict[str, Any]], float] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """``count`` distinct specs drawn round-robin over ``families`` from ``seed`` (each below MAX_MFLOPS when
    ``mflops(spec)`` is given)."""
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise InvalidOption(f"unknown graph family '{bad[0]}' (choose from: {', '.join(FAMILIES)})")
    ok = (lambda spec: True) if mflops is None else (lambda spec: mflops(spec) <= MAX_MFLOPS)
    return draw_distinct(count, seed, families, _draw, ok)
