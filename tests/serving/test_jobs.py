"""The jobs behind the serving commands: validated before the run folder exists, settings recorded, resumable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.serving.jobs import ProfileJob, ServeJob, TuningJob
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KNOBS = {
    "workers": [1, 2],
    "max_batch": [1, 4],
    "batch_timeout_ms": [0.0],
    "intra_threads": [1, 2],
    "inter_threads": [1, 2],
}
SIM = {"backend": "sim", "profile": "synthetic:4", "requests": 40, "knobs": KNOBS}


def test_tuning_job_records_settings_and_resumes_with_a_larger_budget(tmp_path: Path) -> None:
    out = tmp_path / "r"
    with TuningJob(out, rates=[300.0], budget=3, tuner="random", seed=2, **SIM) as job:
        assert not out.exists()  # built and validated: nothing written yet
        assert "synthetic 4-core profile" in job.describe() and job.total == 3
        first = job.run()
    settings = json.loads((out / "settings.json").read_text())
    assert settings["budget"] == 3 and settings["space"]["size"] == job.space.size == 16
    assert {"result.json", "checkpoint.json", "steps.png", "heatmap.png"} <= {p.name for p in out.iterdir()}
    with pytest.raises(InvalidRunDir, match="checkpoint.json exists"):
        TuningJob(out, rates=[300.0], budget=3, tuner="random", seed=2, **SIM)
    with TuningJob(out, rates=[300.0], budget=5, tuner="random", seed=2, resume=True, **SIM) as job:
        assert len(job.recorded) == 3
        resumed = job.run()
    assert [s.config for s in resumed.steps[:3]] == [s.config for s in first.steps]
    result = json.loads((out / "result.json").read_text())
    assert result["replayed_from_checkpoint"] == 3 and len(result["measurements"]) == 5
    with pytest.raises(InvalidRunDir, match="other settings: tuner 'random' \\(now 'rrl'\\)"):
        TuningJob(out, rates=[300.0], budget=5, tuner="rrl", seed=2, resume=True, **SIM)


def test_several_rates_make_the_budget_part_of_the_schedule(tmp_path: Path) -> None:
    with TuningJob(tmp_path / "r", rates=[300.0, 600.0], budget=2, **SIM) as job:
        assert job.schedule[1][1] == 2 and job.total == 4
        job.run()
    with pytest.raises(InvalidRunDir, match="budget 2 \\(now 3\\)"):
        TuningJob(tmp_path / "r", rates=[300.0, 600.0], budget=3, resume=True, **SIM)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rates": [0.0]}, "rate"),
        ({"rates": []}, "no rates"),
        ({"budget": 0}, "--budget"),
        ({"tuner": "magic"}, "magic"),
        ({"knobs": {"workers": [1, 64]}}, "workers=64 exceeds"),
        ({"profile": "synthetic:x"}, "core count"),
        ({"backend": "real", "profile": None}, "needs --model"),
        ({"objective": Objective("cost", slo_ms=5.0), "resume": True}, "no checkpoint"),
    ],
)
def test_a_refused_tuning_job_writes_nothing(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(MlsysoptError, match=match):
        TuningJob(tmp_path / "r", **{**SIM, **kwargs})
    assert not (tmp_path / "r").exists()


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
