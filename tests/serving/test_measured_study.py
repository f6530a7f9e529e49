"""`serving study --engine real|rayserve`: tables measured here, tuners replayed on them (tiny grid, short windows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.serving.measured_study import MeasuredStudyJob, measurement_order
from mlsysopt.serving.space import Space

GRID = ("--instances", "1,2", "--max-batch", "1", "--intra", "1")  # 4 configurations (2 op-level settings)


def test_a_measured_study_measures_every_configuration_once_and_replays_the_tuners(tmp_path: Path) -> None:
    args = ("serving", "study", "--engine", "real", "--model", "zoo:cnn", "--rate", "100,200", *GRID,
            "--seeds", "2", "--tuners", "rrl,hill_climb", "--window-s", "0.2", "--out", "s")  # fmt: skip
    ran = run_inprocess(*args, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads((tmp_path / "s" / "result.json").read_text())
    size = result["space_size"]
    assert result["data"].startswith("measured here: ONNX Runtime") and result["rates"] == [100.0, 200.0]
    for rate in ("100.0", "200.0"):
        assert len(result["tables"][rate]["mean_ms"]) == size and min(result["tables"][rate]["mean_ms"]) > 0
        # the optimum is the best measured configuration of the table
        assert result["optimum"][rate] == pytest.approx(min(result["tables"][rate]["mean_ms"]))
    assert set(result["evals_to_5pct"]) == {"rrl", "hill_climb"} and len(result["per_seed"]) == 4
    assert all(1 <= v <= result["cap"] + 1 for v in result["evals_to_5pct"].values())
    checkpoint = json.loads((tmp_path / "s" / "checkpoint.json").read_text())
    assert len(checkpoint["rows"]) == 2 * size
    # --resume replays every measured row: the same tables, nothing measured again
    before = result["tables"]
    ran = run_inprocess(*args, "--resume", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "left" not in ran.stderr  # no measurement progress: every row came from the checkpoint
    assert json.loads((tmp_path / "s" / "result.json").read_text())["tables"] == before


def test_measurements_are_grouped_by_cpus_per_replica() -> None:
    space = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0.0,), intra_threads=(1, 2),
                  inter_threads=(1,), execution_mode=(0,), max_threads=2)  # fmt: skip
    order = measurement_order(space)
    threads = [c.threads_per_instance for c in order]
    assert threads == sorted(threads) and len(order) == space.size


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (("--engine", "real"), ("--engine real needs --model",)),
        (("--engine", "real", "--model", "zoo:cnn", "--rate", "100"), ("give two rates",)),
        (("--engine", "rayserve", "--model", "zoo:cnn", "--rate", "1,2", "--tuners", "rrl_warm"), ("unknown tuner",)),
        (("--model", "zoo:cnn"), ("are for a measured study (--engine real|rayserve)",)),
    ],
)
def test_bad_measured_studies_are_one_line_and_write_nothing(tmp_path: Path, extra: tuple, needles: tuple) -> None:
    ran = run_inprocess("serving", "study", *extra, "--out", "s", cwd=tmp_path)
    assert_user_error(ran, *needles)
    assert not (tmp_path / "s").exists()


def test_the_job_refuses_the_simulator_and_a_grid_too_large_to_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlsysopt.errors import MlsysoptError
    from mlsysopt.serving import measured_study

    with pytest.raises(MlsysoptError, match="a measured study runs on real or rayserve"):
        MeasuredStudyJob(tmp_path / "s", ["rrl"], "sim", "zoo:cnn", [100.0, 200.0])
    monkeypatch.setattr(measured_study, "MAX_MEASUREMENTS", 4)
    with pytest.raises(MlsysoptError, match="x 2 rates = 40 measurements, more than a measured study takes"):
        MeasuredStudyJob(tmp_path / "s", ["rrl"], "real", "zoo:cnn", [100.0, 200.0],
                         knobs={"instances": [1, 2], "max_batch": [1, 4], "intra_threads": [1]})  # fmt: skip
    # on Ray Serve the same grid with its default admission only (5), unless max_ongoing is given: 3x as many
    with pytest.raises(MlsysoptError, match="x 2 rates = 40 measurements"):
        MeasuredStudyJob(tmp_path / "s", ["rrl"], "rayserve", "zoo:cnn", [100.0, 200.0],
                         knobs={"instances": [1, 2], "max_batch": [1, 4], "intra_threads": [1]})  # fmt: skip
    with pytest.raises(MlsysoptError, match="x 2 rates = 80 measurements"):
        MeasuredStudyJob(tmp_path / "s", ["rrl"], "rayserve", "zoo:cnn", [100.0, 200.0],
                         knobs={"instances": [1, 2], "max_batch": [1, 4], "intra_threads": [1],
                                "max_ongoing": [5, 16]})  # fmt: skip
    assert not (tmp_path / "s").exists()
