"""Placement JSON files: {task: device}, a result.json holding one, or a list of ids; every error names the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import ConstraintViolation, InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import diamond
from mlsysopt.graph.placement import load_placement

CLUSTER = DeviceCluster([1.0, 2.0], [[True], [True]], np.ones((2, 2)), np.zeros((2, 2)), names=["gpu", "cpu"])


def write(tmp_path: Path, data: object, name: str = "p.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_dict_result_and_list_forms(tmp_path: Path) -> None:
    g = diamond()
    by_name = {"t0": "gpu", "t1": "cpu", "t2": "gpu", "t3": 1}
    assert load_placement(write(tmp_path, by_name), g, CLUSTER).tolist() == [0, 1, 0, 1]
    result = {"makespan": 3.0, "placement": {"t0": "cpu", "t1": "cpu", "t2": "cpu", "t3": "gpu"}}
    assert load_placement(write(tmp_path, result), g, CLUSTER).tolist() == [1, 1, 1, 0]
    assert load_placement(write(tmp_path, [1, 0, 0, 1]), g, CLUSTER).tolist() == [1, 0, 0, 1]


@pytest.mark.parametrize(
    ("data", "error", "needle"),
    [
        ("{oops", InvalidPlacement, "not valid JSON"),
        ("[" * 100 + "]" * 100, InvalidPlacement, "nested deeper"),
        ([0, 1, "gpu", 0], InvalidPlacement, "one integer device id per task"),
        ([0, 1, 0], InvalidPlacement, "shape"),
        ([0, 1, 0, 5], InvalidPlacement, "device 5"),
        ({"t0": "gpu", "t1": "gpu", "t2": "gpu"}, InvalidPlacement, "have no device, e.g. 't3'"),
        ({"t0": "gpu", "t1": "gpu", "t2": "gpu", "t3": "tpu"}, InvalidPlacement, "unknown device 'tpu'"),
        ({"t0": "gpu", "t1": "gpu", "t2": "gpu", "t3": "gpu", "z": "gpu"}, InvalidPlacement, "unknown task 'z'"),
        ("3", InvalidPlacement, "expected a JSON object"),
    ],
)
def test_bad_placement_files_name_the_file(tmp_path: Path, data: object, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle) as info:
        load_placement(write(tmp_path, data), diamond(), CLUSTER)
    assert "p.json" in str(info.value)


def test_missing_file_and_hardware_types(tmp_path: Path) -> None:
    with pytest.raises(InvalidPlacement, match="no such file"):
        load_placement(tmp_path / "missing.json", diamond(), CLUSTER)
    g = diamond()
    g.hw_type[1] = 1
    two = DeviceCluster([1.0, 2.0], [[True, True], [True, False]], np.ones((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ConstraintViolation, match="p.json: task 't1' needs hardware type 1"):
        load_placement(write(tmp_path, [0, 1, 0, 0]), g, two)
