"""Recurrent layers unrolled per time step and transformer layers per op, as PyTorch runs them (issue 31 item 4)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn
from torch.autograd.profiler_legacy import profile

import mlsysopt.graph.importers.expansion as ex
from mlsysopt.errors import MlsysoptWarning
from mlsysopt.graph.importers.flop_formulas import mha_flops, rnn_flops
from mlsysopt.graph.importers.onnx import from_onnx
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.ir import CompGraph

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: ATen ops torch.profiler lists inside a CPU recurrent layer's call -> the op of its node (views such as
#: ``unsafe_chunk``, ``unbind``, ``stack`` and the zero initial state are not counted).
ATEN = {"aten::linear": "linear", "aten::add_": "add", "aten::add": "add", "aten::sigmoid_": "sigmoid",
        "aten::mul_": "mul", "aten::tanh_": "tanh", "aten::tanh": "tanh", "aten::sub": "sub"}  # fmt: skip


def _run_ops(layer: nn.Module, x: torch.Tensor) -> Counter[str]:
    """The ops PyTorch runs inside ``layer``'s aten::gru / aten::rnn_tanh call, by node op (the legacy profiler:
    the same events as torch.profiler without its start-up cost)."""
    with torch.no_grad(), profile() as prof:
        layer(x)
    parents = ("aten::gru", "aten::rnn_tanh")
    return Counter(
        ATEN[e.name] for e in prof.function_events if e.cpu_parent and e.cpu_parent.name in parents and e.name in ATEN
    )


class Net(nn.Module):
    """Calls ``layer`` as a leaf module named ``layer``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def _expanded_ops(g: CompGraph) -> Counter[str]:
    return Counter(op for op in g.ops if op not in ("input", "output", "concat"))


@pytest.mark.parametrize("layer", [nn.GRU(6, 8, num_layers=2, bidirectional=True), nn.RNN(6, 8)], ids=["gru", "rnn"])
def test_the_unrolled_ops_are_the_ones_pytorch_runs(layer: nn.Module) -> None:
    x = torch.randn(4, 2, 6)  # T=4, B=2
    g = from_module(Net(layer).eval(), (x,))
    assert _expanded_ops(g) == _run_ops(layer.eval(), x)
    mode = "gru" if isinstance(layer, nn.GRU) else "rnn"
    dirs = 2 if layer.bidirectional else 1
    assert g.num_nodes == 2 + ex.recurrent_size(mode, 4, layer.num_layers, dirs)
    assert g.total_flops == rnn_flops(mode, 4, 2, 6, 8, layer.num_layers, dirs)
    assert g.feature("params").sum() == sum(p.numel() for p in layer.parameters())
    assert g.meta["unknown_ops"] == {}
    whole = from_module(Net(layer).eval(), (x,), expand_layers=False)
    assert whole.ops == ["input", mode, "output"] and whole.total_flops == g.total_flops


def test_steps_form_a_chain_carrying_the_hidden_state() -> None:
    g = from_module(Net(nn.GRU(3, 4, bidirectional=True)).eval(), (torch.randn(3, 1, 3),))
    step_in = lambda name: {g.names[p] for p in g.parents(g.index(name))}  # noqa: E731
    assert step_in("layer.l0.t1.hh") == {"layer.l0.t0.add_h"}  # forward: t0 -> t1
    assert step_in("layer.l0_reverse.t1.hh") == {"layer.l0_reverse.t2.add_h"}  # reverse: t2 -> t1
    assert step_in("layer.l0.t0.hh") == set()  # no h0 given: the first step reads zeros
    # W_ih x of the whole sequence, computed once, feeds every step
    assert step_in("layer.l0.t1.add_r") == {"layer.l0.t1.hh", "layer.l0.ih"}
    out = g.index("layer")  # the layer's output keeps the node's name; the consumers read it
    assert len(g.parents(out)) == 2 * 3
    assert g.feature("bytes_out")[g.index("layer.l0.t1.hh")] == 3 * 4 * 4  # G*H floats
    assert g.feature("bytes_out")[g.index("layer.l0.ih")] == 3 * 3 * 4 * 4  # T*G*H floats


def test_a_layer_over_the_bound_stays_one_node_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ex, "MAX_EXPANDED_NODES", 20)
    with pytest.warns(MlsysoptWarning) as record:
        g = from_module(Net(nn.GRU(3, 4)).eval(), (torch.randn(5, 1, 3),))
    assert len(record) == 1
    text = str(record[0].message)
    assert text.startswith("layer: unrolling GRU over 5 time steps would make 57 nodes, over the bound of 20")
    assert g.ops == ["input", "gru", "output"] and g.total_flops == rnn_flops("gru", 5, 1, 3, 4)


