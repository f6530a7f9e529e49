"""Modules PyTorch eager runs as a few kernels: found in a module, written into its ONNX export, read back per node."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from mlsysopt.graph.importers.fused_modules import FUSED_KEY, fused_mask, fused_modules
from mlsysopt.graph.importers.onnx import export_onnx

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _ViT(nn.Module):
    """Patch embedding, two encoder layers, a self-attention outside them and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, 4)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.enc(self.patch(x).flatten(2).transpose(1, 2))
        return self.head(self.attn(t, t, t, need_weights=False)[0].mean(1))


def test_the_modules_pytorch_runs_as_a_few_kernels_are_found_outermost_first() -> None:
    vit = _ViT()
    assert fused_modules(vit) == ["enc.layers.0", "enc.layers.1", "attn"]  # not the attention inside each layer
    assert fused_modules(vit.enc.layers[0]) == [""]  # the module itself
    assert fused_modules(nn.Sequential(nn.Linear(4, 4), nn.ReLU())) == []


def test_the_export_names_them_and_only_their_nodes_are_marked(tmp_path: Path) -> None:
    vit = _ViT().eval()
    path = export_onnx(vit, (torch.randn(1, 3, 16, 16),), tmp_path / "vit.onnx", dynamic_batch=True)
    model = onnx.load(str(path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta[FUSED_KEY]) == ["enc.layers.0", "enc.layers.1", "attn"]
    mask = fused_mask(model)
    names = [n.name for n in model.graph.node]
    assert all(m == (n.startswith(("/enc/layers.", "/attn/"))) for n, m in zip(names, mask, strict=True))
    assert not any(m for n, m in zip(names, mask, strict=True) if n.startswith(("/patch/", "/head/")))
    assert mask.sum() > 100  # the export spells each layer out in many nodes


def test_a_file_without_the_note_or_with_a_foreign_value_marks_nothing(tmp_path: Path) -> None:
    plain = export_onnx(nn.Sequential(nn.Linear(4, 4)), (torch.randn(1, 4),), tmp_path / "mlp.onnx")
    model = onnx.load(str(plain))
    assert FUSED_KEY not in {p.key for p in model.metadata_props} and not fused_mask(model).any()
    model.metadata_props.add(key=FUSED_KEY, value="{not json")
    assert not fused_mask(model).any()
