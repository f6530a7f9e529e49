"""A small built-in model zoo in plain PyTorch: ``cnn``, ``mobilenet`` and ``transformer``.

Every factory returns ``(module.eval(), example_inputs)``; the models are small enough to trace in well
under a second yet have the structure (residuals, depthwise convs, attention) of their full-size kin.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from mlsysopt.errors import MlsysoptError

Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class SmallCNN(nn.Module):
    """A VGG-style conv net for 3x32x32 images with one residual block and a two-layer classifier."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(*_conv_bn(3, w), nn.ReLU(), nn.MaxPool2d(2))
        self.block1 = nn.Sequential(*_conv_bn(w, 2 * w), nn.ReLU(), nn.MaxPool2d(2))
        self.res = nn.Sequential(*_conv_bn(2 * w, 2 * w), nn.ReLU(), *_conv_bn(2 * w, 2 * w))
        self.block2 = nn.Sequential(
            *_conv_bn(2 * w, 4 * w), nn.ReLU(), *_conv_bn(4 * w, 4 * w), nn.ReLU(), nn.MaxPool2d(2)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * w, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        x = self.block1(self.stem(x))
        x = F.relu(x + self.res(x))
        return self.head(self.pool(self.block2(x)))


class InvertedResidual(nn.Module):
    """MobileNet-v2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection, residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, act: type[nn.Module]) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [*_conv_bn(cin, hidden, 1), act()]
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), act(), *_conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block (plus the identity when it is a residual block)."""
        y = self.body(x)
        return x + y if self.use_res else y


class MobileNetV2Small(nn.Module):
    """A narrow MobileNet-v2 for 3x32x32 images: hardswish stem, 7 inverted residual blocks, relu6 inside."""

    # (expand, out channels, repeats, first stride)
    SETTINGS = ((1, 8, 1, 1), (4, 16, 2, 2), (4, 24, 2, 2), (4, 32, 2, 2))

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [*_conv_bn(3, 16, 3, 1), nn.Hardswish()]
        cin = 16
        for expand, cout, repeats, stride in self.SETTINGS:
            for r in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if r == 0 else 1, expand, nn.ReLU6))
                cin = cout
        layers += [*_conv_bn(cin, 128, 1), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class SelfAttention(nn.Module):
    """Multi-head self-attention: fused QKV projection, scaled_dot_product_attention, output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend over the sequence dimension of ``x`` (batch, seq, dim)."""
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    """Pre-norm transformer encoder layer: x + attn(ln(x)), then x + mlp(ln(x)) with a GELU MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One encoder layer."""
        x = x + self.attn(self.ln1(x))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyTransformer(nn.Module):
    """A hand-written transformer encoder over token ids (1, seq) with a learned position embedding."""

    def __init__(self, vocab: int = 1000, dim: int = 64, heads: int = 4, layers: int = 2, max_len: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, max_len, dim) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits (batch, seq, vocab) for token ids (batch, seq)."""
        x = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv-bn layers plus the identity (or a strided 1x1 projection)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, stride), nn.ReLU(), *_conv_bn(cout, cout, 3))
        self.short = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """relu(body(x) + shortcut(x))."""
        return F.relu(self.body(x) + self.short(x))


class ResNet10(nn.Module):
    """A ResNet-10-like net for 3x64x64 images: stem, four stages of one basic block (32-256 channels)."""

    def __init__(self, num_classes: int = 100) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 32, 3, 1), nn.ReLU())
        widths = (32, 64, 128, 256)
        blocks, cin = [], 32
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A small conv net (conv/bn/relu/maxpool/linear) and one 3x32x32 image."""
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(1, 3, 32, 32),)


def mobilenet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A MobileNet-v2-like net (inverted residuals, depthwise convs, relu6/hardswish) and a 3x32x32 image."""
    torch.manual_seed(0)
    return MobileNetV2Small().eval(), (torch.randn(1, 3, 32, 32),)


def transformer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A 2-layer transformer encoder (dim 64, 4 heads) and one sequence of 32 token ids."""
    torch.manual_seed(0)
    return TinyTransformer().eval(), (torch.randint(0, 1000, (1, 32)),)


def resnet() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A ResNet-10-like net and one 3x64x64 image: a few ms per image on one core (the serving benchmark's model)."""
    torch.manual_seed(0)
    return ResNet10().eval(), (torch.randn(1, 3, 64, 64),)


ZOO: dict[str, Factory] = {"cnn": cnn, "mobilenet": mobilenet, "transformer": transformer, "resnet": resnet}


def get(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build the zoo model ``name``: ``(module in eval mode, example inputs)``."""
    key = name.strip().lower()
    if key not in ZOO:
        raise MlsysoptError(f"unknown zoo model '{name}' (available: {', '.join(sorted(ZOO))})")
    return ZOO[key]()
