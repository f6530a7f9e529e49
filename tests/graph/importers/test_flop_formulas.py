"""FLOP totals of every op family against hand counts, through torch.fx and through ONNX (issue 13: no silent 0s).

Every expected number below is worked out by hand from the formulas in
``mlsysopt.graph.importers.flop_formulas`` (a multiply-add is 2 FLOPs) and written as the arithmetic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from mlsysopt.errors import InvalidGraph, MlsysoptWarning
from mlsysopt.graph.importers.flop_formulas import einsum_flops
from mlsysopt.graph.importers.onnx import from_onnx
from mlsysopt.graph.importers.torch_fx import from_module

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Fn(nn.Module):
    """A module whose forward is ``fn`` of one tensor: lets a test trace one function call."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


class Fn2(Fn):
    """``fn`` of two tensors."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:  # type: ignore[override]
        return self.fn(x, y)


class Wrap(nn.Module):
    """Holds ``inner`` as a submodule, so torch.fx keeps a torch.nn layer as one leaf call (as in a real model)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> Any:
        return self.inner(x)


def fx_flops(module: nn.Module, *inputs: torch.Tensor, op: str | None = None) -> float:
    """Total FLOPs of ``module`` (or of its nodes of op ``op``); there must be no unknown op."""
    g = from_module((module if isinstance(module, Fn) else Wrap(module)).eval(), inputs)
    assert g.meta["unknown_ops"] == {}, g.meta["unknown_ops"]
    flops = g.feature("flops")
    return float(flops.sum() if op is None else flops[[o == op for o in g.ops]].sum())


# ---------------------------------------------------------------------------- torch.fx
def test_recurrent_layers() -> None:
    # GRU and RNN are unrolled into linear/add/... ops (test_expansion.py): their totals are the formula's.
    # RNN 4->6, 2 layers, bidirectional, seq-first (T=3, B=2): per step layer 0: 2*6*(4+6) + 6 + 6 + 2*6 = 144;
    # layer 1 reads 2*6=12 inputs: 2*6*(12+6) + 6 + 6 + 12 = 240; total T*B*dirs*(144+240)
    rnn = nn.RNN(4, 6, num_layers=2, bidirectional=True)
    assert fx_flops(rnn, torch.randn(3, 2, 4)) == 3 * 2 * 2 * (144 + 240)
    # GRU 8->16 batch_first (B=2, T=5): 2*3*16*(8+16) + 3*16 + 7*16 + 2*3*16 = 2560 per step
    gru = nn.GRU(8, 16, batch_first=True)
    assert fx_flops(gru, torch.randn(2, 5, 8)) == 10 * 2560
    assert fx_flops(gru, torch.randn(5, 8)) == 5 * 2560  # unbatched (T, I)
    # LSTM 5->3 with proj_size 2, batch_first (B=2, T=4): 2*4*3*(5+2) + 4*3 + 9*3 + 2*4*3 + 2*2*3 = 243
    lstm = nn.LSTM(5, 3, batch_first=True, proj_size=2)
    assert fx_flops(lstm, torch.randn(2, 4, 5), op="lstm") == 8 * 243
    # LSTM without biases: 2*4*3*(5+3) + 12 + 27 = 231 per step
    assert fx_flops(nn.LSTM(5, 3, bias=False), torch.randn(4, 2, 5), op="lstm") == 8 * 231
    # a GRU cell: one step of batch 3, one node
    assert fx_flops(nn.GRUCell(8, 16), torch.randn(3, 8), op="gru") == 3 * 2560


