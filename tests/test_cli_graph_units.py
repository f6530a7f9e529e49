"""Graph commands with real units (issue 13): presets, --devices, cluster.json, units in every table, unknown ops,
WfFormat 1.4 through the CLI, and the source kinds. In-process (``run_inprocess``) so they stay fast."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run_inprocess
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import homogeneous_cluster, random_cluster
from mlsysopt.graph.importers.expansion import recurrent_size

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn


    class TinyGRU(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(8, 16, batch_first=True)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            y, _ = self.gru(x)
            return self.head(y[:, -1])


    def tiny_gru():
        return TinyGRU(), (torch.randn(2, 5, 8),)


    def odd():
        class Odd(nn.Module):
            def forward(self, x):
                return x.sort(dim=-1)[0] + 1
        return Odd(), (torch.randn(3, 4),)
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(MODEL)
    return tmp_path


def test_info_of_a_gru_model_by_path_and_by_module(project: Path) -> None:
    for spec in ("./mymodel.py:tiny_gru", "mymodel:tiny_gru"):  # both kinds of factory source, no PYTHONPATH
        ran = run_inprocess("graph", "info", spec, "--json", cwd=project)
        assert ran.returncode == 0, ran.stderr
        info = json.loads(ran.stdout)
        # GRU: 10 steps x 2560 (see tests/graph/importers/test_flop_formulas.py); head 2*2*16*3 + 2*3
        assert info["total_flops"] == 10 * 2560 + 2 * 2 * 16 * 3 + 6
        assert info["units"]["system"] == "dnn" and info["units"]["compute"] == "FLOP"
        assert info["unknown_ops"] == {}


def test_unknown_ops_are_one_warning_and_in_the_json(project: Path) -> None:
    ran = run_inprocess("graph", "info", "mymodel.py:odd", "--json", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["unknown_ops"] == {"call_method:sort": 1}
    warnings = [ln for ln in ran.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "have no FLOP formula" in warnings[0] and "call_method:sort x1" in warnings[0]
    table = run_inprocess("graph", "info", "mymodel.py:odd", "--no-json", cwd=project)
    assert "ops without a FLOP formula (counted as 0 FLOPs): call_method:sort x1" in table.stdout
    assert "total FLOPs (FLOP)" in table.stdout and "total edge data (B)" in table.stdout


def test_simulate_with_a_preset_saves_its_cluster_and_states_units(project: Path) -> None:
    ran = run_inprocess("graph", "simulate", "mymodel.py:tiny_gru", "--cluster", "preset:gpu-node-pcie",
                        "--out", "run", cwd=project)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    run = project / "run"
    written = sorted(p.name for p in run.iterdir())
    assert written == ["cluster.json", "gantt.png", "log.txt", "result.json", "settings.json"]
    assert (run / "gantt.png").read_bytes()[:8] == PNG_MAGIC
    cluster = DeviceCluster.load(run / "cluster.json")
    assert cluster.units == "dnn" and cluster.names == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert cluster.speed[1] == 19.5e12  # A100 FP32, FLOP/s
    result = json.loads((run / "result.json").read_text())
    assert result["units"]["time"] == "s" and result["cluster_source"] == "preset:gpu-node-pcie"
    assert "makespan (s)" in ran.stdout and "CP_MIN, lower bound (s)" in ran.stdout
    assert result["makespan"] < 1.0  # a 26 kFLOP model on A100s: microseconds, not years


def test_place_says_a_gru_kept_whole_pays_its_overhead_once(project: Path) -> None:
    """`placement place` keeps a GRU one task (a device map places module calls) and says what that costs (#31)."""
    ran = run_inprocess("placement", "place", "mymodel.py:tiny_gru", "--cluster", "preset:gpu-node-pcie",
                        "--method", "heft", "--out", "p", cwd=project)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads((project / "p" / "result.json").read_text())
    said = [w for w in result["warnings"] if "one task each here" in w]
    # the input projection, 5 steps x 11 ops and the stacked output: the nodes `graph simulate` makes of it; the
    # preset's largest per-task overhead times the ops beyond the one paid bounds what the makespan misses
    ops = recurrent_size("gru", 5)
    overhead = max(DeviceCluster.load(project / "p" / "cluster.json").overhead)
    assert len(said) == 1 and f"GRU 'gru' ({ops} ops)" in said[0], result["warnings"]
    assert f"up to {(ops - 1) * overhead:.3g} s short" in said[0] and "graph simulate" in said[0]
    assert "warning: 1 layer(s) PyTorch runs as many ops are one task each here" in " ".join(ran.stdout.split())
    # `graph simulate` unrolls the layer, so it has nothing of the kind to say
    sim = run_inprocess("graph", "simulate", "mymodel.py:tiny_gru", "--cluster", "preset:gpu-node-pcie",
                        "--out", "s", cwd=project)  # fmt: skip
    assert sim.returncode == 0 and not any(
        "one task each" in w for w in json.loads((project / "s" / "result.json").read_text())["warnings"]
    )


def test_simulate_devices_builds_the_cluster_in_the_graph_units(project: Path) -> None:
    ran = run_inprocess("graph", "simulate", "montage", "--num-tasks", "60", "--devices", "3", "--out", "w",
                        cwd=project)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    cluster = json.loads((project / "w" / "cluster.json").read_text())
    assert cluster["units"]["system"] == "workflow" and len(cluster["names"]) == 3
    result = json.loads((project / "w" / "result.json").read_text())
    assert result["warnings"] == [] and result["slr"] < 1000


def test_the_issue_generate_cluster_on_a_dnn_graph_warns(project: Path) -> None:
    """graph generate's synthetic cluster (speed 1, bandwidth 1) under a DNN: years of makespan, now not silent."""
    random_cluster(3, num_types=1, speed_avg=1.0, bandwidth_avg=1.0).save(project / "c.json")
    ran = run_inprocess("graph", "simulate", "mymodel.py:tiny_gru", "--cluster", "c.json", "--out", "r", cwd=project)
    assert ran.returncode == 0, ran.stderr
    warnings = [ln for ln in ran.stderr.splitlines() if ln.startswith("warning:")]
    assert any("graph is in dnn units" in w and "built for synthetic units" in w for w in warnings)
    assert json.loads((project / "r" / "result.json").read_text())["warnings"]  # recorded, too


def test_generate_states_its_units_and_simulate_reads_them(tmp_path: Path) -> None:
    ran = run_inprocess("graph", "generate", "--out", "g.npz", "--tasks", "12", "--cluster-out", "c.json",
                        "--devices", "3", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "(synthetic units)" in ran.stdout
    assert json.loads((tmp_path / "c.json").read_text())["units"]["system"] == "synthetic"
    sim = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--out", "r", cwd=tmp_path)
    assert sim.returncode == 0 and "makespan (time units)" in sim.stdout
    assert [ln for ln in sim.stderr.splitlines() if ln.startswith("warning:")] == []


def test_simulate_needs_exactly_one_cluster(tmp_path: Path) -> None:
    homogeneous_cluster(2).save(tmp_path / "c.json")
    assert_user_error(run_inprocess("graph", "simulate", "zoo:cnn", "--out", "r", cwd=tmp_path), "--devices N")
    both = run_inprocess("graph", "simulate", "zoo:cnn", "--cluster", "c.json", "--devices", "2", "--out", "r",
                         cwd=tmp_path)  # fmt: skip
    assert_user_error(both, "either --cluster or --devices")
    assert_user_error(
        run_inprocess("graph", "simulate", "zoo:cnn", "--cluster", "preset:tpu", "--out", "r", cwd=tmp_path),
        "no cluster preset 'tpu'",
    )
    assert not (tmp_path / "r").exists()


def test_a_wfformat_14_file_through_the_cli(tmp_path: Path) -> None:
    task = {"type": "compute", "category": "mProject", "runtimeInSeconds": 13.25}
    x = {"name": "x", "sizeInBytes": 9}
    data = {
        "name": "pegasus-style",
        "schemaVersion": "1.4",
        "wms": {"name": "Pegasus", "version": "4.9.3"},
        "workflow": {
            "makespanInSeconds": 30.0,
            "executedAt": "20200413T031424+0000",
            "tasks": [
                {**task, "name": "a_ID01", "parents": [], "files": [{**x, "link": "output"}]},
                {**task, "name": "b_ID02", "parents": ["a_ID01"], "files": [{**x, "link": "input"}]},
                {**task, "name": "c_ID03", "parents": ["a_ID01"]},
                {"name": "d_ID04", "type": "compute", "parents": ["b_ID02", "c_ID03"]},  # no runtime (optional)
            ],
        },
    }  # fmt: skip
    (tmp_path / "wf.json").write_text(json.dumps(data))
    ran = run_inprocess("graph", "info", "wf.json", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    info = json.loads(ran.stdout)
    assert info["tasks"] == 4 and info["schema_version"] == "1.4" and info["tasks_without_runtime"] == 1
    assert info["units"]["compute"] == "s at speed 1"
    assert sum(ln.startswith("warning:") and "have no runtime" in ln for ln in ran.stderr.splitlines()) == 1
