"""``mlsysopt placement ...`` smoke tests: tiny budgets, clean one-line user errors. In-process (``run_inprocess``) so
they stay fast; one refusal of a folder another process holds runs in a subprocess (``run``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run, run_inprocess

ALL = "dev0,dev1,dev2,dev3,dev4"  # every device of the fixture cluster
ADAPT_WITH_BAD_PLACEMENT = "adapt g.npz --devices 3 --policy untrained.pt --remove dev1 --placement p_unknown_task.json"
TINY_TRAIN = (
    "--stages", "reinforce", "--updates", "2", "--episodes-per-update", "1", "--min-tasks", "8", "--max-tasks", "12",
    "--min-devices", "4", "--max-devices", "6",
)  # fmt: skip


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 24-task layered DAG with 2 hardware types and its 5-device cluster, an untrained policy, bad inputs."""
    d = tmp_path_factory.mktemp("placement_cli")
    proc = run_inprocess(
        "graph", "generate", "--out", "g.npz", "--tasks", "24", "--types", "2",
        "--cluster-out", "c.json", "--devices", "5", "--q", "0.7", "--seed", "1", cwd=d,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr

    from mlsysopt.placement.checkpoint import save_checkpoint
    from mlsysopt.placement.gpnet import EDGE_DIM, NODE_DIM
    from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

    save_checkpoint(d / "untrained.pt", GiPHPolicy(PolicyConfig(node_dim=NODE_DIM, edge_dim=EDGE_DIM)))
    (d / "garbage.pt").write_bytes(b"this is not a checkpoint\n" * 10)
    import torch

    other = 7 if NODE_DIM != 7 else NODE_DIM + 2
    torch.save({"kind": "giph-policy", "config": {"node_dim": other, "edge_dim": 5, "hidden": 32}, "policy": {}},
               d / "other_features.pt")  # fmt: skip

    cluster = json.loads((d / "c.json").read_text())
    n = len(cluster["names"])
    no_type_1 = {**cluster, "supports": [[1, 0]] * n}
    (d / "c_no_type1.json").write_text(json.dumps(no_type_1))
    delay = [[None if i == j else 0.1 for j in range(n)] for i in range(n)]
    delay[0][1] = delay[1][0] = "inf"
    (d / "c_inf_string.json").write_text(json.dumps({**cluster, "delay": delay}))
    text = json.dumps({**cluster, "delay": [[None if i == j else 0.1 for j in range(n)] for i in range(n)]})
    (d / "c_1e400.json").write_text(text.replace("0.1", "1e400", 1))

    with np.load(d / "g.npz", allow_pickle=False) as z:
        good = {k: z[k] for k in z.files}
    np.savez(d / "cyclic.npz", **{**good, "edge_index": np.array([[0, 1, 2], [1, 2, 0]]), "edge_bytes": np.ones(3)})
    (d / "p_unknown_task.json").write_text(json.dumps({"nope": "dev0"}))
    (d / "c_deep.json").write_text("[" * 500 + "]" * 500)
    return {p.name: p for p in d.iterdir()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A policy trained for two tiny updates through the CLI: (run dir, stdout + stderr)."""
    d = tmp_path_factory.mktemp("train")
    proc = run_inprocess("placement", "train", "--out", "run", *TINY_TRAIN, cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d / "run", proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- happy paths
def test_train_writes_checkpoint_result_and_plot(trained: tuple[Path, str], tmp_path: Path) -> None:
    run_dir, output = trained
    assert "synthetic training data (layered DAGs + random clusters)" in output
    assert (run_dir / "policy.pt").is_file()
    assert (run_dir / "training.png").read_bytes()[:8] == PNG_MAGIC
    result = json.loads((run_dir / "result.json").read_text())
    assert result["data"] == "synthetic training data (layered DAGs + random clusters)"
    assert result["config"]["updates"] == 2 and result["config"]["max_tasks"] == 12
    assert len(result["history"]) == 2
    assert {"improvement", "entropy", "loss"} <= set(result["history"][0])
    settings = json.loads((run_dir / "settings.json").read_text())
    assert settings["updates"] == 2 and settings["max_tasks"] == 12 and settings["lr"] == 0.01
    written = sorted(p.name for p in run_dir.iterdir())
    assert written == ["log.txt", "policy.pt", "result.json", "settings.json", "training.png"]

    # --resume continues the saved run; a fresh train refuses to overwrite it
    shutil.copytree(run_dir, tmp_path / "run")
    proc = run_inprocess("placement", "train", "--out", "run", "--resume", "--updates", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads((tmp_path / "run" / "result.json").read_text())["history"]) == 3
    assert_user_error(run_inprocess("placement", "train", "--out", "run", cwd=tmp_path), "--resume")
    # --resume keeps the saved settings: a changed one is named, and nothing in the run folder changes
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()}
    proc = run_inprocess(
        "placement", "train", "--out", "run", "--resume", "--lr", "0.5", "--max-tasks", "12", cwd=tmp_path
    )
    assert_user_error(proc, "other settings", "lr 0.01 (now 0.5)")
    assert "max_tasks" not in proc.stderr  # unchanged settings are not named
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "run").iterdir()} == before


def test_place_with_giph_and_heft(files: dict[str, Path], trained: tuple[Path, str], tmp_path: Path) -> None:
    policy = trained[0] / "policy.pt"
    proc = run_inprocess(
        "placement", "place", files["g.npz"], "--cluster", files["c.json"], "--method", "giph",
        "--policy", policy, "--budget", "30", "--out", "giph", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = run_inprocess(
        "placement", "place", files["g.npz"], "--devices", "4", "--method", "heft", "--out", "heft", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    for name, evaluations in (("giph", 30), ("heft", 1)):
        out = tmp_path / name
        for png in ("gantt.png", "search.png"):
            assert (out / png).read_bytes()[:8] == PNG_MAGIC
        result = json.loads((out / "result.json").read_text())
        assert result["method"] == name
        assert result["evaluations"] == evaluations == len(result["history"])
        assert result["makespan"] >= result["cp_min"] * (1 - 1e-9)
        assert result["schedule"]["makespan"] == pytest.approx(result["makespan"])
        placement = json.loads((out / "placement.json").read_text())
        assert len(placement) == 24 and set(placement.values()) <= set(result["cluster"]["names"])
    assert len(json.loads((tmp_path / "heft" / "result.json").read_text())["cluster"]["names"]) == 4
    assert "makespan (s)" in proc.stdout and "CP_MIN, lower bound (s)" in proc.stdout
    assert "comparison" in proc.stdout and "all on the fastest device" in proc.stdout
    giph = json.loads((tmp_path / "giph" / "result.json").read_text())
    assert set(giph["comparison"]["members"]) >= {"heft", "fastest_device", "saga_cpop", "saga_best"}
    assert giph["comparison"]["better"] == [] and giph["makespan"] <= min(giph["comparison"]["members"].values())
    # the drawn cluster is saved: with placement.json it reproduces the makespan outside the run
    from mlsysopt.graph import CompGraph, DeviceCluster, simulate
    from mlsysopt.graph.placement import load_placement

    heft = json.loads((tmp_path / "heft" / "result.json").read_text())
    drawn = DeviceCluster.load(tmp_path / "heft" / "cluster.json")
    graph = CompGraph.load(files["g.npz"])
    placement = load_placement(tmp_path / "heft" / "placement.json", graph, drawn)
    assert simulate(graph, drawn, placement).makespan == pytest.approx(heft["makespan"], rel=1e-12)
    assert not (tmp_path / "heft" / "device_map.json").exists()  # not a PyTorch graph
    settings = json.loads((tmp_path / "giph" / "settings.json").read_text())
    assert settings["command"] == "placement place" and settings["method"] == "giph" and settings["budget"] == 30
    assert settings["policy"] == str(policy) and "out" not in settings


def test_compare_two_seeds(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run_inprocess(
        "placement", "compare", files["g.npz"], "--cluster", files["c.json"], "--policy", files["untrained.pt"],
        "--seeds", "2", "--budget", "20", "--out", "cmp", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "cmp" / "result.json").read_text())
    from mlsysopt.placement import METHODS

    methods = [m for m, spec in METHODS.items() if spec.default and m not in result["skipped"]]
    assert {"fastest_device", "saga_heft", "saga_cpop", "saga_best", "local_search", "giph"} <= set(methods)
    assert list(result["results"]) == methods and result["seeds"] == [0, 1]
    assert result["results"]["saga_cpop"]["info"][0]["saga_makespan"] > 0  # saga's own makespan, beside ours
    assert "saga's" in proc.stdout  # its column (the header may wrap in 80 columns)
    assert result["results"]["giph"]["stopped_by"] == ["budget", "budget"]
    for name, r in result["results"].items():
        assert len(r["makespans"]) == 2 and r["min_makespan"] <= r["mean_makespan"]
        assert r["min_makespan"] >= result["cp_min"] * (1 - 1e-9)
        assert r["mean_ratio_to_heft"] == pytest.approx(r["mean_makespan"] / result["heft_makespan"])
        assert 1 <= r["mean_steps_to_best"] <= 20, name
        assert r["stopped_by"] == ["budget", "budget"], name  # per search (seed), as the README says
    assert result["results"]["giph"]["mean_makespan"] <= result["results"]["heft"]["mean_makespan"]
    assert result["results"]["heft"]["mean_ratio_to_heft"] == pytest.approx(1.0)
    assert (tmp_path / "cmp" / "search.png").read_bytes()[:8] == PNG_MAGIC

    # without --policy the shipped policy runs GiPH; the table states its units
    proc = run_inprocess(
        "placement", "compare", files["g.npz"], "--devices", "3", "--methods", "heft,giph_from_heft",
        "--seeds", "1", "--budget", "10", "--out", "cmp2", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "(s)" in proc.stdout and "CP_MIN" in proc.stdout
    result = json.loads((tmp_path / "cmp2" / "result.json").read_text())
    assert result["policy"] == "pretrained" and list(result["results"]) == ["heft", "giph_from_heft"]
    assert result["units"]["makespan"] == "s"
    assert json.loads((tmp_path / "cmp2" / "cluster.json").read_text()) == result["cluster"]


def test_adapt_after_removing_devices(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run_inprocess(
        "placement", "adapt", files["g.npz"], "--cluster", files["c.json"], "--policy", files["untrained.pt"],
        "--remove", "dev1,dev3", "--add", "1", "--budget", "20", "--out", "ad", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "ad"
    result = json.loads((out / "result.json").read_text())
    assert set(result["makespans"]) == {"giph_adapt", "heft_rerun", "keep"}
    names = result["cluster"]["names"]
    assert "dev1" not in names and "dev3" not in names and result["added"] == ["dev5"] and len(names) == 4
    assert result["makespans"]["giph_adapt"] <= result["makespans"]["keep"] + 1e-9  # GiPH starts from "keep"
    assert result["makespans"]["giph_adapt"] <= result["makespans"]["heft_rerun"] + 1e-9  # and from HEFT's
    placement = json.loads((out / "placement.json").read_text())
    assert set(placement.values()) <= set(names)
    assert (out / "gantt.png").read_bytes()[:8] == PNG_MAGIC


# ---------------------------------------------------------------------------- user errors: exit 2, one line, no run dir
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ["place", "g.npz", "--devices", "3", "--method", "giph", "--policy", "garbage.pt"],
            ["garbage.pt", "not a readable checkpoint"],
        ),
        (
            ["place", "g.npz", "--devices", "3", "--method", "giph", "--policy", "other_features.pt"],
            ["other_features.pt", "features"],
        ),
        (["place", "g.npz", "--devices", "3", "--policy", "untrained.pt"], ["uses no policy", "--method giph"]),
        (["place", "g.npz", "--cluster", "c_no_type1.json", "--method", "heft"], ["task 't", "hardware type 1"]),
        (
            ["place", "g.npz", "--cluster", "c_inf_string.json", "--method", "heft"],
            ["c_inf_string.json", "'delay'[0][1]"],
        ),
        (["place", "g.npz", "--cluster", "c_1e400.json", "--method", "heft"], ["'dev0' -> 'dev1'", "delay"]),
        (["place", "cyclic.npz", "--devices", "2", "--method", "heft"], ["cycle"]),
        (["adapt", "g.npz", "--cluster", "c.json", "--policy", "untrained.pt", "--remove", "dev99"], ["'dev99'"]),
        (["adapt", "g.npz", "--cluster", "c.json", "--policy", "untrained.pt", "--remove", ALL], ["every device"]),
        (["adapt", "g.npz", "--cluster", "c.json", "--policy", "untrained.pt"], ["--remove", "--add"]),
        (["place", "g.npz", "--devices", "3", "--method", "nope"], ["unknown method 'nope'"]),
        (["place", "g.npz", "--devices", "3", "--method", "heft", "--init", "best"], ["--init 'best'"]),
        (["place", "g.npz", "--devices", "3", "--policy", "missing.pt"], ["missing.pt", "no such checkpoint"]),
        (["place", "g.npz", "--devices", "3", "--cluster", "c.json", "--method", "heft"], ["not both"]),
        (["place", "g.npz", "--method", "heft"], ["no devices"]),
        (["place", "g.npz", "--cluster", "c_deep.json", "--method", "heft"], ["c_deep.json", "nested deeper"]),
        (["compare", "g.npz", "--devices", "3", "--methods", "heft,nope"], ["unknown method 'nope'"]),
        (["compare", "g.npz", "--devices", "3", "--policy", "missing.pt"], ["missing.pt"]),
        (["compare", "g.npz", "--cluster", "c_no_type1.json"], ["task 't", "hardware type 1"]),
        (["compare", "g.npz", "--devices", "3", "--policy", "garbage.pt"], ["garbage.pt", "not a readable checkpoint"]),
        (["adapt", "g.npz", "--cluster", "c.json", "--policy", "garbage.pt", "--remove", "dev1"], ["garbage.pt"]),
        (ADAPT_WITH_BAD_PLACEMENT, ["p_unknown_task.json", "unknown task 'nope'"]),
        (["train", "--backend", "mpi"], ["unknown backend 'mpi'"]),
        (["train", "--min-tasks", "12", "--max-tasks", "10"], ["min_tasks <= max_tasks"]),
        (["train", "--resume"], ["--resume", "no checkpoint"]),
        (["train", "--lr", "inf"], ["--lr inf", "finite number > 0"]),
        (["train", "--lr", "nan"], ["--lr nan", "finite number > 0"]),
        (["train", "--lr", "-0.5"], ["--lr -0.5", "finite number > 0"]),
        (["train", "--updates", "1.5"], ["--updates '1.5'", "whole number"]),
        (["train", "--hidden", "true"], ["--hidden 'true'", "whole number"]),
        (["train", "--max-tasks", "100000"], ["--max-tasks 100000", "of memory, over the limit", "at most"]),
        (["train", "--updates", "1000000000"], ["over the limit of 7 days", "at most --updates"]),
        (["place", "g.npz", "--devices", "1.5"], ["--devices '1.5'"]),
        (["place", "g.npz", "--devices", "10000000", "--method", "heft"], ["--devices 10000000", "at most --devices"]),
        (["place", "montage", "--num-tasks", "1000000000", "--devices", "3"], ["'--num-tasks'", "or equal to"]),
        (["compare", "g.npz", "--devices", "3", "--seeds", "true"], ["--seeds 'true'"]),
        (
            ["compare", "g.npz", "--devices", "3", "--methods", "heft,random", "--budget", "100000000000"],
            ["over the limit of 7 days", "--timeout"],
        ),
        (["compare", "g.npz", "--devices", "3", "--address", "auto"], ["--address is for --backend ray"]),
        (["adapt", "g.npz", "--devices", "3", "--remove", "dev0", "--policy", "missing.pt"], ["missing.pt"]),
    ],
)
def test_user_errors(files: dict[str, Path], tmp_path: Path, args: list[str] | str, needles: list[str]) -> None:
    args = args.split() if isinstance(args, str) else args
    for name in ("g.npz", "cyclic.npz", "c.json", "c_no_type1.json", "c_inf_string.json", "c_1e400.json"):
        shutil.copy(files[name], tmp_path / name)
    for name in ("c_deep.json", "p_unknown_task.json"):
        shutil.copy(files[name], tmp_path / name)
    for name in ("garbage.pt", "other_features.pt", "untrained.pt"):
        shutil.copy(files[name], tmp_path / name)
    proc = run_inprocess("placement", *args, "--out", "run", cwd=tmp_path)
    assert_user_error(proc, *needles)
    assert not (tmp_path / "run").exists()


def test_a_pytorch_model_is_placed_with_no_extra_flag_and_its_device_map_moves_the_model(tmp_path: Path) -> None:
    proc = run_inprocess("placement", "place", "zoo:cnn", "--devices", "3", "--out", "p", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "p" / "result.json").read_text())
    assert result["method"] == "local_search" and result["policy"] is None  # the default: the portfolio's search
    assert "device_map.json" in proc.stdout and "cluster.json" in proc.stdout
    proc = run_inprocess(
        "placement", "adapt", "zoo:cnn", "--devices", "3", "--add", "1", "--budget", "8", "--out", "a", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "a" / "old_cluster.json").read_text())["names"] == ["dev0", "dev1", "dev2"]

    import torch

    from mlsysopt import zoo
    from mlsysopt.placement.devicemap import apply_device_map

    for run_dir, placement_file in (("p", "placement.json"), ("a", "placement.json")):
        dmap = json.loads((tmp_path / run_dir / "device_map.json").read_text())
        placement = json.loads((tmp_path / run_dir / placement_file).read_text())
        assert {n: v["device"] for n, v in dmap["nodes"].items()} == placement
        model, inputs = zoo.get("cnn")
        expected = model(*inputs)
        head = [m for m in dmap["modules"] if list(model.get_submodule(m).parameters())][-1]  # the classifier
        where = {d: ("meta" if d == dmap["modules"][head] else "cpu") for d in dmap["devices"]}
        apply_device_map(model, dmap, where)
        assert {p.device.type for p in model.get_submodule(head).parameters()} == {"meta"}
        for name, device in dmap["modules"].items():
            for tensor in model.get_submodule(name).parameters():
                assert tensor.device.type == where[device], name
        model, inputs = zoo.get("cnn")
        moved = apply_device_map(model, dmap, dict.fromkeys(dmap["devices"], "cpu"))
        assert torch.equal(moved(*inputs), expected)


def test_help_shows_every_default_and_booleans_as_pairs(tmp_path: Path) -> None:
    train_help = run_inprocess("placement", "train", "--help", cwd=tmp_path).stdout
    for text in ("[default: 50]", "[default: 0.01]", "--no-resume", "--timeout", "--address", "--workers"):
        assert text in train_help, text
    compare_help = run_inprocess("placement", "compare", "--help", cwd=tmp_path).stdout
    for text in ("[default: pretrained]", "[default: 3]", "--workers", "--backend", "--timeout"):
        assert text in compare_help, text


def test_place_with_the_pretrained_policy(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run_inprocess(
        "placement", "place", files["g.npz"], "--cluster", files["c.json"], "--method", "giph_from_heft",
        "--policy", "pretrained", "--out", "pre", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "pre" / "result.json").read_text())
    assert result["evaluations"] == 10 * 24  # the default budget
    heft = json.loads((tmp_path / "pre" / "result.json").read_text())["history"][0]
    assert result["makespan"] <= heft  # starts at HEFT's placement and keeps the best


def test_a_busy_run_folder_is_refused_naming_the_process(files: dict[str, Path], tmp_path: Path) -> None:
    from mlsysopt.io import RunDir

    g, c, policy = files["g.npz"], files["c.json"], files["untrained.pt"]
    commands = [
        ["train", *TINY_TRAIN],
        ["place", g, "--cluster", c, "--method", "heft"],
        ["compare", g, "--cluster", c, "--seeds", "1", "--budget", "4"],
        ["adapt", g, "--cluster", c, "--policy", policy, "--remove", "dev1", "--budget", "4"],
    ]
    busy = tmp_path / "busy"
    with RunDir(busy, {"command": "held by the test"}, checkpoint=None):
        for args in commands:  # the lock is an flock: another open of it is refused in this process too
            proc = run_inprocess("placement", *args, "--out", busy, cwd=tmp_path)
            assert_user_error(proc, f"--out {busy} is in use by process {os.getpid()}")
        proc = run("placement", *commands[1], "--out", busy, cwd=tmp_path)  # and from another process
        assert_user_error(proc, f"--out {busy} is in use by process {os.getpid()}")
    assert sorted(p.name for p in busy.iterdir()) == ["log.txt", "settings.json"]
    assert json.loads((busy / "settings.json").read_text()) == {"command": "held by the test"}


def test_presets_work_in_every_placement_command(tmp_path: Path) -> None:
    ran = run_inprocess("placement", "place", "zoo:cnn", "--cluster", "preset:edge", "--out", "p", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads((tmp_path / "p" / "result.json").read_text())
    assert result["cluster_source"] == "preset:edge" and result["method"] == "local_search"
    assert result["comparison"]["final_over_heft"] <= 1.0 + 1e-12
    ran = run_inprocess(
        "placement", "compare", "montage", "--num-tasks", "60", "--cluster", "preset:gpu-node-pcie",
        "--methods", "heft,fastest_device,saga_best", "--seeds", "1", "--out", "c", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert set(json.loads((tmp_path / "c" / "result.json").read_text())["results"]) == {
        "heft",
        "fastest_device",
        "saga_best",
    }
    ran = run_inprocess(
        "placement", "adapt", "zoo:cnn", "--cluster", "preset:gpu-node-nvlink", "--remove", "gpu0", "--budget", "30",
        "--out", "a", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "gpu0" not in json.loads((tmp_path / "a" / "result.json").read_text())["cluster"]["names"]
    ran = run_inprocess("placement", "place", "zoo:cnn", "--cluster", "preset:nope", "--out", "x", cwd=tmp_path)
    assert ran.returncode == 2 and "no cluster preset 'nope'" in ran.stderr and not (tmp_path / "x").exists()


def test_place_warns_when_a_portfolio_member_beats_the_method(tmp_path: Path) -> None:
    ran = run_inprocess(
        "placement", "place", "zoo:transformer", "--cluster", "preset:edge", "--method", "random", "--budget", "3",
        "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert "heft" in result["comparison"]["better"] and result["comparison"]["final_over_heft"] > 1
    assert "warning:" in ran.stdout and "worse than" in ran.stdout
