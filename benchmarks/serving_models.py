"""Models a user would bring to ``mlsysopt serving`` as a ``file.py:factory`` source, and one plain ONNX file.

The serving benchmark measures a service profile of each here (``benchmarks/serving_profiles.py``): several sizes
and batch behaviours beside the zoo's. Every factory returns ``(module in eval mode, example inputs)``, as
``--model benchmarks/serving_models.py:NAME`` expects. :func:`gemm_stack_onnx` writes an ONNX file directly with
``onnx.helper`` (no PyTorch), as a model from another framework would arrive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlsysopt.zoo import EncoderLayer, SmallCNN


def mlp_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A 784-256-256-10 MLP (MNIST-sized): microseconds per row, so batching and dispatch dominate."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    return net.eval(), (torch.randn(1, 784),)


def mlp_wide() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """A 1024-2048-2048-1000 MLP (~8M parameters): one GEMV per layer at batch 1, GEMMs when batched."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 1000))
    return net.eval(), (torch.randn(1, 1024),)


def cnn_wide() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The zoo's small CNN at 3x its width (48 base channels): convolutions dominate, batching gains little."""
    torch.manual_seed(0)
    return SmallCNN(width=48).eval(), (torch.randn(1, 3, 32, 32),)


class TinyViT(nn.Module):
    """A small vision transformer for 3x32x32 images: 4x4 patches, 4 pre-norm encoder layers of width 96."""

    def __init__(self, dim: int = 96, layers: int = 4, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, 64, dim) * 0.02)
        self.layers = nn.Sequential(*(EncoderLayer(dim, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits for a batch of images."""
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.layers(x)).mean(dim=1))


def tiny_vit() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """:class:`TinyViT` and one image."""
    torch.manual_seed(0)
    return TinyViT().eval(), (torch.randn(1, 3, 32, 32),)


class WideDeep(nn.Module):
    """A recommendation ranker: 8 id features embedded (100k x 32 tables) and a 3-layer MLP over them."""

    def __init__(self, fields: int = 8, vocab: int = 100_000, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(fields * dim, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 1))  # fmt: skip

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """A click score per row of ids (batch, fields)."""
        return self.mlp(self.embed(ids).flatten(1))


def wide_deep() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """:class:`WideDeep` and one row of 8 ids."""
    torch.manual_seed(0)
    return WideDeep().eval(), (torch.randint(0, 100_000, (1, 8)),)


class GRUNet(nn.Module):
    """A one-layer GRU (32 -> 64) over 20 steps and a linear head: a sequence model as a user brings one."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits from the last step's hidden state."""
        y, _ = self.gru(x)
        return self.head(y[:, -1])


def gru() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """:class:`GRUNet` and one sequence of 20 steps."""
    torch.manual_seed(0)
    return GRUNet().eval(), (torch.randn(1, 20, 32),)


def gemm_stack_onnx(path: str | Path, width: int = 768, layers: int = 6) -> Path:
    """Write an ONNX file of ``layers`` x (MatMul width x width, Add bias, Relu), dynamic batch, with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for k in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(np.zeros(width, np.float32), f"b{k}")]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"]),
            helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]),
            helper.make_node("Relu", [f"a{k}"], [f"h{k}"]),
        ]
        prev = f"h{k}"
    graph = helper.make_graph(
        nodes,
        "gemm_stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnx.helper")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path
