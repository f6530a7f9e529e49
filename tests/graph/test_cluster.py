"""DeviceCluster: validation errors, add/remove devices, feasibility, JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlsysopt.errors import ConstraintViolation, InvalidCluster
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph


def cluster3() -> DeviceCluster:
    bw = np.array([[0, 2, 4], [2, 0, 8], [4, 8, 0]], float)
    dl = np.array([[9, 0.1, 0.2], [0.1, 9, 0.3], [0.2, 0.3, 9]])
    return DeviceCluster([1.0, 2.0, 4.0], [[1, 0], [1, 1], [0, 1]], bw, dl, ["cpu", "gpu", "tpu"])


def test_diagonal_is_normalized_and_comm_time() -> None:
    c = cluster3()
    assert np.all(np.isinf(np.diag(c.bandwidth))) and np.all(np.diag(c.delay) == 0)
    assert c.comm_time(8.0, 1, 2) == pytest.approx(0.3 + 1.0)
    assert c.comm_time(1e9, 1, 1) == 0.0
    assert (c.num_devices, c.num_types) == (3, 2)


@pytest.mark.parametrize("speed", [0.0, -1.0, np.nan, np.inf])
def test_non_positive_speed(speed: float) -> None:
    with pytest.raises(InvalidCluster, match=r"device 'b' has speed .*: speed must be finite and > 0"):
        DeviceCluster([1.0, speed], np.ones((2, 1)), np.ones((2, 2)), np.zeros((2, 2)), ["a", "b"])


@pytest.mark.parametrize("bw", [0.0, -3.0, np.nan])
def test_non_positive_bandwidth(bw: float) -> None:
    m = np.ones((2, 2))
    m[1, 0] = bw
    with pytest.raises(InvalidCluster, match=r"link 'b' -> 'a' has bandwidth .*: must be > 0"):
        DeviceCluster([1.0, 1.0], np.ones((2, 1)), m, np.zeros((2, 2)), ["a", "b"])


def test_disconnected_and_negative_delay() -> None:
    d = np.zeros((2, 2))
    d[0, 1] = np.inf
    with pytest.raises(InvalidCluster, match="'a' -> 'b' is disconnected"):
        DeviceCluster([1.0, 1.0], np.ones((2, 1)), np.ones((2, 2)), d, ["a", "b"])
    d[0, 1] = -1
    with pytest.raises(InvalidCluster, match="delay -1.0"):
        DeviceCluster([1.0, 1.0], np.ones((2, 1)), np.ones((2, 2)), d, ["a", "b"])


def test_shapes_and_empty() -> None:
    with pytest.raises(InvalidCluster, match="no devices"):
        DeviceCluster([], np.ones((0, 1)), np.ones((0, 0)), np.ones((0, 0)))
    with pytest.raises(InvalidCluster, match="bandwidth has shape"):
        DeviceCluster([1.0, 1.0], np.ones((2, 1)), np.ones((3, 3)), np.zeros((2, 2)))
    with pytest.raises(InvalidCluster, match="distinct device names"):
        DeviceCluster([1.0, 1.0], np.ones((2, 1)), np.ones((2, 2)), np.zeros((2, 2)), ["a", "a"])


def test_add_and_remove_device() -> None:
    c = cluster3()
    c2 = c.add_device(8.0, [1, 1], bandwidth=16.0, delay=0.05, name="npu")
    assert c2.num_devices == 4 and c.num_devices == 3  # the original is untouched
    assert c2.names[-1] == "npu" and c2.comm_time(16.0, 3, 0) == pytest.approx(1.05)
    np.testing.assert_array_equal(c2.bandwidth[:3, :3], c.bandwidth)
    c3 = c2.remove_device("gpu")
    assert c3.names == ["cpu", "tpu", "npu"]
    assert c3.comm_time(4.0, 0, 1) == pytest.approx(0.2 + 1.0)
    with pytest.raises(InvalidCluster, match="gives 3 types"):
        c.add_device(1.0, [1, 1, 1], 1.0, 0.0)
    with pytest.raises(InvalidCluster, match="no device named 'xpu'"):
        c.remove_device("xpu")


def test_removing_the_last_device_is_refused() -> None:
    c = DeviceCluster([1.0], np.ones((1, 1)), np.ones((1, 1)), np.zeros((1, 1)), ["only"])
    with pytest.raises(InvalidCluster, match="cannot remove 'only': it is the last device"):
        c.remove_device(0)


def test_feasibility_names_task_and_type() -> None:
    g = CompGraph.build(list("abc"), ["task"] * 3, {}, [(0, 1), (1, 2)], hw_type=[0, 1, 2])
    c = cluster3()
    mask = c.feasible(g)
    assert mask.tolist() == [[True, True, False], [False, True, True], [False, False, False]]
    with pytest.raises(ConstraintViolation, match="task 'c' needs hardware type 2, which no device"):
        c.check_feasible(g)


def test_json_round_trip(tmp_path) -> None:
    c = cluster3()
    path = c.save(tmp_path / "c.json")
    json.loads(path.read_text())  # strict JSON: no Infinity on the diagonal
    assert "Infinity" not in path.read_text()
    d = DeviceCluster.load(path)
    assert d.names == c.names
    np.testing.assert_array_equal(d.bandwidth, c.bandwidth)
    np.testing.assert_array_equal(d.delay, c.delay)
    np.testing.assert_array_equal(d.supports, c.supports)


def test_json_errors_name_file_and_key(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(InvalidCluster, match="bad.json: not valid JSON"):
        DeviceCluster.load(bad)
    d = cluster3().to_dict()
    del d["delay"]
    bad.write_text(json.dumps(d))
    with pytest.raises(InvalidCluster, match="bad.json: missing key 'delay'"):
        DeviceCluster.load(bad)
    d = cluster3().to_dict()
    d["speed"][0] = -2
    bad.write_text(json.dumps(d))
    with pytest.raises(InvalidCluster, match="bad.json: device 'cpu' has speed -2"):
        DeviceCluster.load(bad)
    with pytest.raises(InvalidCluster, match="no such file"):
        DeviceCluster.load(tmp_path / "missing.json")


def test_null_off_diagonal_is_rejected(tmp_path) -> None:
    d = cluster3().to_dict()
    d["delay"][0][2] = None
    path = tmp_path / "c.json"
    path.write_text(json.dumps(d))
    with pytest.raises(InvalidCluster, match=r"c.json: 'delay'\[0\]\[2\] is null"):
        DeviceCluster.load(path)