def test_the_gru_model_of_the_issue_is_no_longer_almost_zero() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(32, 64, num_layers=2, batch_first=True)
            self.head = nn.Linear(64, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.gru(x)
            return self.head(y[:, -1])

    # per step: layer 0 2*192*(32+64) + 192 + 7*64 + 384 = 37888, layer 1 2*192*128 + 1024 = 50176; T*B = 8*1
    total = 8 * (37888 + 50176) + (2 * 64 * 5 + 5)
    assert fx_flops(Model(), torch.randn(1, 8, 32)) == total


def test_embeddings() -> None:
    g = from_module(Wrap(nn.Embedding(10, 4)), (torch.randint(0, 10, (2, 3)),))
    i = g.ops.index("embedding")
    assert g.feature("flops")[i] == 0 and g.feature("params")[i] == 40  # a lookup moves data
    # EmbeddingBag mean over 2 bags of 3: 6*4 adds + 2*4 divides
    assert fx_flops(nn.EmbeddingBag(10, 4, mode="mean"), torch.randint(0, 10, (2, 3))) == 6 * 4 + 8
    assert fx_flops(nn.EmbeddingBag(10, 4, mode="sum"), torch.randint(0, 10, (2, 3))) == 6 * 4


def test_convolutions() -> None:
    # transposed: in (1,3,5,5) -> out (1,4,11,11): 2 * in numel * (Cout/groups)*3*3 + bias per output
    ct = nn.ConvTranspose2d(3, 4, 3, stride=2)
    assert fx_flops(ct, torch.randn(1, 3, 5, 5), op="conv_transpose") == 2 * 75 * 4 * 9 + 4 * 11 * 11
    # grouped: out (1,8,6,6): 2 * 288 * (4/2)*9 + 288 bias
    grouped = nn.Conv2d(4, 8, 3, groups=2, padding=1)
    assert fx_flops(grouped, torch.randn(1, 4, 6, 6), op="conv") == 2 * 288 * 18 + 288
    # depthwise, no bias: out (1,4,6,6): 2 * 144 * 1*9
    depthwise = nn.Conv2d(4, 4, 3, groups=4, padding=1, bias=False)
    assert fx_flops(depthwise, torch.randn(1, 4, 6, 6), op="conv") == 2 * 144 * 9
    # functional grouped conv1d: out (1,6,8): 2 * 48 * (4/2)*3
    w = torch.randn(6, 2, 3)
    assert fx_flops(Fn(lambda x: F.conv1d(x, w, groups=2, padding=1)), torch.randn(1, 4, 8), op="conv") == 2 * 48 * 6


def test_einsum() -> None:
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    assert fx_flops(Fn2(lambda x, y: torch.einsum("bij,bjk->bik", x, y)), a, b) == 2 * (2 * 3 * 4 * 5)
    assert fx_flops(Fn(lambda x: torch.einsum("ij->", x)), torch.randn(3, 4)) == 12  # one add per element
    assert fx_flops(Fn2(lambda x, y: torch.einsum("i,j->ij", x, y)), torch.randn(3), torch.randn(4)) == 12
    assert fx_flops(Fn(lambda x: torch.einsum("...ij->...ji", x)), torch.randn(2, 3, 4)) == 0  # a transpose
    # the same rules, straight: implicit output, ellipsis broadcast, a mismatch
    assert einsum_flops("ij,jk", [(3, 4), (4, 5)]) == 2 * 60
    assert einsum_flops("...ij,...jk->...ik", [(7, 3, 4), (1, 4, 5)]) == 2 * 7 * 60
    assert einsum_flops("ij,jk->ik", [(3, 4)]) is None


def test_normalizations() -> None:
    x = torch.randn(1, 4, 3, 3)
    assert fx_flops(nn.GroupNorm(2, 4), x) == 5 * 36
    assert fx_flops(nn.InstanceNorm2d(4), x) == 5 * 36
    assert fx_flops(Fn(lambda t: F.group_norm(t, 2)), x) == 5 * 36


def test_interpolation() -> None:
    x = torch.randn(1, 2, 4, 4)  # -> (1,2,8,8): 128 outputs
    bilinear = Fn(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False))
    assert fx_flops(bilinear, x) == 128 * (2**3 - 1)
    assert fx_flops(nn.Upsample(scale_factor=2, mode="bilinear"), x) == 128 * 7
    assert fx_flops(Fn(lambda t: F.interpolate(t, scale_factor=2, mode="bicubic")), x) == 128 * (2 * 16 - 1)
    assert fx_flops(Fn(lambda t: F.interpolate(t, scale_factor=2)), x) == 0  # nearest: a copy
    assert fx_flops(Fn(lambda t: F.interpolate(t, size=10, mode="linear")), torch.randn(1, 2, 5)) == 20 * 3


