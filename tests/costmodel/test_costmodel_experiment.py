"""The experiment layer (costmodel/experiment.py) and load_dataset: what the CLI, the demo and the benchmark call."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel import (
    InMemoryDataset,
    ModelConfig,
    TpuGraphsDataset,
    Trainer,
    evaluate,
    layout_record,
    load_dataset,
    load_trainer,
    one_step,
    predict,
    synth,
    synth_layout_graph,
    train,
)
from mlsysopt.errors import InvalidCheckpoint, InvalidDataFile, InvalidOption, InvalidRunDir, MissingSplit

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL = {"hidden": 16, "layers": 2}


# the base of the tc fixture (conftest.py)
TC_BASE = {"segment_size": 60, "epochs": 1, "finetune_epochs": 1, "configs_per_graph": 4, "k": 1}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SYNTHETIC layout, tile and MalNet-like data roots, small enough to train on in a second."""
    root = tmp_path_factory.mktemp("experiment")
    synth("layout", root / "layout", {"train": 3, "valid": 1, "test": 2}, (80, 160), 6, seed=1)
    synth("tile", root / "tile", {"train": 2, "test": 1}, 20, 5, seed=1)
    synth("malnet", root / "malnet", 3, (40, 80), seed=1)
    return root


# ---------------------------------------------------------------------------- load_dataset
def test_load_dataset_reads_a_root_a_split_folder_and_single_files(roots: Path) -> None:
    lay = roots / "layout"
    test = load_dataset(lay, "test")
    assert isinstance(test, TpuGraphsDataset) and test.task == "layout" and len(test) == 2
    assert load_dataset(lay / "test").names == test.names  # the split folder itself
    one = sorted((lay / "test").glob("*.npz"))[0]
    single = load_dataset(one)
    assert isinstance(single, InMemoryDataset) and single.names == [one.stem] and single.task == "layout"
    assert load_dataset(next((roots / "tile" / "test").glob("*.npz"))).task == "tile"
    edgelist = next((roots / "malnet").rglob("*.edgelist"))
    (rec,) = load_dataset(edgelist)
    assert rec.task == "malnet" and rec.label is None
    assert load_dataset(roots / "malnet", "valid").task == "malnet"  # split_info/val.txt


def test_load_dataset_tells_a_missing_split_from_a_bad_file(roots: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingSplit, match="nowhere: no such file or folder"):
        load_dataset(tmp_path / "nowhere")
    with pytest.raises(MissingSplit, match="neither TpuGraphs"):
        load_dataset(roots / "tile", "valid")
    with pytest.raises(MissingSplit, match=r"split_info/dev\.txt: no such split file"):
        load_dataset(roots / "malnet", "dev")
    (tmp_path / "notes.txt").write_text("x\n")
    (tmp_path / "bad" / "train").mkdir(parents=True)
    np.savez(tmp_path / "bad" / "train" / "g.npz", node_feat=np.zeros((3, 140), np.float32))
    for path, match in ((tmp_path / "notes.txt", "expected a .npz"), (tmp_path / "bad", "g.npz: neither a layout")):
        with pytest.raises(InvalidDataFile, match=match) as info:
            load_dataset(path)
        assert not isinstance(info.value, MissingSplit)


# ---------------------------------------------------------------------------- train
def test_train_without_a_folder_is_the_trainer_on_the_three_splits(roots: Path, tc: Callable) -> None:
    result = train(roots / "layout", config=tc(mode="gst+efd"), **MODEL)
    # train() turns the deviation column on for layout data
    trainer = Trainer(ModelConfig.for_task("layout", **MODEL, deviation=True), tc(mode="gst+efd"))
    splits = [load_dataset(roots / "layout", s) for s in ("train", "valid", "test")]
    history = trainer.fit(splits[0], splits[1])
    assert [h["loss"] for h in result["history"]] == [h["loss"] for h in history]
    assert result["test"] == trainer.evaluate(splits[2])
    assert result["valid"] == {k[6:]: v for k, v in history[-1].items() if k.startswith("valid_")}
    assert result["data"] == "SYNTHETIC" and result["task"] == "layout" and result["plots"] == []
    assert result["settings"]["hidden"] == 16 and result["settings"]["data"] == str(roots / "layout")
    assert result["peak_step_mb"] == max(h["peak_step_mb"] for h in history) > 0


def test_train_in_a_folder_resumes_with_more_epochs_exactly(roots: Path, tmp_path: Path, tc: Callable) -> None:
    out = tmp_path / "run"
    first = train(roots / "layout", out, tc(mode="gst+e", epochs=1, finetune_epochs=0), **MODEL)
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint.pt", "log.txt", "memory.png", "result.json", "settings.json", "training.png"
    ]  # fmt: skip
    assert json.loads((out / "result.json").read_text())["history"][0]["loss"] == first["history"][0]["loss"]
    with pytest.raises(InvalidRunDir, match="pass --resume"):
        train(roots / "layout", out, tc(mode="gst+e", epochs=2, finetune_epochs=0), **MODEL)
    with pytest.raises(InvalidRunDir, match=r"other settings: mode 'gst\+e' \(now 'gst'\)"):
        train(roots / "layout", out, tc(mode="gst", epochs=2, finetune_epochs=0), resume=True, **MODEL)
    resumed = train(roots / "layout", out, tc(mode="gst+e", epochs=3, finetune_epochs=0), resume=True, **MODEL)
    straight = train(roots / "layout", None, tc(mode="gst+e", epochs=3, finetune_epochs=0), **MODEL)
    assert [h["loss"] for h in resumed["history"]] == [h["loss"] for h in straight["history"]]
    assert resumed["test"] == straight["test"]
    assert json.loads((out / "settings.json").read_text())["epochs"] == 3


