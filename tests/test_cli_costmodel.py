"""``mlsysopt costmodel synth | train | evaluate | predict`` run for real on tiny synthetic data, plus bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.cli_helpers import PNG_MAGIC, assert_user_error, run

TINY = ("--segment-size", "150", "--configs-per-graph", "6", "--hidden", "16", "--layers", "2")


@pytest.fixture(scope="module")
def layout_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cm")
    proc = run(
        "costmodel", "synth", "layout", "--out", "data", "--graphs", "train=3,valid=1,test=1",
        "--nodes", "200-400", "--configs", "8", cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "SYNTHETIC" in proc.stdout
    return root


def test_synth_writes_the_published_layout_format(layout_root: Path) -> None:
    files = sorted((layout_root / "data").glob("*/*.npz"))
    assert [f.parent.name for f in files].count("train") == 3 and len(files) == 5
    with np.load(files[0]) as z:
        assert {"node_feat", "node_opcode", "edge_index", "node_config_ids", "node_config_feat"} <= set(z.files)
        assert z["node_feat"].shape[1] == 140 and z["edge_index"].shape[1] == 2
        assert z["node_config_feat"].shape[0] == z["config_runtime"].shape[0] == 8


def test_train_writes_result_plots_checkpoint_then_resumes_and_evaluates(layout_root: Path) -> None:
    args = ("costmodel", "train", "--data", "data", "--out", "run", "--mode", "gst+efd", *TINY)
    proc = run(*args, "--epochs", "1", "--finetune-epochs", "1", cwd=layout_root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = layout_root / "run"
    res = json.loads((out / "result.json").read_text())
    assert [h["phase"] for h in res["history"]] == ["train", "finetune"]
    assert res["data"] == "SYNTHETIC" and res["task"] == "layout"
    assert 0.0 <= res["test"]["opa"] <= 1.0 and res["peak_step_mb"] > 0
    assert all(h["step_mb"] for h in res["history"])
    for png in ("training.png", "memory.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    # a second start without --resume is refused; with --resume and more epochs it continues the same run
    again = run(*args, "--epochs", "1", "--finetune-epochs", "1", cwd=layout_root)
    assert_user_error(again, "--resume")
    more = run(*args, "--epochs", "1", "--finetune-epochs", "2", "--resume", cwd=layout_root, timeout=300)
    assert more.returncode == 0, more.stderr
    res2 = json.loads((out / "result.json").read_text())
    assert [h["epoch"] for h in res2["history"]] == [1, 2, 3]
    assert res2["history"][0] == res["history"][0]
    ev = run("costmodel", "evaluate", "--run", "run", "--data", "data", "--out", "ev.json", cwd=layout_root)
    assert ev.returncode == 0, ev.stderr
    metrics = json.loads((layout_root / "ev.json").read_text())["metrics"]
    assert metrics["opa"] == pytest.approx(res2["test"]["opa"])
    one = sorted((layout_root / "data" / "test").glob("*.npz"))[0]
    pr = run("costmodel", "predict", "--run", "run", "--input", one, "--out", "p.json", cwd=layout_root)
    assert pr.returncode == 0, pr.stderr
    graphs = json.loads((layout_root / "p.json").read_text())["graphs"]
    (row,) = graphs.values()
    assert sorted(row["ranking"]) == list(range(8))
    assert row["scores"][row["ranking"][0]] == min(row["scores"])


def test_resume_with_other_settings_is_refused(layout_root: Path) -> None:
    args = ("costmodel", "train", "--data", "data", "--out", "r2", *TINY, "--epochs", "1", "--finetune-epochs", "0")
    assert run(*args, "--mode", "gst", cwd=layout_root, timeout=300).returncode == 0
    assert_user_error(run(*args, "--mode", "full", "--resume", cwd=layout_root), "--resume", "mode")


def test_malnet_synth_and_train(tmp_path: Path) -> None:
    proc = run("costmodel", "synth", "malnet", "--out", "mn", "--graphs", "3", "--nodes", "300-500", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mn" / "split_info" / "train.txt").is_file()
    args = ("costmodel", "train", "--data", "mn", "--out", "r", "--mode", "gst+efd", "--segment-size", "200")
    proc = run(*args, "--epochs", "1", "--finetune-epochs", "1", "--hidden", "16", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "r" / "result.json").read_text())
    assert res["task"] == "malnet" and 0.0 <= res["test"]["accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--segment-size", "0"), ("segment size",)),
        (("--mode", "gst+x"), ("unknown mode",)),
        (("--k", "0"), ("k must",)),
        (("--sed-p", "1.5"), ("SED probability",)),
    ],
)
def test_bad_training_options_are_one_clear_error(layout_root: Path, args: tuple[str, ...], needles: tuple) -> None:
    proc = run("costmodel", "train", "--data", "data", "--out", "bad", *args, cwd=layout_root)
    assert_user_error(proc, *needles)


def test_an_npz_missing_keys_is_one_clear_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "d" / "train").mkdir(parents=True)
    np.savez(tmp_path / "d" / "train" / "g.npz", node_feat=np.zeros((3, 140), np.float32))
    assert_user_error(run("costmodel", "train", "--data", "d", "--out", "r", cwd=tmp_path), "g.npz")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("train", "--data", "nowhere", "--out", "r"), "nowhere"),
        (("synth", "graphs", "--out", "x"), "unknown kind"),
        (("synth", "layout", "--out", "x", "--nodes", "9-3"), "--nodes"),
        (("evaluate", "--run", "none", "--data", "d"), "checkpoint"),
    ],
)
def test_bad_paths_and_options_are_one_clear_error(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(run("costmodel", *args, cwd=tmp_path), needle)
