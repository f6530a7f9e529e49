"""torch.fx importer: exact FLOP formulas, params, bytes/edges, zoo models, trace failures, specs."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mlsysopt import zoo
from mlsysopt.errors import ImportFailed
from mlsysopt.graph.importers.source import from_spec
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.ir import CompGraph


def _only(g: CompGraph, op: str) -> int:
    """Id of the single node with op ``op``."""
    ids = [i for i, o in enumerate(g.ops) if o == op]
    assert len(ids) == 1, (op, g.ops)
    return ids[0]


def _flops(g: CompGraph, op: str) -> float:
    return float(g.feature("flops")[_only(g, op)])


@pytest.mark.parametrize("wrap", [True, False], ids=["call_module", "root"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_flops_and_params_exact(bias: bool, wrap: bool) -> None:
    lin = nn.Linear(8, 16, bias=bias)
    # A wrapped Linear is a call_module leaf; a root Linear traces into F.linear on get_attr weights.
    g = from_module(nn.Sequential(lin) if wrap else lin, (torch.randn(4, 5, 8),))
    batch = 4 * 5
    assert _flops(g, "linear") == 2 * 8 * 16 * batch + (16 * batch if bias else 0)
    n_params = sum(p.numel() for p in lin.parameters())
    assert g.feature("params").sum() == n_params
    if wrap:
        assert g.feature("params")[_only(g, "linear")] == n_params
    assert np.array_equal(g.compute, g.feature("flops"))


@pytest.mark.parametrize(("groups", "bias", "stride"), [(1, True, 1), (1, False, 2), (4, True, 2), (4, False, 1)])
@pytest.mark.parametrize("wrap", [True, False], ids=["call_module", "root"])
def test_conv2d_flops_exact(groups: int, bias: bool, stride: int, wrap: bool) -> None:
    n, cin, cout, k, h = 2, 8, 12, 3, 10
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=1, groups=groups, bias=bias)
    x = torch.randn(n, cin, h, h)
    hout, wout = conv(x).shape[-2:]
    g = from_module(nn.Sequential(conv) if wrap else conv, (x,))
    expected = 2 * cout * hout * wout * (cin // groups) * k * k * n + (cout * hout * wout * n if bias else 0)
    assert _flops(g, "conv") == expected
    assert g.feature("params").sum() == sum(p.numel() for p in conv.parameters())
    assert g.feature("out_elems")[_only(g, "conv")] == n * cout * hout * wout


class Functional(nn.Module):
    """Weights held as parameters and used through F.linear / F.conv2d (get_attr + call_function)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4, 3, 3))
        self.b = nn.Parameter(torch.randn(6))
        self.fc = nn.Parameter(torch.randn(5, 6 * 8 * 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(F.conv2d(x, self.w, self.b, padding=1))
        return F.linear(y.view(y.shape[0], -1), self.fc)


def test_functional_variants_match_formulas() -> None:
    m = Functional()
    g = from_module(m, (torch.randn(3, 4, 8, 8),))
    assert _flops(g, "conv") == 2 * 6 * 8 * 8 * 4 * 3 * 3 * 3 + 6 * 8 * 8 * 3
    assert _flops(g, "linear") == 2 * 3 * 5 * 6 * 8 * 8
    assert _flops(g, "relu") == 3 * 6 * 8 * 8
    assert _flops(g, "reshape") == 0
    # get_attr nodes own the parameters they fetch
    consts = [i for i, o in enumerate(g.ops) if o == "constant"]
    assert sorted(g.feature("params")[consts]) == sorted(p.numel() for p in m.parameters())
    assert g.feature("params").sum() == sum(p.numel() for p in m.parameters())


class Twice(nn.Module):
    """One Linear applied twice: its parameters must be counted once."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.fc(x)) + self.fc.weight.sum()


def test_shared_parameters_count_once() -> None:
    g = from_module(Twice(), (torch.randn(2, 6),))
    assert g.ops.count("linear") == 2
    assert g.feature("params").sum() == 6 * 6 + 6
    assert g.feature("flops")[[i for i, o in enumerate(g.ops) if o == "linear"]].tolist() == [2 * 2 * 36 + 12] * 2


class Mixed(nn.Module):
    """matmul, attention, norms, pooling, softmax, views and methods in one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.pool = nn.MaxPool2d(2)

    def forward(self, a: Tensor, b: Tensor, q: Tensor, img: Tensor) -> tuple[Tensor, ...]:
        mm = torch.matmul(a, b)
        att = F.scaled_dot_product_attention(q, q, q)
        normed = self.ln(att)
        sm = normed.softmax(-1)
        t = sm.permute(0, 2, 1, 3)
        pooled = self.pool(img)
        return mm, t + 1, pooled, torch.fliplr(img), img.flip(0)


def test_matmul_attention_norm_pool_softmax_flops() -> None:
    a, b = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6)
    q = torch.randn(1, 2, 8, 16)
    img = torch.randn(1, 3, 6, 6)
    g = from_module(Mixed(), (a, b, q, img), name="mixed")
    assert _flops(g, "matmul") == 2 * (2 * 3) * 4 * 6 * 5
    bhls = 1 * 2 * 8 * 8
    assert _flops(g, "attention") == 4 * bhls * 16 + 3 * bhls
    assert _flops(g, "layer_norm") == 5 * q.numel()
    assert _flops(g, "softmax") == 3 * q.numel()
    assert _flops(g, "transpose") == 0
    assert _flops(g, "add") == q.numel()
    assert _flops(g, "max_pool") == (3 * 3 * 3) * 4
    # unknown ops keep a readable name and extend the vocabulary
    assert "call_function:fliplr" in g.ops and "call_method:flip" in g.ops
    assert "call_function:fliplr" in g.vocab
    unknown = {"call_function:fliplr": 1, "call_method:flip": 1}
    assert g.meta == {"name": "mixed", "source": "torch.fx", "unknown_ops": unknown}


def test_unknown_module_keeps_class_name() -> None:
    g = from_module(nn.Sequential(nn.PixelShuffle(2)), (torch.randn(1, 8, 4, 4),))
    assert "call_module:PixelShuffle" in g.ops


def test_bytes_and_edges() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(10, 20)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc(x)
            return torch.relu(h) + h

    g = from_module(Net(), (torch.randn(3, 10),))
    assert g.names == ["x", "fc", "relu", "add", "output"]
    fc, relu, add = g.index("fc"), g.index("relu"), g.index("add")
    assert g.feature("bytes_out")[fc] == 3 * 20 * 4
    assert g.feature("bytes_in")[fc] == 3 * 10 * 4
    assert g.feature("bytes_in")[add] == 2 * 3 * 20 * 4
    assert sorted(g.parents(add).tolist()) == sorted([fc, relu])
    src = g.edge_index[0]
    assert np.array_equal(g.edge_bytes, g.feature("bytes_out")[src])


def test_shape_reads_carry_no_bytes() -> None:
    m, x = zoo.transformer()
    g = from_module(m, x)
    others = [i for i, o in enumerate(g.ops) if o == "other"]
    assert others, "x.shape reads should be 'other' nodes"
    assert all(g.feature("bytes_in")[i] == 0 and g.feature("bytes_out")[i] == 0 for i in others)


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_zoo_models_import(name: str) -> None:
    module, inputs = zoo.get(name)
    g = from_module(module, inputs, name=name)
    assert isinstance(g, CompGraph)
    assert g.num_edges >= g.num_nodes - 1
    assert g.total_flops > 0
    assert g.feature("params").sum() == sum(p.numel() for p in module.parameters())
    assert g.names == [n.name for n in torch.fx.symbolic_trace(module).graph.nodes]
    assert g.ops[0] == "input" and g.ops[-1] == "output"
    assert g.meta["name"] == name and g.meta["source"] == "torch.fx"
    assert set(g.ops) <= set(g.vocab[: len(g.vocab)]) and "conv" in g.vocab


def test_zoo_flops_known_layers() -> None:
    module, inputs = zoo.transformer()
    g = from_module(module, inputs)
    head = g.index("head")
    assert g.feature("flops")[head] == 2 * 64 * 1000 * 32 + 1000 * 32


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x


def test_untraceable_module_raises_import_failed() -> None:
    with pytest.raises(ImportFailed) as info:
        from_module(DataDependent(), (torch.randn(3),))
    msg = str(info.value)
    assert "trace" in msg and "control flow" in msg
    assert "x.sum() > 0" in msg and "DataDependent" in msg
    assert "Traceback" not in msg


@pytest.mark.parametrize("inputs", [(torch.randn(3, 5),), (torch.randn(3, 4), torch.randn(2)), ()])
def test_wrong_example_inputs_raise_import_failed(inputs: tuple) -> None:
    with pytest.raises(ImportFailed, match="example inputs"):
        from_module(nn.Sequential(nn.Linear(4, 2)), inputs)


def test_non_module_raises() -> None:
    with pytest.raises(ImportFailed, match="nn.Module"):
        from_module(lambda x: x, (torch.randn(2),))  # type: ignore[arg-type]


def test_from_spec_zoo_factory() -> None:
    g = from_spec("mlsysopt.zoo:cnn")
    assert g.meta["name"] == "cnn" and g.total_flops > 0


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_such_pkg_xyz.models:net", "no_such_pkg_xyz.models"),
        ("mlsysopt.zoo:nope", "nope"),
        ("mlsysopt.zoo", "module:factory"),
    ],
)
def test_from_spec_bad_spec_raises(spec: str, needle: str) -> None:
    with pytest.raises(ImportFailed, match=needle.replace(".", r"\.")):
        from_spec(spec)


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> str:
    mod = types.ModuleType("mlsysopt_fake_models")
    mod.bare = lambda: nn.Linear(4, 2)  # type: ignore[attr-defined]
    mod.broken = lambda: 42  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mlsysopt_fake_models", mod)
    return "mlsysopt_fake_models"


def test_from_spec_bare_module_needs_input_shape(fake_models: str) -> None:
    with pytest.raises(ImportFailed, match="input_shape"):
        from_spec(f"{fake_models}:bare")
    g = from_spec(f"{fake_models}:bare", input_shape=(3, 4))
    assert _flops(g, "linear") == 2 * 4 * 2 * 3 + 2 * 3


def test_from_spec_factory_returning_junk(fake_models: str) -> None:
    with pytest.raises(ImportFailed, match="int"):
        from_spec(f"{fake_models}:broken")
