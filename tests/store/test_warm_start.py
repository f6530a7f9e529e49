"""--warm-start STUDY|auto: earlier runs' history records from the store, fed to what learns from them."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.errors import StoreError
from mlsysopt.io import RunDir
from mlsysopt.nas.warm_start import warm_start_search
from mlsysopt.serving.warm_start import warm_start_tuning
from mlsysopt.store import record_trial
from mlsysopt.store.history import read_histories
from mlsysopt.store.run import RunStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOBS = {"instances": [1, 2], "max_batch": [1, 4], "batch_timeout_ms": [0.0], "intra_threads": [1],
         "inter_threads": [1]}  # fmt: skip
SIM = {"engine": "sim", "profile": "synthetic:4", "requests": 40, "knobs": KNOBS, "confirm_top": 1,
       "confirm_rounds": 1, "noise_windows": 2}  # fmt: skip


@pytest.fixture
def brief_nas_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    """NAS transfer priors (EPNAS's leave-one-out one, and the one --warm-start trains) trained briefly: these tests
    check what a prior learns from and what is refused, not how well it ranks. Its own cache key: the default
    prior other tests of this process use is not replaced."""
    from mlsysopt.nas import prior

    monkeypatch.setattr(prior, "PriorConfig", functools.partial(prior.PriorConfig, epochs=2, per_task=300))


@pytest.fixture
def brief_serving_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    """The serving tuner's prior (what --warm-start fits on the store's records) trained briefly: these tests check
    what it learns from, that a resume replays it and what is refused, not how well it ranks."""
    from mlsysopt.serving import prior

    monkeypatch.setattr(prior, "PriorConfig", functools.partial(prior.PriorConfig, steps=200))


@pytest.fixture(scope="module")
def nas_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one finished NAS search (random, 8 evaluations of Cora's table) and one serving run."""
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    root = tmp_path_factory.mktemp("warm")
    prepare_search(root / "cora", SearchOptions(space="nasbench-graph:cora", method="random", budget=8)).run()
    with RunDir(root / "serve1", {"command": "serving serve"}, checkpoint=None, sink=RunStore).check():
        record_trial({"instances": 1}, 3.0, record={"config": {}}, key=0)
    return root


def test_the_records_are_what_result_json_lists(nas_store: Path) -> None:
    (h,) = read_histories("cora", "nas", nas_store / "new")
    evaluations = json.loads((nas_store / "cora" / "result.json").read_text())["evaluations"]
    assert h["records"] == evaluations and h["settings"]["space"] == "nasbench-graph:cora"
    assert [x["study"] for x in read_histories("auto", "nas", nas_store / "new")] == ["cora"]
    with pytest.raises(StoreError, match="no finished nas run"):  # a run never starts from its own folder
        read_histories("auto", "nas", nas_store / "cora")


@pytest.mark.usefixtures("brief_nas_prior")
def test_nas_predictor_is_pretrained_on_another_dataset(nas_store: Path, tmp_path: Path) -> None:
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    store = tmp_path / "store"  # its run joins a copy of the store: the module's keeps one finished NAS run, cora's
    shutil.copytree(nas_store, store)
    job = prepare_search(store / "citeseer", SearchOptions(space="nasbench-graph:citeseer", budget=2))
    note = warm_start_search(job, "auto")
    # EPNAS's transfer prior (#23) learns the earlier run's records before the first ask
    assert "pretrained on 8 evaluations of cora" in note and job.searcher.warm_prior is not None
    assert job.run_dir.settings["warm_start"] == {"spec": "auto", "studies": ["cora"], "records": 8, "used": 8}
    job.run()
    settings = json.loads((store / "citeseer" / "settings.json").read_text())
    assert settings["warm_start"]["used"] == 8


@pytest.mark.usefixtures("brief_nas_prior")
def test_bad_warm_starts_are_one_error_and_write_nothing(nas_store: Path) -> None:
    out = nas_store / "refused"
    ran = run_inprocess("nas", "search", "--out", out, "--budget", "2", "--warm-start", "serve1")
    assert_user_error(ran, "--warm-start serve1: study 'serve1' is a serving run (serving serve), not a nas run")
    ran = run_inprocess("nas", "search", "--out", out, "--budget", "2", "--warm-start", "nosuch")
    assert_user_error(ran, "--warm-start nosuch: no run 'nosuch'")
    ran = run_inprocess("nas", "search", "--out", out, "--method", "random", "--warm-start", "cora")
    assert_user_error(ran, "method 'random' learns no predictor")
    assert not out.exists()


@pytest.mark.usefixtures("brief_serving_prior")
def test_rrl_learns_from_earlier_measurements_and_resumes_the_same(tmp_path: Path) -> None:
    from mlsysopt.serving.tuning_job import TuningJob

    with TuningJob(tmp_path / "first", rates=[300.0], budget=3, tuner="random", **SIM) as job:
        job.run()
    with TuningJob(tmp_path / "second", rates=[300.0], budget=2, tuner="rrl", **SIM) as job:
        assert job.tuner.pending_prior is None
        assert "learned from 3 measurements of first" in warm_start_tuning(job, "first")
        assert job.tuner.pending_prior.describe()["samples"] == 3  # a prior fitted on them (#22)
        first = job.run()
    assert first["prior"]["tasks"] == ["synthetic-cnn@4"] and first["prior"]["top"]
    with TuningJob(tmp_path / "second", rates=[300.0], budget=3, tuner="rrl", resume=True, **SIM) as job:
        with pytest.raises(Exception, match="the run started with --warm-start first"):
            warm_start_tuning(job, None)
        warm_start_tuning(job, "first")  # the same prior again, so the checkpoint replays
        resumed = job.run()
    assert resumed["measurements"][:2] == first["measurements"]
    refused = pytest.raises(StoreError, match="tuner 'random' takes no warm start")
    with TuningJob(tmp_path / "third", rates=[300.0], budget=2, tuner="random", **SIM) as job, refused:
        warm_start_tuning(job, "first")
