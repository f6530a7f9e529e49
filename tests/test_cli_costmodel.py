"""``mlsysopt costmodel synth | train | evaluate | predict`` run for real on tiny synthetic data, plus bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run, run_inprocess

TINY = ("--segment-size", "150", "--configs-per-graph", "6", "--hidden", "16", "--layers", "2")


# The CLI runs in this process (run_inprocess) unless a test needs its own (a kill, a lock held by another process).
# The shared folders are session-scoped: the suite runs the longest tests first, so this module's tests may not run
# one after another, and a module-scoped folder would be made again each time they resume.
@pytest.fixture(scope="session")
def layout_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cm")
    proc = run_inprocess(
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
    proc = run_inprocess(*args, "--epochs", "1", "--finetune-epochs", "1", cwd=layout_root)
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
    again = run_inprocess(*args, "--epochs", "1", "--finetune-epochs", "1", cwd=layout_root)
    assert_user_error(again, "--resume")
    more = run_inprocess(*args, "--epochs", "1", "--finetune-epochs", "2", "--resume", cwd=layout_root)
    assert more.returncode == 0, more.stderr
    res2 = json.loads((out / "result.json").read_text())
    assert [h["epoch"] for h in res2["history"]] == [1, 2, 3]
    assert res2["history"][0] == res["history"][0]
    ev = run_inprocess("costmodel", "evaluate", "--run", "run", "--data", "data", "--out", "ev", cwd=layout_root)
    assert ev.returncode == 0, ev.stderr
    metrics = json.loads((layout_root / "ev" / "result.json").read_text())["metrics"]
    assert metrics["opa"] == pytest.approx(res2["test"]["opa"])
    assert json.loads((layout_root / "ev" / "settings.json").read_text())["split"] == "test"
    one = sorted((layout_root / "data" / "test").glob("*.npz"))[0]
    pr = run_inprocess("costmodel", "predict", "--run", "run", "--input", one, "--out", "p", cwd=layout_root)
    assert pr.returncode == 0, pr.stderr
    graphs = json.loads((layout_root / "p" / "result.json").read_text())["graphs"]
    (row,) = graphs.values()
    assert sorted(row["ranking"]) == list(range(8))
    assert row["scores"][row["ranking"][0]] == min(row["scores"])
    # a split folder (as in the README) predicts every graph in it, with the same scores for the one above
    split = run_inprocess(
        "costmodel", "predict", "--run", "run", "--input", "data/test", "--out", "ps", cwd=layout_root
    )
    assert split.returncode == 0, split.stderr
    every = json.loads((layout_root / "ps" / "result.json").read_text())["graphs"]
    assert list(every) == [one.stem] and every[one.stem] == row


def test_resume_with_other_settings_is_refused(layout_root: Path, trained: Path) -> None:
    args = ("costmodel", "train", "--data", "data", "--out", "trained", *TINY, "--epochs", "1")  # trained in gst mode
    proc = run_inprocess(*args, "--finetune-epochs", "0", "--mode", "full", "--resume", cwd=layout_root)
    assert_user_error(proc, "--resume", "mode")


def test_malnet_synth_and_train(tmp_path: Path) -> None:
    proc = run_inprocess(
        "costmodel", "synth", "malnet", "--out", "mn", "--graphs", "3", "--nodes", "300-500", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mn" / "split_info" / "train.txt").is_file()
    args = ("costmodel", "train", "--data", "mn", "--out", "r", "--mode", "gst+efd", "--segment-size", "200")
    proc = run_inprocess(*args, "--epochs", "1", "--finetune-epochs", "1", "--hidden", "16", cwd=tmp_path)
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
        (("--refresh", "sometimes"), ("unknown refresh 'sometimes'",)),
        (("--sample", "all"), ("unknown sample 'all'",)),
        (("--hidden", "100000"), ("--hidden 100,000 is above the limit",)),
        (("--validate-every", "0"), ("validate every must be an integer >= 1",)),
        (("--mode", "trees", "--workers", "2", "--graphs-per-step", "2"), ("no --workers",)),
        (("--mode", "lightgbm", "--rounds", "0"), ("--rounds 0", "between 1 and 10,000")),
        (("--mode", "trees", "--rounds", "10001"), ("--rounds 10001", "between 1 and 10,000")),
        (("--rounds", "50"), ("--rounds is for the tree modes", "--mode gst+efd")),
        (("--mode", "full", "--rounds", "400"), ("--rounds is for the tree modes", "--mode full")),
    ],
)
def test_bad_training_options_are_one_clear_error(layout_root: Path, args: tuple[str, ...], needles: tuple) -> None:
    proc = run_inprocess("costmodel", "train", "--data", "data", "--out", "bad", *args, cwd=layout_root)
    assert_user_error(proc, *needles)
    assert not (layout_root / "bad").exists()


def test_trees_baseline_trains_evaluates_and_predicts(layout_root: Path) -> None:
    proc = run_inprocess("costmodel", "train", "--data", "data", "--out", "trees", "--mode", "trees", cwd=layout_root)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((layout_root / "trees" / "result.json").read_text())
    assert result["data"] == "SYNTHETIC" and 0.0 <= result["test"]["opa"] <= 1.0
    assert {"trees.npz", "trees.json", "settings.json"} <= {p.name for p in (layout_root / "trees").iterdir()}
    assert json.loads((layout_root / "trees" / "settings.json").read_text())["rounds"] == 400  # the default
    proc = run_inprocess("costmodel", "evaluate", "--run", "trees", "--data", "data", cwd=layout_root)
    assert proc.returncode == 0 and "opa" in proc.stdout, proc.stderr
    proc = run_inprocess("costmodel", "predict", "--run", "trees", "--input", "data/test", cwd=layout_root)
    assert proc.returncode == 0 and "fastest configs" in proc.stdout, proc.stderr


def test_rounds_caps_the_trees_a_tree_baseline_trains_and_is_recorded(layout_root: Path) -> None:
    for mode, model_file in (("trees", "trees.npz"), ("lightgbm", "lightgbm.txt")):
        out = layout_root / f"rounds-{mode}"
        proc = run_inprocess("costmodel", "train", "--data", "data", "--out", out.name, "--mode", mode, "--rounds", "7",
                             cwd=layout_root)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        meta = json.loads((out / "trees.json").read_text())
        assert meta["rounds"] == 7 and 1 <= meta["chosen"] <= 7
        assert json.loads((out / "settings.json").read_text())["rounds"] == 7
        if mode == "trees":  # scikit-learn trains every round (no early stopping): exactly 7 trees
            with np.load(out / model_file) as z:
                assert z["offsets"].size == 7
        else:
            assert 1 <= (out / model_file).read_text().count("\nTree=") <= 7
        ev = run_inprocess("costmodel", "evaluate", "--run", out.name, "--data", "data", cwd=layout_root)
        assert ev.returncode == 0 and "opa" in ev.stdout, ev.stderr


def test_an_npz_missing_keys_is_one_clear_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "d" / "train").mkdir(parents=True)
    np.savez(tmp_path / "d" / "train" / "g.npz", node_feat=np.zeros((3, 140), np.float32))
    assert_user_error(run_inprocess("costmodel", "train", "--data", "d", "--out", "r", cwd=tmp_path), "g.npz")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("train", "--data", "nowhere", "--out", "r"), "nowhere"),
        (("synth", "graphs", "--out", "x"), "unknown kind"),
        (("synth", "layout", "--out", "x", "--nodes", "9-3"), "--nodes"),
        (("evaluate", "--run", "none", "--data", "d", "--out", "r"), "checkpoint"),
        (("predict", "--run", "none", "--input", "d", "--out", "r"), "checkpoint"),
    ],
)
def test_bad_paths_and_options_are_one_clear_error(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(run_inprocess("costmodel", *args, cwd=tmp_path), needle)
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------- run folders: refused inputs leave nothing
@pytest.fixture(scope="session")
def trained(layout_root: Path) -> Path:
    """A one-epoch layout run in ``layout_root/trained``, tile graphs in ``tiles`` and a text file (bad inputs)."""
    args = ("costmodel", "train", "--data", "data", "--out", "trained", "--mode", "gst", *TINY, "--epochs", "1")
    proc = run_inprocess(*args, "--finetune-epochs", "0", cwd=layout_root)
    assert proc.returncode == 0, proc.stderr
    from mlsysopt.costmodel import synth

    synth("tile", layout_root / "tiles", {"test": 1}, 20, 4)  # graphs of another task
    (layout_root / "notes.txt").write_text("not a graph\n")
    return layout_root / "trained"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--data", "data", "--resume"), ("--resume", "no checkpoint")),
        (("--data", "mixed"), ("split 'test' holds tile graphs",)),
        (("--data", "broken"), ("b.npz", "missing key")),
    ],
)
def test_refused_training_leaves_no_run_folder(layout_root: Path, trained: Path, args: tuple, needles: tuple) -> None:
    import shutil

    if not (layout_root / "broken").exists():
        (layout_root / "mixed").mkdir()  # train: layout graphs, test: tile graphs
        shutil.copytree(layout_root / "data" / "train", layout_root / "mixed" / "train")
        shutil.copytree(layout_root / "tiles" / "test", layout_root / "mixed" / "test")
        (layout_root / "broken" / "train").mkdir(parents=True)  # a good first file, a bad second one
        shutil.copy(sorted((layout_root / "data" / "train").glob("*.npz"))[0], layout_root / "broken/train/a.npz")
        np.savez(layout_root / "broken" / "train" / "b.npz", node_feat=np.zeros((3, 140), np.float32))
    proc = run_inprocess("costmodel", "train", "--out", "refused-train", *TINY, *args, cwd=layout_root)
    assert_user_error(proc, *needles)
    assert not (layout_root / "refused-train").exists()


@pytest.mark.parametrize(
    ("command", "args", "needles"),
    [
        ("evaluate", ("--data", "data", "--split", "dev"), ("--data data", "no graphs in split 'dev'")),
        ("evaluate", ("--data", "tiles"), ("tile graphs, but the model is for layout",)),
        ("predict", ("--input", "notes.txt"), ("notes.txt", "expected a .npz")),
        ("predict", ("--input", "nowhere.npz"), ("--input nowhere.npz", "no such file")),
        ("predict", ("--input", "tiles/test"), ("tile graphs, but the model is for layout",)),
    ],
)
def test_refused_evaluate_and_predict_leave_no_out(
    layout_root: Path, trained: Path, command: str, args: tuple, needles: tuple
) -> None:
    out = layout_root / f"refused-{command}"
    assert_user_error(
        run_inprocess("costmodel", command, "--run", "trained", *args, "--out", out.name, cwd=layout_root), *needles
    )
    assert not out.exists()


def test_one_shot_out_never_overwrites_a_training_run_or_a_file(layout_root: Path, trained: Path) -> None:
    before = {p.name: p.read_bytes() for p in trained.iterdir()}
    proc = run_inprocess(
        "costmodel", "evaluate", "--run", "trained", "--data", "data", "--out", "trained", cwd=layout_root
    )
    assert_user_error(proc, "--out trained", "holds a training run")
    assert {p.name: p.read_bytes() for p in trained.iterdir()} == before
    (layout_root / "taken").write_text("mine\n")
    proc = run_inprocess(
        "costmodel", "predict", "--run", "trained", "--input", "data", "--out", "taken", cwd=layout_root
    )
    assert_user_error(proc, "--out taken", "not a folder")
    assert (layout_root / "taken").read_text() == "mine\n"


def test_a_busy_run_folder_is_refused_naming_its_holder(layout_root: Path, tmp_path: Path) -> None:
    from mlsysopt.io import RunDir

    with RunDir(tmp_path / "busy", {"who": "test"}, checkpoint=None):  # held by this process: the CLI in another
        proc = run("costmodel", "train", "--data", layout_root / "data", "--out", "busy", *TINY, cwd=tmp_path)
        assert_user_error(proc, "--out", "busy", "in use by process", str(os.getpid()))
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["log.txt", "settings.json"]


def test_train_killed_with_sigkill_resumes_bit_identically(tmp_path: Path) -> None:
    proc = run_inprocess("costmodel", "synth", "layout", "--out", "d", "--graphs", "train=4,valid=1,test=1",
                         "--nodes", "1500-2000", "--configs", "8", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    args = ["costmodel", "train", "--data", "d", *TINY, "--epochs", "30", "--finetune-epochs", "2"]
    from mlsysopt.costmodel import TrainConfig, train

    tc = TrainConfig(segment_size=150, configs_per_graph=6, epochs=30, finetune_epochs=2)
    straight = train(tmp_path / "d", config=tc, hidden=16, layers=2)  # the same call as the CLI's, no folder
    killed = subprocess.Popen([sys.executable, "-m", "mlsysopt.cli", *args, "--out", "killed"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ckpt = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not ckpt.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=30) == -signal.SIGKILL
    assert not (tmp_path / "killed" / "result.json").exists()
    resumed = run_inprocess(*args, "--out", "killed", "--resume", cwd=tmp_path)  # needs no process of its own
    assert resumed.returncode == 0, resumed.stderr
    b = json.loads((tmp_path / "killed" / "result.json").read_text())
    assert [h["loss"] for h in b["history"]] == [h["loss"] for h in straight["history"]]
    assert [h["valid_opa"] for h in b["history"]] == [h["valid_opa"] for h in straight["history"]]
    assert b["test"] == straight["test"] and len(b["history"]) == 32
    assert not [p.name for p in (tmp_path / "killed").iterdir() if ".tmp" in p.name or p.name == ".lock"]
