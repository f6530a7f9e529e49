"""``mlsysopt serving profile | tune | serve`` run for real with tiny budgets, and their bad-input errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.cli_helpers import PNG_MAGIC, assert_user_error, run

SIM = ("--backend", "sim", "--profile", "synthetic:4", "--requests", "60")
SMALL = ("--workers", "1,2", "--max-batch", "1,4", "--timeout-ms", "0,2", "--intra", "1,2", "--inter", "1")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlsysopt.serving.model import export_zoo_onnx

    return export_zoo_onnx("cnn", tmp_path_factory.mktemp("m") / "cnn.onnx")


def test_tune_on_the_simulator_writes_every_measurement_and_plots(tmp_path: Path) -> None:
    proc = run("serving", "tune", *SIM, *SMALL, "--rate", "300,600", "--budget", "5", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "r"
    result = json.loads((out / "result.json").read_text())
    assert len(result["measurements"]) == 10
    assert [m["workload"]["rate"] for m in result["measurements"]] == [300.0] * 5 + [600.0] * 5
    assert result["settings"]["space"]["size"] == 16
    assert result["best"] is not None and result["best_measurement"]["config"] == result["best"]
    for png in ("steps.png", "heatmap.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    assert "best configuration found" in proc.stdout


def test_tune_resume_after_the_run_replays_the_checkpoint(tmp_path: Path) -> None:
    args = ("serving", "tune", *SIM, *SMALL, "--rate", "300", "--seed", "1", "--out", "r")
    assert run(*args, "--budget", "3", cwd=tmp_path).returncode == 0
    again = run(*args, "--budget", "3", cwd=tmp_path)
    assert_user_error(again, "checkpoint.json exists", "--resume")
    proc = run(*args, "--budget", "6", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["replayed_from_checkpoint"] == 3 and len(result["measurements"]) == 6
    other = run(*args[:-2], "--seed", "2", "--out", "r", "--budget", "6", "--resume", cwd=tmp_path)
    assert_user_error(other, "other settings")


def test_tune_cost_objective_with_an_unmeetable_slo_says_so(tmp_path: Path) -> None:
    proc = run(
        "serving", "tune", *SIM, *SMALL, "--objective", "cost", "--slo-ms", "0.001", "--budget", "4", "--out", "r",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["slo_met"] is False
    assert "no measured configuration meets the SLO" in result["message"]
    assert result["best"] is not None


def test_tune_and_serve_on_the_real_engine(tmp_path: Path, model: Path) -> None:
    proc = run(
        "serving", "tune", "--backend", "real", "--model", model, *SMALL, "--rate", "100", "--requests", "20",
        "--budget", "2", "--out", "t", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "t" / "result.json").read_text())
    assert len(result["measurements"]) == 2
    assert "ONNX Runtime" in result["backend"]
    m = result["measurements"][0]
    assert 0 < m["p50_ms"] <= m["p99_ms"]
    proc = run(
        "serving", "serve", "--model", model, "--config", tmp_path / "t" / "result.json", "--rate", "50,100",
        "--requests", "20", "--out", "s", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    served = json.loads((tmp_path / "s" / "result.json").read_text())["measurements"]
    assert [m["workload"]["rate"] for m in served] == [50.0, 100.0]
    assert served[0]["config"] == result["best"]


def test_serve_reports_saturation_without_crashing(tmp_path: Path, model: Path) -> None:
    proc = run(
        "serving", "serve", "--model", model, "--rate", "100000", "--requests", "3000", "--max-batch", "1",
        "--out", "s", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    served = json.loads((tmp_path / "s" / "result.json").read_text())["measurements"][0]
    assert served["saturated"] is True
    assert "saturated" in proc.stdout


def test_profile_fits_and_extrapolates(tmp_path: Path, model: Path) -> None:
    proc = run(
        "serving", "profile", "--model", model, "--rows", "1,4,8", "--intra", "1,2", "--inter", "1", "--repeats", "2",
        "--cores", "16", "--out", "p", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "p"
    prof = json.loads((out / "profile.json").read_text())
    assert prof["source"] == "measured" and prof["cores"] == (os.cpu_count() or 1)
    assert json.loads((out / "profile_16.json").read_text())["source"] == "extrapolated"
    assert (out / "profile.png").read_bytes()[:8] == PNG_MAGIC
    # the fitted profile drives the simulator
    proc = run("serving", "tune", "--backend", "sim", "--profile", out / "profile.json", *SMALL[:-4], "--intra", "1",
               "--budget", "2", "--requests", "30", "--out", "r", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_bad_inputs_give_one_clear_line(tmp_path: Path, model: Path) -> None:
    few = run("serving", "profile", "--model", model, "--rows", "1,4", "--intra", "1", "--out", "p", cwd=tmp_path)
    assert_user_error(few, "at least 6")
    garbage = tmp_path / "bad.onnx"
    garbage.write_bytes(b"not a model")
    assert_user_error(run("serving", "serve", "--model", garbage, "--out", "s", cwd=tmp_path), "bad.onnx")
    missing = run("serving", "tune", "--model", tmp_path / "nope.onnx", "--out", "t", cwd=tmp_path)
    assert_user_error(missing, "nope.onnx")
    too_many = run("serving", "tune", *SIM, "--intra", "1,64", "--out", "t", cwd=tmp_path)
    assert_user_error(too_many, "intra_threads=64", "exceeds")
    empty = run("serving", "tune", *SIM, "--workers", ",", "--out", "t", cwd=tmp_path)
    assert_user_error(empty, "--workers", "empty")
    assert_user_error(run("serving", "tune", *SIM, "--tuner", "magic", "--out", "t", cwd=tmp_path), "magic")
    assert_user_error(run("serving", "tune", "--backend", "real", "--out", "t", cwd=tmp_path), "--model")
    assert_user_error(run("serving", "tune", "--backend", "gpu", "--out", "t", cwd=tmp_path), "gpu")
    assert_user_error(run("serving", "tune", *SIM, "--objective", "cost", "--out", "t", cwd=tmp_path), "SLO")
    assert_user_error(run("serving", "tune", *SIM, "--rate", "0", "--out", "t", cwd=tmp_path), "rate")
    bad_profile = tmp_path / "p.json"
    bad_profile.write_text('{"a_ms": 1}')
    assert_user_error(
        run("serving", "tune", "--backend", "sim", "--profile", bad_profile, "--out", "t", cwd=tmp_path), "p.json"
    )
    bad_config = tmp_path / "c.json"
    bad_config.write_text('{"workers": 2, "threads": 4}')
    assert_user_error(
        run("serving", "serve", "--model", model, "--config", bad_config, "--out", "s", cwd=tmp_path), "threads"
    )


def test_demo_serving_section(tmp_path: Path) -> None:
    proc = run("demo", "--out", "demo", "--only", "serving", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "demo"
    result = json.loads((out / "result.json").read_text())
    assert result["sections"] == ["serving"]
    real = result["serving_real"]
    assert "real measurements" in real["data"]
    assert len(real["measurements"]) == 12 and real["best"] is not None
    assert "extrapolated" in result["serving_sim"]["data"]
    html = (out / "index.html").read_text()
    for png in ("real_steps.png", "real_heatmap.png", "sim_steps.png"):
        assert (out / "serving" / png).read_bytes()[:8] == PNG_MAGIC
        assert f'src="serving/{png}"' in html
    assert "was not written" not in html
