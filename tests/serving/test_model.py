"""ServedModel: reading inputs, random batches, timing, and one clear error per unservable model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mlsysopt.errors import InvalidModel
from mlsysopt.serving.model import ServedModel


def _tiny_onnx(path: Path, shape: list, dtype: int = TensorProto.FLOAT, op: str = "Identity") -> Path:
    """A one-node ONNX model ``y = op(x)`` whose input ``x`` has ``shape`` (str dims are symbolic)."""
    node = helper.make_node(op, ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "tiny",
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info("y", dtype, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def cnn(cnn_path: Path) -> ServedModel:
    return ServedModel(cnn_path)


@pytest.fixture(scope="module")
def fixed_cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlsysopt import zoo
    from mlsysopt.graph.importers.onnx import export_onnx

    return export_onnx(*zoo.get("cnn"), tmp_path_factory.mktemp("served") / "cnn_fixed.onnx")


def _raises_naming(path: Path, *patterns: str):
    return pytest.raises(InvalidModel, match=re.escape(str(path)) + "".join(f"(?s:.*){p}" for p in patterns))


def test_reads_input_names_and_per_row_shapes(cnn: ServedModel, cnn_path: Path) -> None:
    assert cnn.path == cnn_path
    assert cnn.input_names == ["input_0"]
    assert cnn.sample_shapes == {"input_0": (3, 32, 32)}
    assert cnn.batchable


def test_make_batch_shapes_dtypes_and_determinism(cnn: ServedModel) -> None:
    batch = cnn.make_batch(5, np.random.default_rng(1))
    assert set(batch) == {"input_0"}
    assert batch["input_0"].shape == (5, 3, 32, 32)
    assert batch["input_0"].dtype == np.float32
    again = cnn.make_batch(5, np.random.default_rng(1))
    np.testing.assert_array_equal(batch["input_0"], again["input_0"])
    out = cnn.session(1, 1).run(None, batch)
    assert out[0].shape == (5, 10)


def test_make_batch_follows_the_input_dtype(tmp_path: Path) -> None:
    model = ServedModel(_tiny_onnx(tmp_path / "ids.onnx", ["batch", 7], TensorProto.INT64))
    ids = model.make_batch(3)["x"]
    assert ids.dtype == np.int64 and ids.shape == (3, 7)
    half = ServedModel(_tiny_onnx(tmp_path / "half.onnx", ["batch", 2], TensorProto.FLOAT16))
    assert half.make_batch(2)["x"].dtype == np.float16


def test_time_batch_is_positive_and_grows_with_rows(cnn: ServedModel) -> None:
    one = cnn.time_batch(1, intra=1, inter=1)
    sixteen = cnn.time_batch(16, intra=1, inter=1)
    assert 0 < one < sixteen


def test_sessions_are_cached_per_thread_setting(cnn: ServedModel) -> None:
    assert cnn.session(1, 1) is cnn.session(1, 1)
    assert cnn.session(2, 1) is not cnn.session(1, 1)
    assert cnn.session(1, 2).run(None, cnn.make_batch(2))[0].shape == (2, 10)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.onnx"
    with _raises_naming(path, "no such"):
        ServedModel(path)


def test_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00\xffthis is not a protobuf\x13\x37" * 10)
    with _raises_naming(path, "not an ONNX model"):
        ServedModel(path)


def test_fixed_batch_model_serves_batch_one_only(fixed_cnn_path: Path) -> None:
    model = ServedModel(fixed_cnn_path)
    assert not model.batchable
    model.check_batch(1)
    assert model.time_batch(1, 1, 1, repeats=1) > 0
    with _raises_naming(fixed_cnn_path, "dynamic batch axis", "max batch 1"):
        model.check_batch(4)


def test_fixed_batch_above_one_is_rejected(tmp_path: Path) -> None:
    path = _tiny_onnx(tmp_path / "four.onnx", [4, 3])
    with _raises_naming(path, "fixed first dim of 4"):
        ServedModel(path)


def test_dynamic_non_batch_dim_needs_an_input_shape(tmp_path: Path) -> None:
    path = _tiny_onnx(tmp_path / "seq.onnx", ["N", "L"], op="Relu")
    with _raises_naming(path, "'x'", "dim 1", "--input-shape"):
        ServedModel(path)
    model = ServedModel(path, input_shape=(8,))
    assert model.sample_shapes == {"x": (8,)} and model.batchable
    assert model.session(1, 1).run(None, model.make_batch(4))[0].shape == (4, 8)


def test_input_shape_of_the_wrong_rank(tmp_path: Path) -> None:
    path = _tiny_onnx(tmp_path / "seq.onnx", ["N", "L"])
    with _raises_naming(path, "without the batch dim"):
        ServedModel(path, input_shape=(8, 4))
