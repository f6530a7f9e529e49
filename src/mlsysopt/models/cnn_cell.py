"""The CNN space's model as plain PyTorch modules, and rebuilding one from an exported architecture JSON.

``build_model(spec, input_shape, n_classes, stem)`` is what :class:`~mlsysopt.nas.spaces.cnn.CnnSpace` trains:
a stem (3x3 conv, BN, ReLU; stride 2 for images of 32 px or more), one block per ``(op_a, op_b, width)`` and a
global-average-pool + linear head, as one ``nn.Sequential`` (state-dict keys ``0.weight``, ``3.a.0.weight``, ...).
:func:`model_from_architecture` rebuilds it from the ``architecture.json`` that ``mlsysopt nas export`` writes,
checking every key first, so the exported ``model_state_dict.pt`` loads into it with ``strict=True``. This module
imports only torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlsysopt.errors import InvalidArchitecture
from mlsysopt.io import read_json

OPS: tuple[str, ...] = ("conv3x3", "conv5x5", "sepconv3x3", "maxpool3x3", "avgpool3x3", "identity")
#: ``format`` of the architecture JSON of a CNN-space model.
ARCHITECTURE_FORMAT = "mlsysopt.nas.cnn/1"
MAX_ARCH_BLOCKS = 10_000  # a JSON with more blocks than this is refused before any module is built
MAX_ARCH_WIDTH = 65_536


def _make_op(name: str, channels: int) -> nn.Module:
    """The module for op ``name`` on ``channels`` channels (shape-preserving)."""
    c = channels
    if name in ("conv3x3", "conv5x5"):
        k = 3 if name == "conv3x3" else 5
        return nn.Sequential(nn.Conv2d(c, c, k, padding=k // 2, bias=False), nn.BatchNorm2d(c), nn.ReLU())
    if name == "sepconv3x3":
        return nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False),
            nn.Conv2d(c, c, 1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
        )
    if name == "maxpool3x3":
        return nn.MaxPool2d(3, stride=1, padding=1)
    if name == "avgpool3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    if name == "identity":
        return nn.Identity()
    raise InvalidArchitecture(f"unknown op '{name}' (choose from: {', '.join(OPS)})")


class _Block(nn.Module):
    """``relu(bn(conv1x1(op_a(x) + op_b(x))))`` to ``width`` channels."""

    def __init__(self, op_a: str, op_b: str, c_in: int, width: int) -> None:
        super().__init__()
        self.a, self.b = _make_op(op_a, c_in), _make_op(op_b, c_in)
        self.proj = nn.Sequential(nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Both ops on the block input, added, then projected."""
        return self.proj(self.a(x) + self.b(x))


def build_model(
    spec: list[tuple[str, str, int]], input_shape: tuple[int, int, int], n_classes: int, stem: int
) -> nn.Module:
    """The ``nn.Module`` for blocks ``[(op_a, op_b, width), ...]`` on images of ``input_shape``."""
    c, h, _ = input_shape
    layers: list[nn.Module] = [
        nn.Conv2d(c, stem, 3, stride=2 if h >= 32 else 1, padding=1, bias=False),
        nn.BatchNorm2d(stem),
        nn.ReLU(),
    ]
    width = stem
    for op_a, op_b, w in spec:
        layers.append(_Block(op_a, op_b, width, w))
        width = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, n_classes)]
    return nn.Sequential(*layers)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 512) -> float:
    """Top-1 accuracy of ``model`` (eval mode, no gradients) on ``x``, ``y`` in batches of ``batch``."""
    model.eval()
    with torch.no_grad():
        hits = [(model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum() for i in range(0, len(x), batch)]
        correct = int(sum(int(h) for h in hits))
    return correct / max(len(x), 1)


def _int(d: dict[str, Any], key: str, where: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArchitecture(f"{where}: '{key}' must be an integer in {lo}..{hi:,}, got {v!r}")
    return v


def check_architecture(arch: Any, where: str = "architecture") -> dict[str, Any]:
    """The architecture dict, checked key by key (``format``, ``input_shape``, ``n_classes``, ``stem_width``,
    ``blocks``); InvalidArchitecture naming ``where`` and the key otherwise."""
    if not isinstance(arch, dict):
        raise InvalidArchitecture(f"{where}: expected a JSON object, got {type(arch).__name__}")
    if arch.get("format") != ARCHITECTURE_FORMAT:
        raise InvalidArchitecture(f"{where}: 'format' must be {ARCHITECTURE_FORMAT!r}, got {arch.get('format')!r}")
    shape = arch.get("input_shape")
    if not (isinstance(shape, list) and len(shape) == 3 and all(type(v) is int and 0 < v <= 65_536 for v in shape)):
        raise InvalidArchitecture(f"{where}: 'input_shape' must be [channels, height, width], got {shape!r}")
    _int(arch, "n_classes", where, 1, 1_000_000)
    _int(arch, "stem_width", where, 1, MAX_ARCH_WIDTH)
    blocks = arch.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= MAX_ARCH_BLOCKS:
        raise InvalidArchitecture(f"{where}: 'blocks' must be a list of 1..{MAX_ARCH_BLOCKS:,} blocks")
    for i, b in enumerate(blocks):
        if not isinstance(b, dict):
            raise InvalidArchitecture(f"{where}: blocks[{i}] must be an object with op_a, op_b and width")
        for key in ("op_a", "op_b"):
            if b.get(key) not in OPS:
                raise InvalidArchitecture(
                    f"{where}: blocks[{i}].{key} must be one of {', '.join(OPS)}, got {b.get(key)!r}"
                )
        _int(b, "width", f"{where}: blocks[{i}]", 1, MAX_ARCH_WIDTH)
    return arch


def model_from_architecture(arch: dict[str, Any] | str | Path) -> nn.Module:
    """The untrained ``nn.Module`` an architecture JSON (a dict, or the path of ``architecture.json``) describes.

    Args:
        arch: the architecture (``mlsysopt nas export``'s ``architecture.json``, as a dict or its path).

    Returns:
        An ``nn.Sequential`` whose state-dict keys match the exported ``model_state_dict.pt`` (load it with
        ``strict=True``).

    Raises:
        InvalidArchitecture: a missing or malformed key, naming it and the file.
    """
    where = "architecture"
    if isinstance(arch, str | Path):
        where = str(arch)
        arch = read_json(Path(arch), InvalidArchitecture)
    a = check_architecture(arch, where)
    spec = [(b["op_a"], b["op_b"], b["width"]) for b in a["blocks"]]
    c, h, w = a["input_shape"]
    return build_model(spec, (c, h, w), a["n_classes"], a["stem_width"])
