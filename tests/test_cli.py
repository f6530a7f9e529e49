"""CLI smoke tests: exit codes and stderr as a user sees them. In-process (``run_inprocess``) so they stay fast; the
``--help`` test starts a real process."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run, run_inprocess
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 4-task diamond with two hardware types, a cluster where dev1 lacks type 1, and bad inputs."""
    d = tmp_path_factory.mktemp("cli")
    graph = CompGraph.build(
        ["a", "b", "c", "d"],
        ["conv", "relu", "add", "linear"],
        {"compute": [1.0, 2.0, 1.5, 0.5], "flops": [10.0, 2.0, 1.0, 5.0]},
        [(0, 1), (0, 2), (1, 3), (2, 3)],
        edge_bytes=[1.0, 2.0, 1.0, 1.0],
        hw_type=[0, 1, 0, 0],
        meta={"name": "diamond"},
    )
    graph.save(d / "g.npz")
    cluster = DeviceCluster(
        [1.0, 2.0],
        [[True, True], [True, False]],
        [[1.0, 4.0], [4.0, 1.0]],
        [[0.0, 0.1], [0.1, 0.0]],
        names=["gpu", "cpu"],
    )
    cluster.save(d / "c.json")

    with np.load(d / "g.npz", allow_pickle=False) as z:
        good = {k: z[k] for k in z.files}

    def bad_npz(name: str, **over: Any) -> None:
        np.savez(d / name, **{**good, **over})

    bad_npz("cyclic.npz", edge_index=np.array([[0, 1, 2], [1, 2, 0]]), edge_bytes=np.ones(3))
    bad_npz("out_of_range.npz", edge_index=np.array([[0], [7]]), edge_bytes=np.ones(1))
    x = good["x"].copy()
    x[1, list(good["feature_names"]).index("compute")] = np.nan
    bad_npz("nan.npz", x=x)
    bad_npz(
        "empty.npz",
        names=np.array([], dtype=np.str_),
        opcodes=np.zeros(0, np.int32),
        x=np.zeros((0, good["x"].shape[1])),
        edge_index=np.zeros((2, 0), np.int64),
        edge_bytes=np.zeros(0),
        hw_type=np.zeros(0, np.int32),
    )
    (d / "x.txt").write_text("not a graph\n")

    placements = {
        "p_ok.json": {"a": "gpu", "b": "gpu", "c": "cpu", "d": "gpu"},
        "p_unknown_task.json": {"a": "gpu", "b": "gpu", "c": "cpu", "d": "gpu", "zzz": "gpu"},
        "p_unknown_device.json": {"a": "gpu", "b": "gpu", "c": "tpu", "d": "gpu"},
        "p_hw_type.json": {"a": "gpu", "b": "cpu", "c": "cpu", "d": "gpu"},
    }
    for name, p in placements.items():
        (d / name).write_text(json.dumps(p))

    c = cluster.to_dict()
    c_speed = {**c, "speed": [0.0, 1.0]}
    c_bw = {**c, "bandwidth": [[None, -1.0], [-1.0, None]]}
    (d / "c_speed.json").write_text(json.dumps(c_speed))
    (d / "c_bandwidth.json").write_text(json.dumps(c_bw))
    return {p.name: p for p in d.iterdir()}


# ---------------------------------------------------------------------------- happy paths
def test_help_is_fast_and_lists_systems(tmp_path: Path) -> None:
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert "graph" in proc.stdout and "demo" in proc.stdout