def test_pooling_variants() -> None:
    x = torch.randn(1, 2, 4, 4)
    assert fx_flops(nn.MaxPool2d(2), x) == 8 * 4  # out (1,2,2,2), 2x2 windows
    assert fx_flops(nn.AvgPool2d(3, stride=1), x) == 8 * 9
    assert fx_flops(nn.AdaptiveAvgPool2d(1), x) == 32
    assert fx_flops(nn.AdaptiveMaxPool2d(1), x) == 32
    assert fx_flops(nn.LPPool2d(2, 2), x) == 2 * 8 * 4
    assert fx_flops(nn.MaxPool1d(2), torch.randn(1, 2, 6)) == 6 * 2
    assert fx_flops(Fn(lambda t: F.lp_pool1d(t, 2, 3)), torch.randn(1, 2, 6)) == 2 * 4 * 3


def test_ops_without_a_formula_warn_once_and_are_recorded() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bil = nn.Bilinear(4, 4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            s = x.sort(dim=-1)[0]
            t = x.sort(dim=0)[0]
            return self.bil(s, t) + x.shape[0]  # the shape arithmetic is free, not unknown

    with pytest.warns(MlsysoptWarning) as record:
        g = from_module(Odd(), (torch.randn(3, 4),), name="odd")
    assert len(record) == 1
    assert g.meta["unknown_ops"] == {"call_method:sort": 2, "call_module:Bilinear": 1}
    text = str(record[0].message)
    assert text.startswith("odd: 3 node(s) of 2 op type(s) have no FLOP formula")
    assert "call_method:sort x2" in text and "call_module:Bilinear x1" in text


# ---------------------------------------------------------------------------- ONNX
def _onnx(tmp_path: Path, nodes: list[Any], inputs: dict[str, tuple[int, ...]], inits: dict[str, np.ndarray],
          name: str = "m", opset: int = 18) -> Path:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def onnx_flops(path: Path) -> float:
    g = from_onnx(path)
    assert g.meta["unknown_ops"] == {}, g.meta["unknown_ops"]
    return g.total_flops


def test_onnx_recurrent(tmp_path: Path) -> None:
    gru = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=16)
    w, r, b = np.zeros((1, 48, 8)), np.zeros((1, 48, 16)), np.zeros((1, 96))
    path = _onnx(tmp_path, [gru], {"X": (5, 2, 8)}, {"W": w, "R": r, "B": b}, "gru")
    assert onnx_flops(path) == 10 * 2560  # the same GRU as through torch.fx
    lstm = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], hidden_size=6, direction="bidirectional")
    w, r, b = np.zeros((2, 24, 4)), np.zeros((2, 24, 6)), np.zeros((2, 48))
    path = _onnx(tmp_path, [lstm], {"X": (3, 2, 4)}, {"W": w, "R": r, "B": b}, "lstm")
    # per step and direction: 2*4*6*(4+6) + 4*6 + 9*6 + 2*4*6 = 606
    assert onnx_flops(path) == 6 * 2 * 606
    rnn = helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=6, layout=1)  # (batch, steps, input)
    path = _onnx(tmp_path, [rnn], {"X": (2, 3, 4)}, {"W": np.zeros((1, 6, 4)), "R": np.zeros((1, 6, 6))}, "rnn")
    assert onnx_flops(path) == 6 * (2 * 6 * 10 + 6 + 6)  # no B input: no bias adds


