"""ONNX importer and exporter: FLOPs against torch.fx and hand-built graphs, bad files, dynamic shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from mlsysopt import zoo
from mlsysopt.errors import ImportFailed, UnsupportedFormat
from mlsysopt.graph.importers import load_graph
from mlsysopt.graph.importers.onnx import export_onnx, from_onnx
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.ir import CompGraph


def _op_flops(g: CompGraph, ops: tuple[str, ...]) -> float:
    return float(sum(f for f, o in zip(g.feature("flops"), g.ops, strict=True) if o in ops))


@pytest.fixture(scope="module")
def cnn_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CompGraph]:
    module, inputs = zoo.cnn()
    path = export_onnx(module, inputs, tmp_path_factory.mktemp("onnx") / "cnn.onnx")
    return path, from_module(module, inputs, name="cnn")


def test_export_writes_a_valid_model_atomically(cnn_onnx: tuple[Path, CompGraph]) -> None:
    path, _ = cnn_onnx
    onnx.checker.check_model(onnx.load(str(path)))
    assert [p.name for p in path.parent.iterdir()] == ["cnn.onnx"]  # no temp files left behind


def test_cnn_onnx_flops_match_torch_fx(cnn_onnx: tuple[Path, CompGraph]) -> None:
    path, fx_graph = cnn_onnx
    g = from_onnx(path)
    assert g.meta["source"] == "onnx" and g.meta["name"] == "cnn" and g.meta["dynamic_shapes"] is False
    hist = g.op_histogram()
    assert hist["conv"] == 6 and hist["linear"] == 2 and hist["input"] == 1 and hist["output"] == 1
    ops = ("conv", "linear")
    onnx_flops, fx_flops = _op_flops(g, ops), _op_flops(fx_graph, ops)
    assert fx_flops > 0
    assert onnx_flops == pytest.approx(fx_flops, rel=0.03)
    assert g.num_edges >= g.num_nodes - 1
    assert np.array_equal(g.compute, g.feature("flops"))
    # BN is folded into the convs on export, so ONNX holds at most the torch parameters
    assert 0.9 * fx_graph.feature("params").sum() <= g.feature("params").sum() <= fx_graph.feature("params").sum()


def test_load_graph_dispatches_onnx(cnn_onnx: tuple[Path, CompGraph]) -> None:
    path, _ = cnn_onnx
    assert load_graph(path).num_nodes == from_onnx(path).num_nodes


def _hand_built(path: Path, batch: int | str = "N", custom: bool = True) -> Path:
    """x[N,3,8,8] -> Conv(4,3,3,3)+bias -> Relu -> GlobalAveragePool -> Flatten -> Gemm(2x4, transB) -> y."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(2, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    if custom:
        nodes.append(helper.make_node("CustomThing", ["y"], ["z"], name="custom", domain="my.domain"))
    graph = helper.make_graph(
        nodes,
        "hand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    onnx.save(model, str(path))
    return path


def test_hand_built_graph_exact(tmp_path: Path) -> None:
    g = from_onnx(_hand_built(tmp_path / "hand.onnx"))
    assert g.meta["dynamic_shapes"] is True  # batch dim N counts as 1
    assert g.names == ["x", "conv", "relu", "gap", "flat", "fc", "custom", "output"]
    assert g.ops[:6] == ["input", "conv", "relu", "adaptive_avg_pool", "reshape", "linear"]
    assert g.ops[6] == "onnx:my.domain.CustomThing" and "onnx:my.domain.CustomThing" in g.vocab
    f = dict(zip(g.names, g.feature("flops"), strict=True))
    assert f["conv"] == 2 * 4 * 8 * 8 * 3 * 3 * 3 + 4 * 8 * 8
    assert f["relu"] == 4 * 8 * 8
    assert f["gap"] == 4 * 8 * 8
    assert f["fc"] == 2 * 2 * 4 + 2
    p = dict(zip(g.names, g.feature("params"), strict=True))
    assert p["conv"] == 4 * 27 + 4 and p["fc"] == 2 * 4 + 2 and g.feature("params").sum() == 122
    x_to_conv = g.edge_bytes[(g.edge_index[0] == g.index("x")) & (g.edge_index[1] == g.index("conv"))]
    assert x_to_conv.tolist() == [3 * 8 * 8 * 4]
    assert g.feature("bytes_out")[g.index("conv")] == 4 * 8 * 8 * 4
    assert g.parents(g.index("output")).tolist() == [g.index("fc")]


def test_an_incomplete_shape_inference_leaves_no_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ORT's ``infer_shapes`` saves the model into the cwd when it cannot infer a custom op's output."""
    path = _hand_built(tmp_path / "hand.onnx")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    g = from_onnx(path)
    assert "custom" in g.names
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(("batch", "dynamic"), [("N", True), (1, False)])
def test_dynamic_dims_count_as_one(tmp_path: Path, batch: int | str, dynamic: bool) -> None:
    g = from_onnx(_hand_built(tmp_path / "hand.onnx", batch=batch, custom=False))
    assert g.meta["dynamic_shapes"] is dynamic
    assert g.feature("flops")[g.index("fc")] == 2 * 2 * 4 + 2
    assert g.feature("bytes_out")[g.index("output")] == 2 * 4


def test_nodes_out_of_order_still_connect(tmp_path: Path) -> None:
    path = _hand_built(tmp_path / "hand.onnx", custom=False)
    model = onnx.load(str(path))
    nodes = list(model.graph.node)
    model.graph.ClearField("node")
    model.graph.node.extend(reversed(nodes))
    onnx.save(model, str(path))
    g = from_onnx(path)
    assert g.num_edges == 6
    assert g.topo_order.tolist()[0] == g.index("x")


def test_garbage_file_raises_unsupported_format(tmp_path: Path) -> None:
    bad = tmp_path / "junk.onnx"
    bad.write_bytes(b"this is not an onnx model \x00\xff\xfe" * 10)
    with pytest.raises(UnsupportedFormat, match="junk.onnx"):
        from_onnx(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(UnsupportedFormat, match="empty.onnx"):
        from_onnx(empty)


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ImportFailed, match="no such"):
        from_onnx(tmp_path / "nope.onnx")


class _Attention(nn.Module):
    """One nn.MultiheadAttention block: the TorchScript exporter writes its reshapes from Shape ops."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.attn(x, x, x, need_weights=False)[0]


def test_dynamic_batch_attention_counts_the_flops_of_the_static_export(tmp_path: Path) -> None:
    """Issue 25: a dynamic batch axis left the QK^T and AV MatMuls at 2 FLOPs each (a ViT 29% short)."""
    module, x = _Attention().eval(), torch.randn(1, 12, 16)
    static = from_onnx(export_onnx(module, (x,), tmp_path / "static.onnx"))
    dynamic = from_onnx(export_onnx(module, (x,), tmp_path / "dynamic.onnx", dynamic_batch=True))
    scores = 2 * 2 * 12 * 12 * 8  # heads x L x L x head dim, one multiply-add = 2 FLOPs, for QK^T (AV the same)
    assert _op_flops(static, ("matmul",)) >= 2 * scores
    # the dynamic file also computes its reshapes (a few scalar Mul/Div ops): equal up to those
    assert dynamic.total_flops == pytest.approx(static.total_flops, abs=0.01 * scores)
    assert _op_flops(dynamic, ("matmul",)) == _op_flops(static, ("matmul",))
    assert dynamic.meta["dynamic_shapes"] is True and dynamic.meta["dynamic_dims"] == {"input_0": ["batch"]}
    assert dynamic.meta["shape_inference"] in ("onnxruntime-symbolic", "onnxruntime-run")
    assert "unresolved_shapes" not in dynamic.meta and "unresolved_shapes" not in static.meta


def test_a_dynamic_sequence_dim_is_named_in_a_warning(tmp_path: Path) -> None:
    from mlsysopt.errors import MlsysoptWarning

    module, x = _Attention().eval(), torch.randn(1, 12, 16)
    path = tmp_path / "seq.onnx"
    torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["tokens"], output_names=["out"],
                      dynamic_axes={"tokens": {0: "batch", 1: "seq"}, "out": {0: "batch", 1: "seq"}})  # fmt: skip
    with pytest.warns(
        MlsysoptWarning, match=r"seq.onnx: dynamic dimensions counted as 1: input 'tokens' dim 1 \('seq'\)"
    ):
        g = from_onnx(path)
    assert g.meta["dynamic_dims"] == {"tokens": ["batch", "seq"]}
