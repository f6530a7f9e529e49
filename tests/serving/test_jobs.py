"""The jobs behind the serving commands: validated before the run folder exists, settings recorded, resumable."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.serving.jobs import ProfileJob, ServeJob
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config
from mlsysopt.serving.tuning_job import TuningJob

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOBS = {
    "instances": [1, 2],
    "max_batch": [1, 4],
    "batch_timeout_ms": [0.0],
    "intra_threads": [1, 2],
    "inter_threads": [1, 2],
}
SIM = {"engine": "sim", "profile": "synthetic:4", "requests": 40, "knobs": KNOBS}


def test_tuning_job_records_settings_and_resumes_with_a_larger_budget(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with TuningJob(out, rates=[300.0], budget=3, tuner="random", seed=2, **SIM) as job:
        assert not out.exists()  # built and validated: nothing written yet
        # budget 3: 3 noise windows, the search, pick vs default x 3 rounds
        assert "synthetic 4-core profile" in job.describe() and job.total == 3 + 3 + 2 * 3
        first = job.run()
    settings = json.loads((out / "settings.json").read_text())
    assert settings["budget"] == 3 and settings["space"]["size"] == job.space.size == 16
    assert settings["space"]["raw_size"] == 32  # sequential mode with 2 inter-op threads = with 1; parallel with 1 too
    assert first["space"] == {"raw_size": 32, "size": 16, "removed_fraction": 0.5}
    files = {"result.json", "checkpoint.json", "steps.png", "heatmap.png", "confirm.png", "config.pbtxt"}
    assert files <= {p.name for p in out.iterdir()}
    with pytest.raises(InvalidRunDir, match="checkpoint.json exists"):
        TuningJob(out, rates=[300.0], budget=3, tuner="random", seed=2, **SIM)
    before = (out / "result.json").read_text()
    with pytest.raises(MlsysoptError, match="already holds 3 search measurements; resume with --budget 3 or more"):
        TuningJob(out, rates=[300.0], budget=2, tuner="random", seed=2, resume=True, **SIM)
    assert (out / "result.json").read_text() == before  # a smaller budget drops nothing
    with TuningJob(out, rates=[300.0], budget=5, tuner="random", seed=2, resume=True, **SIM) as job:
        # the noise phase the run started with (3 windows for budget 3), replayed, not re-sized by the new budget
        assert len(job.recorded["measurements"]) == 3 and len(job.recorded["noise"]) == job.noise_windows == 3
        resumed = job.run()
    assert [m["config"] for m in resumed["measurements"][:3]] == [m["config"] for m in first["measurements"]]
    assert resumed["noise"] == first["noise"]  # replayed, not measured again
    result = json.loads((out / "result.json").read_text())
    assert result["replayed_from_checkpoint"] == 3 and len(result["measurements"]) == 5
    with pytest.raises(InvalidRunDir, match="other settings: tuner 'random' \\(now 'rrl'\\)"):
        TuningJob(out, rates=[300.0], budget=5, tuner="rrl", seed=2, resume=True, **SIM)


def test_several_rates_make_the_budget_part_of_the_schedule(tmp_path: Path) -> None:
    with TuningJob(tmp_path / "r", rates=[300.0, 600.0], budget=2, **SIM) as job:
        assert job.schedule[1][1] == 2 and job.total == 2 + 2 * (
            2 + 2 * 3
        )  # budget 2: 2 noise windows; pick vs default
        report = job.run()
    # the best per rate: search-time and confirmed
    assert [r["rate"] for r in report["per_rate"]] == [300.0, 600.0]
    assert all(r["confirmed_best"] and r["search_best"] for r in report["per_rate"])
    assert len(report["confirmation"]) == 2
    with pytest.raises(InvalidRunDir, match="budget 2 \\(now 3\\)"):
        TuningJob(tmp_path / "r", rates=[300.0, 600.0], budget=3, resume=True, **SIM)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rates": [0.0]}, "rate"),
        ({"rates": []}, "no rates"),
        ({"budget": 0}, "--budget"),
        ({"tuner": "magic"}, "magic"),
        ({"knobs": {"instances": [1, 64]}}, "instances=64 exceeds"),
        ({"profile": "synthetic:x"}, "core count"),
        ({"engine": "real", "profile": None}, "needs --model"),
        ({"requests": 10**6}, "1 to 100,000 requests"),
        ({"engine": "real", "model": "zoo:cnn", "rates": [0.001]}, "give at least 1 req/s"),
        ({"timeout": -1.0}, "--timeout"),
        ({"objective": Objective("cost", slo_ms=5.0), "resume": True}, "no checkpoint"),
    ],
)
def test_a_refused_tuning_job_writes_nothing(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(MlsysoptError, match=match):
        TuningJob(tmp_path / "r", **{**SIM, **kwargs})
    assert not (tmp_path / "r").exists()


def test_an_earlier_run_is_the_history_of_a_warm_started_tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlsysopt.serving import prior

    # the prior trained briefly: this checks what it learns from and that its best pick goes first, not its ranking
    monkeypatch.setattr(prior, "PriorConfig", functools.partial(prior.PriorConfig, steps=200))
    from mlsysopt.serving.inputs import resolve_prior
    from mlsysopt.serving.space import Workload

    quick = {**SIM, "confirm_rounds": 1, "noise_windows": 2}
    with TuningJob(tmp_path / "a", rates=[300.0], budget=6, tuner="random", **quick) as job:
        job.run()
    with TuningJob(tmp_path / "b", rates=[500.0], budget=2, tuner="rrl", prior=str(tmp_path / "a"), **quick) as job:
        top = job.prior.bind(job.profile).ranked(job.space, Workload(500.0), job.objective, 1)[0]
        warm = job.run()
    assert warm["prior"]["tasks"] == ["synthetic-cnn@4"] and warm["prior"]["samples"] == 6
    assert warm["measurements"][0]["config"] == top.to_dict()  # warm start: the prior's best first
    assert warm["prior"]["top"][0]["instances"] == top.instances
    assert json.loads((tmp_path / "b" / "settings.json").read_text())["prior"] == str(tmp_path / "a")
    assert resolve_prior(str(tmp_path)).describe()["histories"] == 2  # a folder of run folders: both runs
    with pytest.raises(MlsysoptError, match="tuner 'random' takes no prior"):
        TuningJob(tmp_path / "c", rates=[500.0], tuner="random", prior=str(tmp_path / "a"), **quick)
    with pytest.raises(MlsysoptError, match="no such folder"):
        TuningJob(tmp_path / "c", rates=[500.0], prior=str(tmp_path / "nothing"), **quick)
    assert not (tmp_path / "c").exists()


def test_export_anyway_writes_the_files_of_an_slo_missed_pick(tmp_path: Path) -> None:
    quick = {**SIM, "confirm_rounds": 1, "noise_windows": 2, "objective": Objective("cost", slo_ms=0.001)}
    with TuningJob(tmp_path / "r", rates=[300.0], budget=2, export_anyway=True, **quick) as job:
        report = job.run()
    assert report["verdict"]["decision"] == "SLO missed" and "config.pbtxt" in report["files"]
    assert (tmp_path / "r" / "config.pbtxt").is_file()


def test_profile_and_serve_keep_the_exported_zoo_model_in_the_run_folder(tmp_path: Path) -> None:
    with ProfileJob(tmp_path / "p", "zoo:cnn", rows=(1, 2, 4), intra=(1,), inter=(1, 2), repeats=1) as job:
        staged = job.model.path
        assert not (tmp_path / "p").exists() and staged.is_file()
        result = job.run()
    assert not staged.exists()  # the temporary export is gone, the run folder keeps its copy
    assert result["model"] == str(tmp_path / "p" / "cnn.onnx") and (tmp_path / "p" / "cnn.onnx").is_file()
    assert json.loads((tmp_path / "p" / "settings.json").read_text())["rows"] == [1, 2, 4]
    with ServeJob(tmp_path / "s", Config(max_batch=2), rates=[50.0], model=result["model"], requests=20) as job:
        (m,) = job.run()
    assert m.config == Config(max_batch=2) and m.completed > 0
    assert not (tmp_path / "s" / "cnn.onnx").exists()  # a model file the user gave is not copied
    with pytest.raises(MlsysoptError, match="at least 6 points"):
        ProfileJob(tmp_path / "q", "zoo:cnn", rows=(1, 2), intra=(1,), inter=(1,))
    assert not (tmp_path / "q").exists()


def test_the_rrl_tuner_alone_loads_no_optuna() -> None:
    code = (
        "import sys\n"
        "from mlsysopt.serving import Objective, Space, get_tuner\n"
        "get_tuner('rrl', Space(), Objective())\n"
        "print('optuna' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