def test_onnx_convolutions_norms_pools_einsum_resize(tmp_path: Path) -> None:
    ct = helper.make_node("ConvTranspose", ["X", "W", "Bc"], ["Y"], strides=[2, 2])
    path = _onnx(tmp_path, [ct], {"X": (1, 3, 5, 5)}, {"W": np.zeros((3, 4, 3, 3)), "Bc": np.zeros(4)}, "ct")
    assert onnx_flops(path) == 2 * 75 * 36 + 484
    conv = helper.make_node("Conv", ["X", "W"], ["Y"], group=2, pads=[1, 1, 1, 1])
    path = _onnx(tmp_path, [conv], {"X": (1, 4, 6, 6)}, {"W": np.zeros((8, 2, 3, 3))}, "grouped")
    assert onnx_flops(path) == 2 * 288 * 18
    gn = helper.make_node("GroupNormalization", ["X", "S", "Bn"], ["Y"], num_groups=2)
    path = _onnx(tmp_path, [gn], {"X": (1, 4, 3, 3)}, {"S": np.ones(4), "Bn": np.zeros(4)}, "gn")
    assert onnx_flops(path) == 5 * 36
    inorm = helper.make_node("InstanceNormalization", ["X", "S", "Bn"], ["Y"])
    path = _onnx(tmp_path, [inorm], {"X": (1, 4, 3, 3)}, {"S": np.ones(4), "Bn": np.zeros(4)}, "in")
    assert onnx_flops(path) == 5 * 36
    lp = helper.make_node("LpPool", ["X"], ["Y"], kernel_shape=[2, 2], strides=[2, 2], p=2)
    assert onnx_flops(_onnx(tmp_path, [lp], {"X": (1, 2, 4, 4)}, {}, "lp")) == 2 * 8 * 4
    glp = helper.make_node("GlobalLpPool", ["X"], ["Y"])
    assert onnx_flops(_onnx(tmp_path, [glp], {"X": (1, 2, 4, 4)}, {}, "glp")) == 2 * 32
    es = helper.make_node("Einsum", ["A", "Bm"], ["Y"], equation="bij,bjk->bik")
    assert onnx_flops(_onnx(tmp_path, [es], {"A": (2, 3, 4), "Bm": (2, 4, 5)}, {}, "es")) == 240
    rs = helper.make_node("Resize", ["X", "", "scales"], ["Y"], mode="linear")
    path = _onnx(tmp_path, [rs], {"X": (1, 2, 4, 4)}, {"scales": np.array([1, 1, 2, 2])}, "resize")
    assert onnx_flops(path) == 128 * 7
    near = helper.make_node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")
    path = _onnx(tmp_path, [near], {"X": (1, 2, 4, 4)}, {"scales": np.array([1, 1, 2, 2])}, "nearest")
    assert onnx_flops(path) == 0


def test_onnx_unknown_ops_warn_once_with_counts(tmp_path: Path) -> None:
    k = helper.make_tensor("k", TensorProto.INT64, [1], [2])
    topk = helper.make_node("TopK", ["X", "k"], ["V", "I"])
    det = helper.make_node("Det", ["M"], ["D"])
    add = helper.make_node("Add", ["V", "V"], ["Y"])
    graph = helper.make_graph(
        [topk, det, add],
        "odd",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, (3, 4)),
         helper.make_tensor_value_info("M", TensorProto.FLOAT, (2, 2))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [k],
    )  # fmt: skip
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    with pytest.warns(MlsysoptWarning) as record:
        g = from_onnx(path)
    assert len(record) == 1 and g.meta["unknown_ops"] == {"onnx:TopK": 1, "onnx:Det": 1}
    assert str(record[0].message).startswith(f"{path}: 2 node(s) of 2 op type(s) have no FLOP formula")


def test_a_cyclic_onnx_file_is_named(tmp_path: Path) -> None:
    a = helper.make_node("Relu", ["t2"], ["t1"], name="a")
    b = helper.make_node("Relu", ["t1"], ["t2"], name="b")
    graph = helper.make_graph([a, b], "cyc", [], [helper.make_tensor_value_info("t2", TensorProto.FLOAT, (2,))])
    path = tmp_path / "cyclic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    with pytest.raises(InvalidGraph, match=r"cyclic\.onnx: graph has a cycle"):
        from_onnx(path)