def test_info_on_a_saved_graph(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run_inprocess("graph", "info", files["g.npz"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for word in ("tasks", "edges", "depth", "op histogram", "conv", "total FLOPs", "hardware types"):
        assert word in proc.stdout
    proc = run_inprocess("graph", "info", files["g.npz"], "--json", cwd=tmp_path)
    info = json.loads(proc.stdout)
    assert info["tasks"] == 4 and info["edges"] == 4 and info["depth"] == 3
    assert info["total_flops"] == pytest.approx(18.0)
    assert info["total_compute"] == pytest.approx(5.0)
    assert info["total_edge_bytes"] == pytest.approx(5.0)
    assert info["hw_types"] == {"0": 3, "1": 1}
    assert info["ops"]["conv"] == 1


def test_generate_info_simulate_round_trip(tmp_path: Path) -> None:
    proc = run_inprocess(
        "graph", "generate", "--out", "g.npz", "--tasks", "30", "--types", "2",
        "--cluster-out", "c.json", "--devices", "4", "--seed", "3", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "g.npz").is_file() and (tmp_path / "c.json").is_file()
    info = json.loads(run_inprocess("graph", "info", "g.npz", "--json", cwd=tmp_path).stdout)
    assert info["tasks"] == 30

    proc = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--out", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "random" in proc.stderr  # says it used a random placement
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["makespan"] > 0
    assert result["slr"] >= 1.0 - 1e-9
    assert result["cp_min"] > 0
    assert len(result["schedule"]["tasks"]) == 30
    assert (tmp_path / "run" / "gantt.png").read_bytes()[:8] == PNG_MAGIC

    # result.json can be fed back as the placement: same makespan
    proc = run_inprocess(
        "graph", "simulate", "g.npz", "--cluster", "c.json", "--placement", "run/result.json", "--out", "run2",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    again = json.loads((tmp_path / "run2" / "result.json").read_text())
    assert again["makespan"] == pytest.approx(result["makespan"])


def test_simulate_with_a_placement_file(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run_inprocess(
        "graph", "simulate", files["g.npz"], "--cluster", files["c.json"], "--placement", files["p_ok.json"],
        "--out", "run", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["placement"] == json.loads(files["p_ok.json"].read_text())
    # a(gpu,1s) -> b(gpu,2s) -> d ; a -> c(cpu, 1.5/2 = .75s + comm .1 + 2/4) ; d(gpu, .5) after b at 3
    assert result["makespan"] == pytest.approx(3.5)
    settings = json.loads((tmp_path / "run" / "settings.json").read_text())
    assert settings == {
        "command": "graph simulate",
        "source": str(files["g.npz"]),
        "cluster": str(files["c.json"]),
        "seed": 0,
        "devices": None,
        "num_tasks": 100,
        "input_shape": None,
        "execution": "fifo",
        "placement": str(files["p_ok.json"]),
    }
    files_written = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert files_written == ["cluster.json", "gantt.png", "log.txt", "result.json", "settings.json"]
    # the cluster it ran on, usable outside mlsysopt and by --cluster again
    saved = DeviceCluster.load(tmp_path / "run" / "cluster.json")
    assert saved.names == ["gpu", "cpu"] and saved.speed.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------- user errors: exit 2, one line
@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("x.txt", "unknown file format"),
        ("cyclic.npz", "cycle"),
        ("out_of_range.npz", "out of range"),
        ("nan.npz", "nan"),
        ("empty.npz", "empty"),
        ("missing.npz", "no such file"),
    ],
)
def test_bad_graph_files(files: dict[str, Path], tmp_path: Path, name: str, needle: str) -> None:
    path = files.get(name, tmp_path / name)
    assert_user_error(run_inprocess("graph", "info", path, cwd=tmp_path), needle)


@pytest.mark.parametrize(
    ("placement", "needle"),
    [
        ("p_unknown_task.json", "unknown task 'zzz'"),
        ("p_unknown_device.json", "unknown device 'tpu'"),
        ("p_hw_type.json", "hardware type 1"),
    ],
)
def test_bad_placements(files: dict[str, Path], tmp_path: Path, placement: str, needle: str) -> None:
    proc = run_inprocess(
        "graph", "simulate", files["g.npz"], "--cluster", files["c.json"], "--placement", files[placement],
        "--out", "run", cwd=tmp_path,
    )  # fmt: skip
    assert_user_error(proc, needle)
    assert not (tmp_path / "run").exists()  # validated before the run dir is created


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.npz", "--cluster", "c.json"], "no such file"),
        (["g.npz", "--cluster", "missing.json"], "missing.json: no such file"),
        (["g.npz", "--cluster", "c.json", "--placement", "deep.json"], "nested deeper"),
        (["g.npz", "--cluster", "c.json", "--placement", "x.txt"], "not valid JSON"),
        (["cyclic.npz", "--cluster", "c.json"], "cycle"),
    ],
)
def test_refused_simulate_inputs_leave_no_run_folder(
    files: dict[str, Path], tmp_path: Path, args: list[str], needle: str
) -> None:
    (tmp_path / "deep.json").write_text("{" + '"a": {' * 100 + "}" * 101)
    paths = [str(files.get(a, tmp_path / a)) if a.endswith((".npz", ".json", ".txt")) else a for a in args]
    assert_user_error(run_inprocess("graph", "simulate", *paths, "--out", "run", cwd=tmp_path), needle)
    assert not (tmp_path / "run").exists()


def test_simulate_refuses_a_busy_run_folder(files: dict[str, Path], tmp_path: Path) -> None:
    from mlsysopt.io import RunDir

    with RunDir(tmp_path / "busy", {"command": "held by the test"}, checkpoint=None):
        proc = run_inprocess(
            "graph", "simulate", files["g.npz"], "--cluster", files["c.json"], "--out", "busy", cwd=tmp_path
        )
        assert_user_error(proc, f"--out busy is in use by process {os.getpid()}")
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["log.txt", "settings.json"]


@pytest.mark.parametrize(("cluster", "needle"), [("c_speed.json", "speed"), ("c_bandwidth.json", "bandwidth")])
def test_bad_clusters(files: dict[str, Path], tmp_path: Path, cluster: str, needle: str) -> None:
    proc = run_inprocess("graph", "simulate", files["g.npz"], "--cluster", files[cluster], "--out", "run", cwd=tmp_path)
    assert_user_error(proc, needle)
    assert not (tmp_path / "run").exists()


def test_simulate_option_errors(files: dict[str, Path], tmp_path: Path) -> None:
    assert_user_error(run_inprocess("graph", "simulate", files["g.npz"], "--out", "run", cwd=tmp_path), "--cluster")
    proc = run_inprocess(
        "graph", "simulate", files["g.npz"], "--cluster", files["c.json"], "--placement", files["p_ok.json"],
        "--random", "--out", "run", cwd=tmp_path,
    )  # fmt: skip
    assert_user_error(proc, "not both")
    assert not (tmp_path / "run").exists()
    proc = run_inprocess("graph", "generate", "--out", "g.txt", cwd=tmp_path)
    assert_user_error(proc, ".npz")
    # click usage errors keep click's exit code 2
    proc = run_inprocess("graph", "generate", "--tasks", "0", "--out", "g.npz", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------- demo
def test_demo_writes_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the serving and nas sections have their own demo tests (tests/test_cli_serving.py, tests/test_cli_nas.py)
    from mlsysopt.demo import placement

    # the placement section at smaller sizes (its searches at 10 evaluations per task and its tiny training are most
    # of this test's time): the same steps, methods, plots and summary, which is what is checked here
    monkeypatch.setattr(placement, "default_budget", lambda graph: 60)
    small = {"imitation_problems": 2, "teacher_steps": 2, "imitation_epochs": 1, "updates": 1}
    monkeypatch.setattr(placement, "DEMO_TRAINING", {**placement.DEMO_TRAINING, **small})
    only = "cnn,montage,placement"
    proc = run_inprocess("demo", "--out", "demo", "--seed", "0", "--only", only, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "demo"
    result = json.loads((out / "result.json").read_text())
    assert result["sections"] == ["cnn", "montage", "placement"]
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 7  # cnn 2, montage 2, placement 3 (search curves, best Gantt, adaptation)
    html = (out / "index.html").read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert f'data-file="{png.name}"' in html
    for key in ("cnn", "montage"):
        r = result[key]
        assert r["cp_min"] > 0
        for label in ("random", "fastest device"):
            assert r["placements"][label]["makespan"] >= r["cp_min"] * (1 - 1e-9)
    assert "http" not in re.sub(r'src="data:[^"]*"', "", html)  # no network resources (base64 aside)
    assert 'id="summary"' in html and "summary unavailable" not in html  # the summary reads placement's result
    device = result["placement"]["device_model"]  # this CPU's op profile against one speed, on three zoo models
    assert sorted(device["models"]) == ["cnn", "mobilenet", "transformer"]
    assert all(m["measured_s"] > 0 and m["op_profile_s"] > 0 for m in device["models"].values())
    assert 'id="placement-device-model"' in html


@pytest.mark.usefixtures("small_costmodel_demo")
def test_demo_runs_again_into_its_own_folder(tmp_path: Path) -> None:
    # `make demo` twice: the second run regenerates the synthetic data it wrote the first time, same figures.
    # The section's own sizes made smaller (about a minute for two runs otherwise); what is checked is the same.
    first = run_inprocess("demo", "--out", "demo", "--only", "costmodel", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    result = json.loads((tmp_path / "demo" / "result.json").read_text())
    before, oracle = result["costmodel_quality"], result["costmodel_oracle"]
    again = run_inprocess("demo", "--out", "demo", "--only", "costmodel", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    result = json.loads((tmp_path / "demo" / "result.json").read_text())
    after = result["costmodel_quality"]
    # the oracle section: every op-level setting predicted and measured, the same predictions on a second run
    predicted = oracle["shortlist"]["predicted"]
    assert len(predicted) == len(oracle["measured_ms"]) >= 2 and all(t > 0 for t in oracle["measured_ms"].values())
    assert result["costmodel_oracle"]["shortlist"]["predicted"] == predicted
    for res in (before, after):  # seconds per epoch are timings
        for row in res["modes"].values():
            row.pop("epoch_s")
    assert after["modes"] == before["modes"] and after["headline"] == before["headline"]


# ---------------------------------------------------------------------------- importers through the CLI
UNTRACEABLE = """
import torch
from torch import nn


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


def branchy():
    return Branchy(), (torch.ones(2, 3),)


def tiny():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (torch.ones(1, 4),)
"""


def test_import_spec_onnx_and_untraceable(tmp_path: Path) -> None:
    (tmp_path / "mymodels.py").write_text(UNTRACEABLE)
    proc = run_inprocess("graph", "import", "mymodels:tiny", "--out", "tiny.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    g = CompGraph.load(tmp_path / "tiny.npz")
    assert g.total_flops == 2 * 4 * 8 + 8 + 8 + 2 * 8 * 2 + 2  # two linears with bias, one relu
    assert_user_error(run_inprocess("graph", "info", "mymodels:branchy", cwd=tmp_path), "trace", "x.sum() > 0")

    from mlsysopt.graph.importers.onnx import export_onnx
    from mlsysopt.zoo import get

    export_onnx(*get("cnn"), tmp_path / "cnn.onnx")
    proc = run_inprocess("graph", "info", "cnn.onnx", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["tasks"] > 5 and info["total_flops"] > 1e6


def test_wfcommons_json_missing_field(tmp_path: Path) -> None:
    wf = {
        "name": "w",
        "schemaVersion": "1.5",
        "workflow": {
            "specification": {"tasks": [{"name": "a", "id": "a", "parents": [], "children": []}], "files": []},
            "execution": {"tasks": [{"runtimeInSeconds": 3.0}]},
        },
    }
    (tmp_path / "wf.json").write_text(json.dumps(wf))
    assert_user_error(run_inprocess("graph", "info", "wf.json", cwd=tmp_path), "wf.json", "'id'")