@pytest.mark.parametrize(
    ("config", "kw", "error", "match"),
    [
        ({"k": 0}, {}, InvalidOption, "k must be"),
        ({"loss": "ce"}, {}, InvalidOption, "does not fit task 'layout'"),
        ({}, {"backbone": "gat"}, InvalidOption, "unknown backbone"),
        ({}, {"resume": True}, InvalidRunDir, "no checkpoint"),
        ({}, {"data": "tile", "split": "train"}, InvalidDataFile, "no training graphs"),
    ],
)
def test_refused_training_inputs_leave_no_folder(
    roots: Path, tmp_path: Path, config: dict, kw: dict, error: type, match: str, tc: Callable
) -> None:
    kw = dict(kw)
    data = roots / kw.pop("data", "layout")
    if kw.pop("split", None):  # a root without a train split
        shutil.copytree(data / "test", tmp_path / "held-out" / "test")
        data = tmp_path / "held-out"
    with pytest.raises(error, match=match):
        train(data, tmp_path / "out", tc(**config), **kw)
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidOption, match="resume needs the run folder"):
        train(roots / "layout", None, tc(), resume=True)


def test_one_step_measures_one_training_step() -> None:
    rec = layout_record(synth_layout_graph(400, 2, np.random.default_rng(0), splits=False), "synthetic_400")
    trainer = one_step(rec, "gst", 100, seed=3)
    (entry,) = trainer.history
    assert entry["peak_step_mb"] > 0 and len(entry["step_mb"]) == 1 and trainer.tc.configs_per_graph == 2
    assert trainer.segmenter(rec).num_segments == 4


# ---------------------------------------------------------------------------- evaluate / predict
@pytest.fixture(scope="module")
def layout_run(roots: Path, tmp_path_factory: pytest.TempPathFactory, tc: Callable) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("runs") / "layout"
    return out, train(roots / "layout", out, tc(mode="gst", finetune_epochs=0), **MODEL)


def test_evaluate_and_predict_on_a_root_a_split_folder_and_a_file(roots: Path, layout_run: tuple, tmp_path: Path):
    run, trained = layout_run
    assert evaluate(run, roots / "layout")["metrics"] == trained["test"]
    result = evaluate(run, roots / "layout" / "test", out=tmp_path / "ev")
    assert json.loads((tmp_path / "ev" / "result.json").read_text())["metrics"] == trained["test"]
    assert json.loads((tmp_path / "ev" / "settings.json").read_text())["run"] == str(run)
    assert result["split"] == "test" and result["command"] == "costmodel evaluate"
    every = predict(run, roots / "layout", out=tmp_path / "pr")["graphs"]
    assert len(every) == 2 and (tmp_path / "pr" / "result.json").is_file()
    one = sorted((roots / "layout" / "test").glob("*.npz"))[0]
    (row,) = predict(run / "checkpoint.pt", one)["graphs"].values()
    assert row == every[one.stem]
    assert sorted(row["ranking"]) == list(range(6)) and row["scores"][row["ranking"][0]] == min(row["scores"])


def test_refused_evaluate_and_predict_inputs_leave_no_folder(roots: Path, layout_run: tuple, tmp_path: Path):
    run, _ = layout_run
    out = tmp_path / "out"
    with pytest.raises(InvalidCheckpoint, match="no checkpoint.pt"):
        evaluate(tmp_path / "nothing", roots / "layout", out=out)
    with pytest.raises(InvalidOption, match="tile graphs, but the model is for layout"):
        evaluate(run, roots / "tile", out=out)
    with pytest.raises(MissingSplit, match="--input .*no graphs in split 'dev'"):
        predict(run, roots / "layout", "dev", out=out)
    with pytest.raises(InvalidRunDir, match="holds a training run"):
        predict(run, roots / "layout", out=run)
    assert not out.exists()
    with pytest.raises(InvalidCheckpoint, match="no checkpoint.pt"):
        load_trainer(roots / "layout")


def test_malnet_predicts_probabilities_and_refuses_to_evaluate_an_unlabelled_file(
    roots: Path, tmp_path: Path, tc: Callable
):
    run = tmp_path / "malnet"
    trained = train(roots / "malnet", run, tc(mode="gst+efd", segment_size=30), **MODEL)
    assert trained["task"] == "malnet" and 0.0 <= trained["test"]["accuracy"] <= 1.0
    edgelist = next((roots / "malnet").rglob("*.edgelist"))
    (row,) = predict(run, edgelist)["graphs"].values()
    assert sum(row["probabilities"]) == pytest.approx(1.0) and row["class"] in range(5)
    with pytest.raises(InvalidOption, match="has no label"):
        evaluate(run, edgelist, out=tmp_path / "ev")
    assert not (tmp_path / "ev").exists()


# ---------------------------------------------------------------------------- synth
def test_synth_counts_per_split_and_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    assert synth("layout", tmp_path / "l", 4, 50, 3) == {"train": 4, "valid": 1, "test": 1}
    assert synth("malnet", tmp_path / "m", 3, 40) == {"train": 5, "val": 5, "test": 5}
    with pytest.raises(InvalidOption, match="unknown kind 'graphs'"):
        synth("graphs", tmp_path / "g")
    with pytest.raises(InvalidOption, match="count per class"):
        synth("malnet", tmp_path / "m2", {"train": 3})
    assert not (tmp_path / "g").exists() and not (tmp_path / "m2").exists()
