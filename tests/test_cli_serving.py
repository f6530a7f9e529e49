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


REFUSED = [
    # (command and options, what the one error line must say); "{model}" is the exported zoo:cnn, "{tmp}" the test
    # folder. Every refusal must leave no run folder behind: no settings.json, no exported .onnx, no empty folder.
    (("profile", "--model", "{model}", "--rows", "1,4", "--intra", "1"), ("at least 6",)),
    (("profile", "--model", "{model}", "--intra", "1,999"), ("999 threads exceeds",)),
    (("profile", "--model", "{model}", "--rows", "1,x"), ("--rows", "comma-separated")),
    (("profile", "--model", "{tmp}/bad.onnx"), ("bad.onnx",)),
    (("profile", "--model", "zoo:nope"), ("unknown zoo model 'nope'",)),
    (("profile", "--model", "zoo:cnn", "--input-shape", "3,8,8"), ("fixed at 32",)),
    (("tune", "--model", "{tmp}/nope.onnx"), ("nope.onnx",)),
    (("tune", *SIM, "--intra", "1,64"), ("intra_threads=64", "exceeds")),
    (("tune", *SIM, "--workers", ","), ("--workers", "empty")),
    (("tune", *SIM, "--tuner", "magic"), ("magic",)),
    (("tune", *SIM, "--tuner", "rrl", "--resume"), ("no checkpoint",)),
    (("tune", "--backend", "real"), ("--model",)),
    (("tune", "--backend", "gpu"), ("gpu",)),
    (("tune", *SIM, "--objective", "cost"), ("SLO",)),
    (("tune", *SIM, "--rate", "0"), ("rate",)),
    (("tune", "--backend", "sim", "--profile", "{tmp}/p.json"), ("p.json", "missing key")),
    (("tune", "--backend", "real", "--model", "zoo:cnn", "--input-shape", "3,8,8"), ("fixed at 32",)),
    (("serve", "--model", "{tmp}/bad.onnx"), ("bad.onnx",)),
    (("serve", "--model", "{model}", "--config", "{tmp}/c.json"), ("threads",)),
    (("serve", "--model", "{model}", "--config", "{tmp}/big.json"), ("workers=999", "exceeds")),
    (("serve", "--model", "zoo:cnn", "--input-shape", "3,8,8"), ("fixed at 32",)),
    (("serve", "--model", "{model}", "--rate", "50,-1"), ("rate",)),
]


@pytest.mark.parametrize(("args", "needles"), REFUSED, ids=[f"{a[0]}-{i}" for i, (a, _) in enumerate(REFUSED)])
def test_refused_inputs_give_one_clear_line_and_leave_no_run_folder(
    tmp_path: Path, model: Path, args: tuple[str, ...], needles: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"  # where the command exports a zoo model while it validates
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    (tmp_path / "p.json").write_text('{"a_ms": 1}')
    (tmp_path / "c.json").write_text('{"workers": 2, "threads": 4}')
    (tmp_path / "big.json").write_text('{"workers": 999}')
    argv = [a.format(model=model, tmp=tmp_path) for a in args]
    assert_user_error(run("serving", *argv, "--out", "out", cwd=tmp_path), *needles)
    assert not (tmp_path / "out").exists()
    assert not list(temp.glob("mlsysopt-model-*"))


def test_a_busy_run_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    from mlsysopt.io import RunDir

    with RunDir(tmp_path / "r", checkpoint=None):
        proc = run("serving", "tune", *SIM, *SMALL, "--budget", "2", "--out", "r", cwd=tmp_path)
        assert_user_error(proc, "in use by process", str(os.getpid()))
    assert not (tmp_path / "r" / "result.json").exists()


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
        assert f'data-file="serving/{png}"' in html
    assert "was not written" not in html
    assert "RRL&#x27;s pick" in html and "summary unavailable" not in html  # the summary reads serving's result
