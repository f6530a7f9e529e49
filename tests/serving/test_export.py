"""A PyTorch model made servable: exported with a dynamic batch axis, checked in ONNX Runtime, the other exporter
tried when one's file fails (a small ViT whose dynamo export fails at batch 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import InvalidModel
from mlsysopt.graph.importers.source import resolve_source
from mlsysopt.serving.export import export_served
from mlsysopt.serving.inputs import check_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_VIT = """
import torch
from torch import nn

class TinyViT(nn.Module):
    def __init__(self, dim=32, heads=4, patch=4, classes=10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.enc = nn.TransformerEncoderLayer(dim, heads, 64, batch_first=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], dim=1)
        t = t + self.attn(t, t, t, need_weights=False)[0]
        return self.head(self.enc(t).mean(1))

def tiny_vit():
    return TinyViT().eval(), (torch.randn(1, 3, 16, 16),)
"""


def test_a_vit_whose_dynamo_export_fails_at_batch_4_is_served_from_the_torchscript_export(tmp_path: Path) -> None:
    (tmp_path / "vit.py").write_text(TINY_VIT)
    src = resolve_source(f"{tmp_path / 'vit.py'}:tiny_vit")
    model, info = export_served(
        src, tmp_path, lambda m: check_model(m, 4, 1, 10.0, "--max-batch"), exporters=("dynamo", "torchscript")
    )
    assert info["exporter"] == "torchscript"
    why = info["failed"]["dynamo"]
    assert "fails at batch 4" in why and "op Reshape" in why and "{4,17,32}" in why
    out = model.session(1, 1, 0).run(None, model.make_batch(4))[0]
    assert out.shape == (4, 10) and np.isfinite(out).all()
    assert model.batchable and Path(info["path"]).name == "tiny_vit.onnx"


def test_an_unknown_exporter_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidModel, match="unknown ONNX exporter"):
        export_served(resolve_source("zoo:cnn"), tmp_path, lambda m: None, exporters=("tflite",))
