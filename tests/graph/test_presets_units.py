"""Clusters in real units: presets, load_cluster, unit systems, plausibility, strict cluster files, size limits."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import InvalidCluster, InvalidGraph, InvalidOption, MlsysoptWarning
from mlsysopt.graph import limits
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import chain, homogeneous_cluster, layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.presets import PRESETS, load_cluster, preset_cluster
from mlsysopt.graph.problem import PlacementProblem, load_problem
from mlsysopt.graph.units import implausible, mismatch, units_of


def dnn_graph() -> CompGraph:
    """A 3-op chain as the torch.fx importer would tag it (FLOPs, bytes)."""
    g = chain(3, compute=2e9, nbytes=4e6)
    g.meta["source"] = "torch.fx"
    return g


def workflow_graph() -> CompGraph:
    g = chain(3, compute=10.0, nbytes=1e6)
    g.meta["source"] = "wfcommons"
    return g


# ---------------------------------------------------------------------------- presets
def test_presets_are_in_real_units() -> None:
    edge = preset_cluster("preset:edge", dnn_graph())
    assert edge.units == "dnn" and edge.names == ["rpi0", "rpi1", "orin0", "laptop0", "server0"]
    # spec-sheet arithmetic: 4 x 1.5 GHz x 8; 1024 x 625 MHz x 2; 4 x 2.8 GHz x 32; A100 19.5 TFLOP/s
    assert edge.speed.tolist() == [48e9, 48e9, 1.28e12, 358.4e9, 19.5e12]
    off = ~np.eye(5, dtype=bool)
    assert (edge.bandwidth[off] == 125e6).all() and (edge.delay[off] == 100e-6).all()  # Gigabit Ethernet
    node = preset_cluster("gpu-node-nvlink")
    gpu, cpu = node.index("gpu0"), node.index("cpu0")
    assert node.num_devices == 9 and node.speed[cpu] == 64 * 2.25e9 * 32
    assert node.bandwidth[gpu, node.index("gpu7")] == 300e9 and node.bandwidth[gpu, cpu] == 32e9
    pcie = preset_cluster("gpu-node-pcie")
    assert pcie.bandwidth[pcie.index("gpu0"), pcie.index("gpu3")] == 32e9
    socket = preset_cluster("cpu-socket")
    assert socket.num_devices == 8 and socket.bandwidth[0, 1] == pytest.approx(204.8e9 / 8)
    assert set(PRESETS) == {"edge", "gpu-node-nvlink", "gpu-node-pcie", "cpu-socket"}


def test_a_preset_for_a_workflow_is_relative_to_its_reference_device() -> None:
    c = preset_cluster("edge", workflow_graph())
    assert c.units == "workflow" and c.speed[c.index("laptop0")] == 1.0
    assert c.speed[c.index("server0")] == pytest.approx(19.5e12 / 358.4e9)
    assert c.meta["source"] == "preset:edge" and c.meta["reference_device"] == "laptop0"


def test_a_preset_covers_every_hardware_type_of_the_graph() -> None:
    g = layered_dag(30, num_types=3, seed=1)
    c = preset_cluster("cpu-socket", g)
    assert c.num_types == 3 and c.supports.all()
    PlacementProblem(g, c)  # every task placeable


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(InvalidCluster, match="no cluster preset 'tpu-pod' .*edge, gpu-node-nvlink"):
        preset_cluster("preset:tpu-pod")


# ---------------------------------------------------------------------------- load_cluster
def test_load_cluster_accepts_a_file_a_preset_and_a_count(tmp_path: Path) -> None:
    g = dnn_graph()
    homogeneous_cluster(2).save(tmp_path / "c.json")
    assert load_cluster(tmp_path / "c.json", g).num_devices == 2
    assert load_cluster(str(tmp_path / "c.json"), g).meta["source"] == f"from {tmp_path / 'c.json'}"
    assert load_cluster("preset:gpu-node-pcie", g).num_devices == 5
    drawn = load_cluster(4, g, seed=3)
    assert drawn.units == "dnn" and drawn.num_devices == 4 and "seed 3" in drawn.meta["source"]
    assert load_cluster("4", g, seed=3).speed.tolist() == drawn.speed.tolist()  # deterministic in the seed
    given = homogeneous_cluster(3)
    assert load_cluster(given, g) is given
    with pytest.raises(InvalidCluster, match="not True"):
        load_cluster(True, g)


def test_load_problem_takes_presets_and_says_where_the_cluster_came_from() -> None:
    problem, how = load_problem(dnn_graph(), "preset:edge")
    assert problem.num_devices == 5 and how == "preset:edge"
    _, how = load_problem(dnn_graph(), None, devices=3, seed=2)
    assert how == "random 3-device cluster in dnn units (seed 2)"


def test_a_cluster_in_other_units_warns(tmp_path: Path) -> None:
    random_cluster(4, num_types=1).save(tmp_path / "synthetic.json")  # graph generate's cluster
    saved = json.loads((tmp_path / "synthetic.json").read_text())
    assert saved["units"] == {
        "system": "synthetic",
        "compute": "work units",
        "speed": "work units/time unit",
        "bytes": "data units",
        "bandwidth": "data units/time unit",
        "delay": "time units",
        "time": "time units",
    }
    with pytest.warns(MlsysoptWarning, match="graph is in dnn units .* cluster was built for synthetic units"):
        load_cluster(tmp_path / "synthetic.json", dnn_graph())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_cluster(tmp_path / "synthetic.json", layered_dag(10, num_types=1))  # same units: quiet


def test_unit_systems_and_plausibility() -> None:
    assert units_of(dnn_graph()) == "dnn" and units_of(workflow_graph()) == "workflow"
    assert units_of(layered_dag(5)) == "synthetic"
    g = dnn_graph()
    slow = homogeneous_cluster(2, speed=1.0, bandwidth=1.0)  # speed 1 FLOP/s, 1 B/s: the generate cluster
    p = PlacementProblem(g, slow)
    found = implausible(g, slow, p.makespan(np.array([0, 0, 0])), p.cp_min)
    assert len(found) == 2 and "more than a year" in found[0]  # 3 x 2e9 s
    assert "no per-task overhead" in found[1]  # a bare cluster: FLOPs only, no operator dispatch
    light = chain(3, compute=2e3, nbytes=4e6)
    light.meta["source"] = "onnx"
    p = PlacementProblem(light, slow)
    found = implausible(light, slow, p.makespan(np.array([0, 1, 0])), p.cp_min)  # 2 transfers of 4e6 s
    assert len(found) == 2 and found[0].startswith("SLR 1,334 ") and "data transfers dominate" in found[0]
    fast = preset_cluster("gpu-node-nvlink", g)
    p = PlacementProblem(g, fast)
    assert implausible(g, fast, p.makespan(np.zeros(3, np.int64)), p.cp_min) == []
    assert mismatch(g, random_cluster(2, num_types=1)) is not None and mismatch(g, fast) is None


# ---------------------------------------------------------------------------- strict cluster files
@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("supports", [["no"], [1]], "'supports'[0][0] is 'no': expected true/false or 0/1"),
        ("supports", [[2], [1]], "'supports'[0][0] is 2"),
        ("speed", ["1.5", 1], "'speed'[0] is '1.5': expected a number"),
        ("speed", [True, 1], "'speed'[0] is True"),
        ("bandwidth", [[None, "fast"], [1, None]], "'bandwidth'[0][1] is 'fast'"),
        ("bandwidth", [[None, None], [1, None]], "'bandwidth'[0][1] is null (only the diagonal may be)"),
        ("delay", "zero", "'delay' must be a list of lists"),
        ("names", ["a", 3], "'names' must be a list of non-empty strings"),
        ("meta", [1], "'meta' must be a JSON object"),
        ("units", "furlongs", "units 'furlongs' is not one of"),
    ],
)
def test_cluster_files_are_read_strictly(tmp_path: Path, key: str, value: object, needle: str) -> None:
    data = homogeneous_cluster(2).to_dict()
    data[key] = value
    (tmp_path / "c.json").write_text(json.dumps(data))
    with pytest.raises(InvalidCluster) as err:
        DeviceCluster.load(tmp_path / "c.json")
    assert str(err.value).startswith(str(tmp_path / "c.json")) and needle in str(err.value)


def test_cluster_units_and_meta_round_trip(tmp_path: Path) -> None:
    c = preset_cluster("edge", dnn_graph())
    c.save(tmp_path / "c.json")
    back = DeviceCluster.load(tmp_path / "c.json")
    assert back.units == "dnn" and back.meta["preset"].startswith("2 Raspberry Pi 4")
    assert back.remove_device("rpi0").units == "dnn"


# ---------------------------------------------------------------------------- overflow and integer ranges
def test_times_that_overflow_are_refused_before_any_search() -> None:
    g = chain(3, compute=10.0, nbytes=1.0)
    tiny = DeviceCluster([1e-308, 1.0], np.ones((2, 1), bool), np.ones((2, 2)), np.zeros((2, 2)))
    with pytest.raises(InvalidCluster, match="task 't0' would take 10 work units / speed 1e-308 = inf"):
        PlacementProblem(g, tiny)
    huge = chain(2, nbytes=1e300)
    slow_link = homogeneous_cluster(2, bandwidth=1e-10)
    with pytest.raises(InvalidCluster, match="sending edge 't0' -> 't1' .* takes inf"):
        PlacementProblem(huge, slow_link)
    with pytest.raises(InvalidCluster, match="sum of every task's longest time and every transfer overflows"):
        PlacementProblem(
            chain(3, compute=1.0),
            DeviceCluster([1e-308, 1e-308], np.ones((2, 1), bool), np.ones((2, 2)), np.zeros((2, 2))),
        )
    with pytest.raises(InvalidGraph, match="feature 'flops' sums to inf"):
        chain(3, compute=1e308)


def test_integer_arrays_never_wrap(tmp_path: Path) -> None:
    g = chain(2)
    with pytest.raises(InvalidGraph, match=r"'hw_type' value 1099511627776 is out of range"):
        CompGraph(g.names, g.opcodes, g.x, g.feature_names, g.edge_index, g.edge_bytes, [0, 2**40])
    with pytest.raises(InvalidGraph, match="'hw_type' must hold integers, got 1.5"):
        CompGraph(g.names, g.opcodes, g.x, g.feature_names, g.edge_index, g.edge_bytes, [0, 1.5])


# ---------------------------------------------------------------------------- limits
def test_size_limits_state_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "memory_budget", lambda: 2**30)  # a 1 GiB budget, on any machine
    limits.check_tasks(1000, 0.3)
    with pytest.raises(InvalidOption, match=r"--tasks 1,000,000 is above this machine's limit of [\d,]+ \(") as err:
        limits.check_tasks(1_000_000, 0.3, "--tasks")
    allowed = int(str(err.value).split("limit of ")[1].split(" ")[0].replace(",", ""))
    limits.check_tasks(allowed, 0.3)  # the stated limit itself is accepted
    with pytest.raises(InvalidOption):
        limits.check_tasks(allowed + 1, 0.3)
    with pytest.raises(InvalidOption, match="--devices 100,000 is above"):
        limits.check_devices(100_000, 10)
    with pytest.raises(InvalidOption, match="10,000,000 tasks on 1,000 devices need"):
        limits.check_problem(10_000_000, 1000)
    with pytest.raises(InvalidOption, match="--num-tasks 10,000,000 is above"):
        limits.check_recipe_tasks(10_000_000)
    with pytest.raises(InvalidOption, match="num_tasks"):
        layered_dag(1_000_000)  # the library checks too, before allocating
