"""Strict JSON out, guarded JSON in: NaN/inf become null, and every bad file is one clear error."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlsysopt.errors import InvalidCluster, MlsysoptError
from mlsysopt.io import MAX_JSON_DEPTH, dumps, loads_json, read_json, to_jsonable, write_json_atomic


def test_to_jsonable_converts_numpy_and_non_finite() -> None:
    data = {
        "a": np.float32(1.5),
        "b": np.int64(3),
        "c": np.array([1.0, np.nan, np.inf]),
        "d": (math.inf, -math.inf, math.nan),
        "e": np.bool_(True),
        1: "int key",
    }
    out = to_jsonable(data)
    assert out == {"a": 1.5, "b": 3, "c": [1.0, None, None], "d": [None, None, None], "e": True, "1": "int key"}
    assert isinstance(out["b"], int) and isinstance(out["e"], bool)


def test_written_json_is_strict(tmp_path) -> None:
    path = write_json_atomic(tmp_path / "r.json", {"x": float("nan"), "y": [float("inf"), 2.0]})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"x": None, "y": [None, 2.0]}
    assert not list(tmp_path.glob(".*.tmp"))


def test_dumps_refuses_unknown_objects() -> None:
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        dumps({"x": object()})


def test_read_json_round_trip(tmp_path) -> None:
    (tmp_path / "a.json").write_text('{"k": [1, 2, {"n": null}]}')
    assert read_json(tmp_path / "a.json") == {"k": [1, 2, {"n": None}]}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"a": NaN}', "not valid JSON"),
        (b'{"a": Infinity}', "not valid JSON"),
        (b"\xff\xfe\x00binary", "not UTF-8"),
        (b"[1, 2]", "expected an object"),
        (b'"just a string"', "expected an object"),
    ],
)
def test_read_json_bad_files_name_the_file(tmp_path, content: bytes, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InvalidCluster, match=needle) as info:
        read_json(path, InvalidCluster)
    assert str(path) in str(info.value)


def test_read_json_missing_and_folder(tmp_path) -> None:
    with pytest.raises(MlsysoptError, match="no such file"):
        read_json(tmp_path / "nope.json")
    with pytest.raises(MlsysoptError, match="is a folder"):
        read_json(tmp_path)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 200_000])
def test_deeply_nested_json_is_a_clear_error(tmp_path, depth: int) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    with pytest.raises(MlsysoptError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        read_json(path, expect=None)


def test_depth_at_the_limit_is_accepted() -> None:
    text = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(text) is not None


def test_size_limit_is_checked_before_reading(tmp_path) -> None:
    path = tmp_path / "big.json"
    path.write_text('{"a": "' + "x" * 5000 + '"}')
    with pytest.raises(MlsysoptError, match="read limit"):
        read_json(path, max_bytes=1000)


def test_huge_integer_is_a_clear_error() -> None:
    with pytest.raises(MlsysoptError, match="not valid JSON"):
        loads_json('{"n": ' + "9" * 10_000 + "}", where="x.json")
