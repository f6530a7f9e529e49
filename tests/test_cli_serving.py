"""``mlsysopt serving profile | tune | serve | study`` run for real with tiny budgets, and their bad-input errors."""

from __future__ import annotations

import json
import os
import tempfile
from html import unescape
from pathlib import Path

import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run, run_inprocess

SIM = ("--engine", "sim", "--profile", "synthetic:4", "--requests", "60")
SMALL = ("--instances", "1,2", "--max-batch", "1,4", "--batch-timeout-ms", "0,2", "--intra", "1,2", "--inter", "1")
QUICK = ("--confirm-top", "2", "--confirm-rounds", "2", "--noise-windows", "2")

# a model whose batch is fixed inside: every exporter's file fails at a batch > 1 (a Reshape to 1 x 768)
FIXED_BATCH = """
import torch
from torch import nn

class Fixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(768, 4)

    def forward(self, x):
        return self.fc(x.reshape(1, 768))

def fixed():
    return Fixed().eval(), (torch.randn(1, 3, 16, 16),)
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlsysopt.serving.model import export_zoo_onnx

    return export_zoo_onnx("cnn", tmp_path_factory.mktemp("m") / "cnn.onnx")


def test_tune_on_the_simulator_writes_measurements_confirmation_and_usable_configs(tmp_path: Path) -> None:
    import onnxruntime as ort

    from mlsysopt.serving.deploy import parse_triton_config, session_options_from_json

    proc = run_inprocess(
        "serving", "tune", *SIM, *SMALL, *QUICK, "--rate", "300,600", "--budget", "5", "--out", "r", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "r"
    result = json.loads((out / "result.json").read_text())
    assert len(result["measurements"]) == 10
    assert [m["workload"]["rate"] for m in result["measurements"]] == [300.0] * 5 + [600.0] * 5
    assert result["settings"]["space"]["size"] == 12 and result["space"]["raw_size"] == 32  # timeout at b1, modes
    assert all(m["windows"] >= 3 and m["stable"] is not None and "mean_ms" in m["ci"] for m in result["measurements"])
    assert result["noise"]["windows"] == 2 and result["noise"]["cv_mean_ms"] >= 0
    # the best per rate, search-time and confirmed; the pick is the last rate's confirmed one
    assert [r["rate"] for r in result["per_rate"]] == [300.0, 600.0]
    conf = result["confirmation"][-1]
    assert (conf["rounds"] == 2 and any(c["is_default"] for c in conf["candidates"])) or len(conf["candidates"]) == 2
    assert result["best"] == conf["pick"]["config"] == result["per_rate"][-1]["confirmed_best"]
    lo, hi = result["confirmed_interval"]
    assert lo <= result["confirmed_value"] <= hi
    for png in ("steps.png", "heatmap.png", "confirm.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    # the verdict, on confirmed values: the pick or the default, and the files describe what it recommends
    verdict = result["verdict"]
    assert verdict["decision"] in ("use the pick", "keep the default") and result["message"] == (
        f"{verdict['words']} (at 600 req/s)"
    )
    rec = result["recommended"]
    assert rec == (result["best"] if verdict["decision"] == "use the pick" else verdict["default"])
    assert result["task"]["profile"]["model"] == "synthetic-cnn" and result["task"]["source"] == "profile"
    # usable outside mlsysopt: real SessionOptions, a config.pbtxt that parses as Triton's proto
    opts = session_options_from_json(json.loads((out / "ort_session_options.json").read_text()))
    assert isinstance(opts, ort.SessionOptions) and opts.intra_op_num_threads == rec["intra_threads"]
    cfg = parse_triton_config((out / "config.pbtxt").read_text())
    assert cfg.max_batch_size == rec["max_batch"] and cfg.instance_group[0].count == rec["instances"]
    assert cfg.parameters["intra_op_thread_count"].string_value == str(rec["intra_threads"])
    assert "answer per rate" in proc.stdout and verdict["decision"] in proc.stdout


def test_tune_resume_after_the_run_replays_the_checkpoint(tmp_path: Path) -> None:
    args = ("serving", "tune", *SIM, *SMALL, *QUICK, "--rate", "300", "--seed", "1", "--out", "r")
    assert run_inprocess(*args, "--budget", "3", cwd=tmp_path).returncode == 0
    again = run_inprocess(*args, "--budget", "3", cwd=tmp_path)
    assert_user_error(again, "checkpoint.json exists", "--resume")
    before = (tmp_path / "r" / "result.json").read_text()
    smaller = run_inprocess(*args, "--budget", "2", "--resume", cwd=tmp_path)
    assert_user_error(smaller, "already holds 3 search measurements", "--budget 3 or more")
    assert (tmp_path / "r" / "result.json").read_text() == before
    proc = run_inprocess(*args, "--budget", "6", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["replayed_from_checkpoint"] == 3 and len(result["measurements"]) == 6
    other = run_inprocess(*args[:-2], "--seed", "2", "--out", "r", "--budget", "6", "--resume", cwd=tmp_path)
    assert_user_error(other, "other settings")


def test_tune_cost_objective_with_an_unmeetable_slo_says_slo_missed(tmp_path: Path) -> None:
    proc = run_inprocess(
        "serving", "tune", *SIM, *SMALL, *QUICK, "--objective", "cost", "--slo-ms", "0.001", "--budget", "3",
        "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["slo_met"] is False and result["message"].startswith("SLO missed")
    assert result["per_rate"][0]["confirmed"] == "SLO missed" and result["best"] is not None
    assert "SLO missed" in proc.stdout and "1e+06" not in proc.stdout
    # no deployment files for a configuration that misses the SLO, unless asked
    assert result["verdict"]["decision"] == "SLO missed" and result["files"] == [
        "steps.png",
        "heatmap.png",
        "confirm.png",
    ]
    assert not (tmp_path / "r" / "config.pbtxt").exists() and not (tmp_path / "r" / "ort_session_options.json").exists()
    # and serve --config refuses the result: it recommends no configuration
    refused = run_inprocess("serving", "serve", "--config", tmp_path / "r" / "result.json", "--out", "s", cwd=tmp_path)
    assert_user_error(refused, "verdict 'SLO missed'")
    assert not (tmp_path / "s").exists()


@pytest.mark.quiet
def test_tune_then_serve_on_a_zoo_model_reproduces_the_confirmed_value(tmp_path: Path) -> None:
    one = ("--instances", "1", "--max-batch", "1,4", "--batch-timeout-ms", "0", "--intra", "1", "--inter", "1")
    proc = run(
        "serving", "tune", "--engine", "real", "--model", "zoo:cnn", *one, "--rate", "200", "--requests", "40",
        "--budget", "2", "--confirm-top", "1", "--confirm-rounds", "3", "--noise-windows", "5", "--out", "t",
        cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "t" / "result.json").read_text())
    assert "ONNX Runtime" in result["backend"] and "own process" in result["backend"]
    assert (tmp_path / "t" / "cnn.onnx").is_file()  # the export mlsysopt made, kept in the run folder
    m = result["measurements"][0]
    assert 0 < m["p50_ms"] <= m["p99_ms"] and m["extra"]["loadgen_pid"] != os.getpid()
    # serve --config RESULT serves what the verdict chose (the default when it says "keep the default")
    kept = result["verdict"]["decision"] == "keep the default" and result["recommended"] != result["best"]
    rate = result["per_rate"][-1]
    lo, hi = rate["default_confirmed_interval"] if kept else result["confirmed_interval"]
    confirmed = rate["default_confirmed_value"] if kept else result["confirmed_value"]
    proc = run(  # the model the tune exported and served (zoo:cnn would export the same file again, ~2.5 s)
        "serving", "serve", "--model", tmp_path / "t" / "cnn.onnx", "--config", tmp_path / "t" / "result.json",
        "--rate", "200", "--requests", "40", "--out", "s", cwd=tmp_path, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    served = json.loads((tmp_path / "s" / "result.json").read_text())["measurements"][0]
    assert served["config"] == result["recommended"]
    # the served value is the confirmed one as far as a new process can reproduce it. A new process moves this
    # sub-millisecond latency by more than the tune's windows and rounds show (they share one process): 14 `serve`
    # runs of one configuration gave 0.58-0.94 ms where two tunes confirmed 0.76 [0.74, 0.80] and 0.85 [0.80, 0.89]
    # (2026-12-06; docs/guides/serving.md). So the check is the served configuration (exact, above) and a value no
    # more than 1.5x from the confirmed one (a wrong batch or thread count, or a server not warmed up, is more).
    figures = (served["mean_ms"], served["ci"]["mean_ms"], confirmed, (lo, hi), result["noise"]["mean_ms"])
    assert 1 / 1.5 <= served["mean_ms"] / confirmed <= 1.5, figures


def test_serve_sweeps_rates_draws_the_curve_and_marks_saturation(tmp_path: Path, model: Path) -> None:
    proc = run_inprocess(
        "serving", "serve", "--model", model, "--rate", "200,100000", "--requests", "100", "--slo-ms", "50",
        "--out", "s", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "s" / "result.json").read_text())
    _low, high = result["measurements"]
    assert high["saturated"] is True and high["throughput"] < 0.95 * high["offered_rps"]
    assert [p["state"] for p in result["curve"]][1] == "saturated" and result["slo_ms"] == 50
    assert (tmp_path / "s" / "curve.png").read_bytes()[:8] == PNG_MAGIC
    assert "saturated" in proc.stdout


def test_profile_fits_calibrates_and_warns_about_extrapolation(tmp_path: Path, model: Path) -> None:
    proc = run_inprocess(
        "serving", "profile", "--model", model, "--rows", "1,4,8", "--intra", "1,2", "--inter", "1", "--repeats", "1",
        "--cores", "16", "--out", "p", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "p"
    prof = json.loads((out / "profile.json").read_text())
    assert prof["source"] == "measured" and prof["cores"] == (os.cpu_count() or 1)
    assert len(prof["table"]) == 6 and prof["measured_threads"] == 2 and prof["dispatch_ms"] >= 0
    assert json.loads((out / "profile_16.json").read_text())["source"] == "extrapolated"
    assert (out / "profile.png").read_bytes()[:8] == PNG_MAGIC
    assert "warning: extrapolation: a 16-core profile" in proc.stderr and "6/6" in proc.stderr  # the progress bar
    proc = run_inprocess(
        "serving", "tune", "--engine", "sim", "--profile", out / "profile.json", *SMALL[:-4], "--intra", "1",
        *QUICK, "--budget", "2", "--requests", "30", "--out", "r", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_study_runs_tuners_by_seeds_on_the_local_pool(tmp_path: Path) -> None:
    proc = run_inprocess(
        "serving", "study", "--tuners", "rrl,random", "--seeds", "2", "--profile", "synthetic:2", "--requests", "60",
        "--cap", "0.5", "--out", "st", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "st" / "result.json").read_text())
    assert set(result["evals_to_5pct"]) == {"rrl", "random"} and len(result["per_seed"]) == 4
    assert result["executor"] == "serial"  # --workers 1; the pool and Ray: tests/serving/test_study.py
    assert (tmp_path / "st" / "study.png").read_bytes()[:8] == PNG_MAGIC


def test_help_shows_defaults_and_the_renamed_options() -> None:
    text = run_inprocess("serving", "tune", "--help").stdout
    for needle in ("--instances", "--engine", "--timeout", "--resume", "--no-resume", "default: 30"):
        assert needle in text, needle


REFUSED = [
    # (command and options, what the one error line must say); "{model}" is the exported zoo:cnn, "{tmp}" the test
    # folder. Every refusal must leave no run folder behind: no settings.json, no exported .onnx, no empty folder.
    (("profile", "--model", "{model}", "--rows", "1,4", "--intra", "1"), ("at least 6",)),
    (("profile", "--model", "{model}", "--intra", "1,999"), ("999 threads exceeds",)),
    (("profile", "--model", "{model}", "--rows", "1,x"), ("--rows", "comma-separated")),
    (("profile", "--model", "{tmp}/bad.onnx"), ("bad.onnx",)),
    (("profile", "--model", "zoo:nope"), ("unknown zoo model 'nope'",)),
    (("profile", "--model", "zoo:cnn", "--input-shape", "1,3,8,8"), ("fixed at 32",)),
    (("profile", "--model", "montage"), ("a recipe source", "serving needs")),
    (("tune", "--model", "{tmp}/nope.onnx"), ("nope.onnx",)),
    (("tune", *SIM, "--intra", "1,64"), ("intra_threads=64", "exceeds")),
    (("tune", *SIM, "--instances", ","), ("--instances", "empty")),
    (("tune", *SIM, "--max-batch", "1.5"), ("--max-batch", "whole numbers")),
    (("tune", *SIM, "--tuner", "magic"), ("magic",)),
    (("tune", *SIM, "--tuner", "rrl", "--resume"), ("no checkpoint",)),
    (("tune", "--engine", "real"), ("--model",)),
    (("tune", "--engine", "gpu"), ("gpu",)),
    (("tune", *SIM, "--objective", "cost"), ("SLO",)),
    (("tune", *SIM, "--rate", "0"), ("rate",)),
    (("tune", *SIM, "--rate", "1e308"), ("1,000,000 req/s",)),
    (("tune", "--engine", "sim", "--profile", "synthetic:abc"), ("--profile synthetic:abc", "not a core count")),
    (("tune", "--engine", "real", "--model", "zoo:cnn", "--rate", "0.001"), ("at least 1 req/s", "10 s")),
    (("tune", "--engine", "real", "--model", "zoo:cnn", "--max-batch", "1,100000"), ("--max-batch 100,000", "GB")),
    (("tune", *SIM[:-2], "--requests", "1000000"), ("--requests", "100,000")),
    (("tune", "--engine", "sim", "--profile", "{tmp}/p.json"), ("p.json", "missing key")),
    (("tune", "--engine", "real", "--model", "zoo:cnn", "--input-shape", "1,3,8,8"), ("fixed at 32",)),
    (
        ("tune", "--engine", "real", "--model", "{tmp}/fixed.py:fixed", "--max-batch", "1,4"),
        ("no ONNX export", "op Reshape", "{4,3,16,16}"),
    ),
    (("serve", "--model", "{tmp}/bad.onnx"), ("bad.onnx",)),
    (("serve", "--model", "{model}", "--config", "{tmp}/c.json"), ("threads",)),
    (("serve", "--model", "{model}", "--config", "{tmp}/big.json"), ("instances=999", "exceeds")),
    (("serve", "--model", "{model}", "--config", "{tmp}/frac.json"), ("knob max_batch", "whole number", "1.5")),
    (("serve", "--model", "{model}", "--config", "{tmp}/true.json"), ("knob instances", "whole number", "True")),
    (("serve", "--model", "zoo:cnn", "--input-shape", "1,3,8,8"), ("fixed at 32",)),
    (("serve", "--model", "{model}", "--rate", "50,-1"), ("rate",)),
    (("serve", "--model", "{model}", "--rate", "1e308"), ("1,000,000 req/s",)),
    (("study", "--tuners", "rrl,nope"), ("nope",)),
    (("study", "--backend", "spark"), ("spark",)),
]


@pytest.mark.parametrize(("args", "needles"), REFUSED, ids=[f"{a[0]}-{i}" for i, (a, _) in enumerate(REFUSED)])
def test_refused_inputs_give_one_clear_line_and_leave_no_run_folder(
    tmp_path: Path, model: Path, args: tuple[str, ...], needles: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"  # where the command exports a PyTorch model while it validates
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # for the processes the command starts
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # and for this one (the command runs in-process)
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    (tmp_path / "p.json").write_text('{"a_ms": 1}')
    (tmp_path / "c.json").write_text('{"instances": 2, "threads": 4}')
    (tmp_path / "big.json").write_text('{"instances": 999}')
    (tmp_path / "frac.json").write_text('{"instances": 1, "max_batch": 1.5}')
    (tmp_path / "true.json").write_text('{"instances": true}')
    (tmp_path / "fixed.py").write_text(FIXED_BATCH)
    argv = [a.format(model=model, tmp=tmp_path) for a in args]
    line = assert_user_error(run_inprocess("serving", *argv, "--out", "out", cwd=tmp_path), *needles)
    assert "\ufe0f" not in line and not any(ord(ch) > 0x2000 for ch in line)  # no emoji, as typed
    assert not (tmp_path / "out").exists()
    assert not list(temp.glob("mlsysopt-model-*"))


def test_a_busy_run_folder_is_refused_naming_the_holder(tmp_path: Path) -> None:
    from mlsysopt.io import RunDir

    with RunDir(tmp_path / "r", checkpoint=None):
        proc = run("serving", "tune", *SIM, *SMALL, "--budget", "2", "--out", "r", cwd=tmp_path)
        assert_user_error(proc, "in use by process", str(os.getpid()))
    assert not (tmp_path / "r" / "result.json").exists()


def test_demo_serving_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlsysopt.demo import serving as section

    # the section's budgets made smaller (about a minute at its own): the same steps, plots and verdicts
    monkeypatch.setattr(section, "REAL_BUDGET", 5)
    monkeypatch.setattr(section, "REAL_REQUESTS", 50)  # shorter windows of the same real measurements
    monkeypatch.setattr(section, "SIM_BUDGET", 12)
    # a held-out preset at 4 cores (extrapolated, as at 16): its exhaustive table of the simulated space is a fraction
    monkeypatch.setattr(section, "SIM_PRESET", "mobilenet@4")
    proc = run_inprocess("demo", "--out", "demo", "--only", "serving", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "demo"
    result = json.loads((out / "result.json").read_text())
    assert result["sections"] == ["serving"]
    real = result["serving_real"]
    assert "real measurements" in real["data"]
    assert len(real["measurements"]) == section.REAL_BUDGET and real["best"] is not None
    assert real["confirmation"]["rounds"] == 2 and real["confirmation"]["pick"]["config"]
    # the verdict's configuration as a Ray Serve deployment, read back as the configuration it chose
    from mlsysopt.serving.inputs import load_config
    from mlsysopt.serving.space import Config

    assert real["rayserve_deployment"][0] == "serving/rayserve/serve_config.yaml"
    chosen = load_config(out / "serving" / "rayserve" / "serve_config.yaml")
    assert chosen == Config.from_dict(real["verdict"]["recommended"])
    assert "extrapolated" in result["serving_sim"]["data"]
    html = (out / "index.html").read_text()
    assert result["serving_sim"]["headline"] in unescape(html)  # who won, in the section's own words
    for png in ("real_steps.png", "real_heatmap.png", "sim_steps.png"):
        assert (out / "serving" / png).read_bytes()[:8] == PNG_MAGIC
        assert f'data-file="serving/{png}"' in html
    assert "was not written" not in html
    assert "RRL&#x27;s pick" in html and "summary unavailable" not in html  # the summary reads serving's result
