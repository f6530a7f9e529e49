"""Each system's experiment layer writes its trials: NAS evaluations, serving measurements, placement searches,
cost-model epochs; each trial keeps the record result.json lists, so the store and the folder agree."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from mlsysopt.io import RunDir
from mlsysopt.store.run import RunStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _study(folder: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'mlsysopt.db'}")


def test_nas_search_records_every_evaluation(tmp_path: Path) -> None:
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    out = prepare_search(tmp_path / "nas", SearchOptions(space="nasbench-graph:cora", method="random", budget=6)).run()
    study = _study(tmp_path, "nas")
    assert [t.user_attrs["record"] for t in study.trials] == json.loads(json.dumps(out.record["evaluations"]))
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert study.best_value == pytest.approx(out.record["best"]["perf"])
    assert set(study.trials[0].params) == {"link", "op1", "op2", "op3", "op4", "blocks"}  # the space's names
    assert study.trials[0].params["op1"] in ("gat", "gcn", "gin", "cheb", "sage", "arma", "graph", "fc", "skip")
    assert study.metric_names == ["validation_accuracy"] and "test_perf" in study.trials[0].user_attrs
    assert study.user_attrs["mlsysopt.headline"]["value"] == pytest.approx(out.record["best"]["perf"])


def test_serving_tune_records_each_search_measurement_once_across_a_resume(tmp_path: Path) -> None:
    from mlsysopt.serving.tuning_job import TuningJob

    knobs = {"instances": [1, 2], "max_batch": [1, 4], "batch_timeout_ms": [0.0], "intra_threads": [1],
             "inter_threads": [1]}  # fmt: skip
    sim = {"engine": "sim", "profile": "synthetic:4", "requests": 40, "knobs": knobs, "confirm_top": 1,
           "confirm_rounds": 1, "noise_windows": 2, "tuner": "random"}  # fmt: skip
    with TuningJob(tmp_path / "tune", rates=[300.0], budget=2, **sim) as job:
        job.run()
    with TuningJob(tmp_path / "tune", rates=[300.0], budget=3, resume=True, **sim) as job:
        report = job.run()
    study = _study(tmp_path, "tune")
    assert [t.user_attrs["record"]["config"] for t in study.trials] == [m["config"] for m in report["measurements"]]
    assert study.trials[0].params["instances"] in (1, 2) and study.trials[0].user_attrs["phase"] == "search"
    assert study.user_attrs["mlsysopt.resumed"] == 1 and study.user_attrs["mlsysopt.command"] == "serving tune"


def test_placement_compare_records_a_trial_per_method_and_seed(tmp_path: Path) -> None:
    from mlsysopt.graph.generate import layered_dag, random_cluster
    from mlsysopt.placement import compare

    g, c = layered_dag(12, num_types=2, seed=1), random_cluster(3, num_types=2, seed=1)
    with RunDir(tmp_path / "cmp", {"command": "placement compare"}, checkpoint=None, sink=RunStore).check():
        cmp = compare(g, c, ["heft", "random"], seeds=2, budget=10)
    study = _study(tmp_path, "cmp")
    got = {(t.params["method"], t.params["seed"]): t.value for t in study.trials}
    assert got == {(m, s): r.makespan for m, runs in cmp.runs.items() for s, r in zip(cmp.seeds, runs, strict=True)}
    assert study.trials[0].distributions["method"].choices == ("heft", "random")


def test_costmodel_training_records_its_epochs_as_intermediate_values(tmp_path: Path) -> None:
    from mlsysopt.costmodel import TrainConfig, synth, train

    synth("layout", tmp_path / "data", {"train": 2, "valid": 1}, (60, 90), 4, seed=1)
    tc = TrainConfig(mode="gst", segment_size=40, epochs=2, finetune_epochs=0, configs_per_graph=4)
    result = train(tmp_path / "data", tmp_path / "cm", tc, hidden=8, layers=1)
    (trial,) = _study(tmp_path, "cm").trials
    assert trial.state.name == "COMPLETE" and sorted(trial.intermediate_values) == [1, 2]
    assert trial.value == pytest.approx(result["history"][-1]["valid_opa"])
    assert trial.user_attrs["metric"] == "valid_opa" and trial.params["segment_size"] == 40


def test_the_demo_records_its_summary_and_its_page_names_the_store(tmp_path: Path) -> None:
    from mlsysopt.demo import run_demo

    with RunDir(tmp_path / "demo", {"command": "demo", "seed": 0}, checkpoint=None, sink=RunStore).check():
        run_demo(tmp_path / "demo", seed=0, only=["montage"])
    study = _study(tmp_path, "demo")
    assert study.trials and study.trials[0].user_attrs["system"]  # a summary row of the page, as a trial
    page = (tmp_path / "demo" / "index.html").read_text()
    assert "study store" in page and "mlsysopt runs show demo" in page and "mlsysopt runs dashboard" in page
