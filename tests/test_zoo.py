"""The built-in model zoo: factories, lookup errors, sizes that stay small but realistic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mlsysopt import zoo
from mlsysopt.errors import MlsysoptError


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_factory_returns_eval_module_and_inputs(name: str) -> None:
    module, inputs = zoo.get(name)
    assert isinstance(module, nn.Module) and not module.training
    assert isinstance(inputs, tuple) and all(isinstance(t, torch.Tensor) for t in inputs)
    with torch.no_grad():
        out = module(*inputs)
    assert out.shape[0] == 1 and torch.isfinite(out).all()
    n_nodes = len(torch.fx.symbolic_trace(module).graph.nodes)
    assert 30 <= n_nodes <= 200, n_nodes


def test_models_have_their_signature_layers() -> None:
    cnn, (img,) = zoo.get("cnn")
    assert img.shape == (1, 3, 32, 32)
    assert any(isinstance(m, nn.Conv2d) for m in cnn.modules())
    assert any(isinstance(m, nn.MaxPool2d) for m in cnn.modules())
    mob, _ = zoo.get("mobilenet")
    assert any(isinstance(m, nn.Conv2d) and m.groups == m.in_channels > 1 for m in mob.modules())
    assert any(isinstance(m, (nn.Hardswish, nn.ReLU6)) for m in mob.modules())
    tr, (tokens,) = zoo.get("transformer")
    assert tokens.dtype == torch.long and tokens.shape == (1, 32)
    assert any(isinstance(m, nn.LayerNorm) for m in tr.modules())
    assert tr(tokens).shape == (1, 32, 1000)
    res, (img,) = zoo.get("resnet")
    assert img.shape == (1, 3, 64, 64)
    assert sum(isinstance(m, zoo.BasicBlock) for m in res.modules()) == 4


def test_factories_are_deterministic() -> None:
    a, _ = zoo.get("mobilenet")
    b, _ = zoo.get("MobileNet")
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_unknown_name_lists_available() -> None:
    with pytest.raises(MlsysoptError, match="cnn, mobilenet, resnet, transformer"):
        zoo.get("resnet9000")