def test_layers_kept_whole_are_counted_without_unrolling_those_over_the_bound_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``expand_layers=False`` (what ``placement place`` reads) lists every layer it keeps one node with its op count,
    computed without building the expansion; one over the bound is marked, and the warning says ``graph simulate``
    keeps it whole too (#31)."""
    import warnings

    from mlsysopt.graph.presets import preset_cluster
    from mlsysopt.graph.units import implausible

    with warnings.catch_warnings():
        warnings.simplefilter("error", MlsysoptWarning)  # keeping it whole here is no news: no warning
        short = from_module(Net(nn.GRU(3, 4)).eval(), (torch.randn(5, 1, 3),), expand_layers=False)
    assert short.meta["kept_whole"] == {
        "layer": {"module": "GRU", "ops": ex.recurrent_size("gru", 5), "layers": 1, "kind": "recurrent"}
    }
    built = []
    monkeypatch.setattr(ex, "recurrent", lambda *a, **k: built.append(a))  # the count must not build it
    monkeypatch.setattr(ex, "MAX_EXPANDED_NODES", 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MlsysoptWarning)
        g = from_module(Net(nn.GRU(3, 4)).eval(), (torch.randn(5, 1, 3),), expand_layers=False)
    whole = {"module": "GRU", "ops": 57, "layers": 1, "kind": "recurrent", "over_bound": True}
    assert built == [] and g.meta["kept_whole"] == {"layer": whole}
    cluster = preset_cluster("edge", g)
    said = [s for s in implausible(g, cluster, 1e-3, 1e-4) if "one task each" in s]
    assert len(said) == 1 and "GRU 'layer' (57 ops)" in said[0], said
    assert "all of them are over the bound" in said[0] and "stay one task in `mlsysopt graph simulate` too" in said[0]


def test_a_million_steps_are_not_unrolled_and_nothing_is_allocated(tmp_path: Path) -> None:
    gru = helper.make_node("GRU", ["X", "W", "R"], ["Y"], hidden_size=4, name="enc")
    inits = [numpy_helper.from_array(np.zeros(s, np.float32), k) for k, s in (("W", (1, 12, 2)), ("R", (1, 12, 4)))]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, (10**6, 1, 2))
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([gru], "long", [x], [y], inits))
    path = tmp_path / "long.onnx"
    onnx.save(model, str(path))
    with pytest.warns(MlsysoptWarning, match=r"^enc: unrolling GRU over 1,000,000 time steps would make 11,000,002 "):
        g = from_onnx(path, unroll_recurrent=True)
    assert g.num_nodes == 3 and g.total_flops == rnn_flops("gru", 10**6, 1, 2, 4, bias=False)


def test_onnx_gru_unrolls_as_torch_fx_does(tmp_path: Path) -> None:
    w, r, b = np.zeros((2, 12, 3)), np.zeros((2, 12, 4)), np.zeros((2, 24))
    gru = helper.make_node("GRU", ["X", "W", "R", "B", "", "H0"], ["Y", "Y_h"], hidden_size=4,
                           direction="bidirectional", name="gru")  # fmt: skip
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in (("X", (3, 1, 3)), ("H0", (2, 1, 4)))]
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in (("W", w), ("R", r), ("B", b))]
    path = tmp_path / "gru.onnx"
    onnx.save(helper.make_model(helper.make_graph([gru], "g", inputs, [y], inits)), str(path))
    assert from_onnx(path).ops == ["input", "input", "gru", "output"]  # ONNX Runtime runs it as one kernel
    g = from_onnx(path, unroll_recurrent=True)
    fx = from_module(Net(nn.GRU(3, 4, bidirectional=True)).eval(), (torch.randn(3, 1, 3),))
    assert _expanded_ops(g) == _expanded_ops(fx) and g.total_flops == fx.total_flops
    assert g.feature("params").sum() == w.size + r.size + b.size
    h0 = {g.names[c] for c in g.children(g.index("H0"))}
    assert h0 == {"gru.l0.t0.hh", "gru.l0.t0.sub", "gru.l0_reverse.t2.hh", "gru.l0_reverse.t2.sub"}


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layers_become_their_fast_path_ops(norm_first: bool) -> None:
    e, heads, ffn, length = 8, 2, 16, 5
    layer = nn.TransformerEncoderLayer(e, heads, ffn, batch_first=True, norm_first=norm_first)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(e), enable_nested_tensor=False).eval()
    x = torch.randn(1, length, e)
    g = from_module(Net(encoder), (x,))
    one = ["norm1", "self_attn", "add1", "norm2", "linear1", "linear2", "add2"] if norm_first else \
        ["self_attn", "add1", "norm1", "linear1", "linear2", "add2", "norm2"]  # fmt: skip
    assert g.names[1:-1] == [f"layer.layers.{k}.{op}" for k in range(2) for op in one] + ["layer"]  # the final norm
    assert g.meta["unknown_ops"] == {}
    assert g.feature("params").sum() == sum(p.numel() for p in encoder.parameters())
    whole = from_module(Net(encoder), (x,), expand_layers=False)  # one node per fx node: same FLOPs, no warning
    assert whole.ops == ["input", "transformer", "output"] and whole.total_flops == g.total_flops
    # The matrix products against the FLOPs PyTorch's profiler counts (slow path: every product is an addmm)
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), profile(with_flops=True) as prof:
            encoder.layers[0](x)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    addmm = [e.flops for e in prof.function_events if e.name == "aten::addmm"]  # in/out projections, linear1, 2
    assert len(addmm) == 4
    flops = lambda name: g.feature("flops")[g.index(f"layer.layers.0.{name}")]  # noqa: E731
    scores = length * length
    assert flops("self_attn") == mha_flops(length, length, 1, e, e, e, heads)
    assert flops("self_attn") - 4 * scores * e - 3 * scores * heads == addmm[0] + addmm[1]  # QK^T, AV, softmax
    assert flops("linear1") - 2 * length * ffn == addmm[2]  # bias + activation
    assert flops("linear2") - length * e == addmm[3]  # bias
    assert flops("norm1") == 5 * length * e and flops("add1") == length * e
