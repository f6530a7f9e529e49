"""`nas search --space FILE.py:space --objective FILE.py:train`: your own space and training function, end to end.

The objective runs in worker processes; these tests use a tiny pure-Python objective (no training) so that what is
timed is mlsysopt: the worker pool, failures, the timeout, resume and export.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import assert_user_error, run_inprocess

USER = """
import os, sys, time
from mlsysopt.nas import Blocks, Space

space = Space(knobs={"lr": [0.1, 0.01, 0.001]}, blocks=Blocks({"width": [8, 16, 24, 32, 48, 64]}, min=1, max=2),
              resources=lambda p: {"params": float(sum(b["width"] for b in p["blocks"]))}, measured=("latency_ms",),
              name="toy")


LIMIT = 3


def train(params, seed=0):
    mode = os.environ.get("TOY_MODE", "")
    widths = [b["width"] for b in params["blocks"]]
    if mode == "raise":
        return 1 / 0
    if mode == "exit":
        sys.exit(3)
    if mode == "mixed" and widths[0] == 64:
        sys.exit(4)
    if mode == "mixed" and widths[0] == 32:
        return "good"
    if mode == "mixed" and widths[0] == 16 and not os.path.exists("killed"):
        open("killed", "w").close()
        os.kill(os.getpid(), 9)
    if mode == "sleep" and not os.path.exists("slept"):
        open("slept", "w").close()
        time.sleep(120)
    value = {0.1: 0.5, 0.01: 0.8, 0.001: 0.6}[params["lr"]] + sum(widths) / 1000
    return {"value": value, "test_value": value - 0.01, "resources": {"latency_ms": max(widths) / 10}}
"""


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "toy.py").write_text(USER)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _error_line(ran: object, *needles: str) -> str:
    """A failure mid-search: exit 2, no traceback, the progress output then one last ``error:`` line."""
    assert ran.returncode == 2, ran  # type: ignore[attr-defined]
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]  # type: ignore[attr-defined]
    assert "Traceback" not in ran.stderr and lines[-1].startswith("error:")  # type: ignore[attr-defined]
    assert sum(ln.startswith("error:") for ln in lines) == 1
    for n in needles:
        assert n in lines[-1], (n, lines[-1])
    return lines[-1]


def _search(*extra: str, budget: int = 6, out: str = "run") -> object:
    return run_inprocess("nas", "search", "--space", "toy.py:space", "--objective", "toy.py:train",
                         "--budget", str(budget), "--out", out, *extra)  # fmt: skip


def test_search_export_and_resume(user: Path) -> None:
    ran = _search("--max-params", "50", "--limit", "max_latency_ms=3", "--workers", "2", "--method", "evolution")
    assert ran.returncode == 0, ran.stderr
    res = json.loads((user / "run" / "result.json").read_text())
    assert res["evaluated"] == 6 and res["failed"] == 0 and res["space"]["data"] == "your training function"
    for ev in res["evaluations"]:  # params by the resources function before training, latency measured by it
        assert sum(b["width"] for b in ev["decoded"]["blocks"]) <= 50
    best = res["best"]
    assert best["feasible"] and best["resources"]["latency_ms"] <= 3 and best["extra"]["value"] == best["perf"]
    assert "validation" in ran.stdout and json.dumps(res["best_decoded"])[:20] in ran.stdout.replace("\n", "")
    more = _search("--max-params", "50", "--limit", "max_latency_ms=3", "--workers", "2", "--method", "evolution",
                   "--resume", budget=9)  # fmt: skip
    assert more.returncode == 0, more.stderr
    again = json.loads((user / "run" / "result.json").read_text())
    assert again["evaluated"] == 9 and again["resumed_from"] == 6
    assert [e["arch"] for e in again["evaluations"][:6]] == [e["arch"] for e in res["evaluations"]]
    exp = run_inprocess("nas", "export", "run", "--out", "exp")
    assert exp.returncode == 0, exp.stderr
    params = json.loads((user / "exp" / "params.json").read_text())
    assert params["params"] == again["best_decoded"] and params["value"] == again["best"]["extra"]["value"]
    warm = _search("--warm-start", "auto", budget=3, out="run2")  # EPNAS's prior from the run above's records
    assert warm.returncode == 0, warm.stderr
    settings = json.loads((user / "run2" / "settings.json").read_text())
    assert settings["warm_start"]["used"] == 9 and "warm start" in warm.stderr
    # the methods that cannot run without a prior get it from --warm-start on a space that has none of its own
    for method in ("zero_shot", "bananas_prior"):  # (one check after the warm start, shared: one warm run)
        cold = _search("--method", method, budget=3, out=f"cold_{method}")
        assert_user_error(cold, f"method '{method}' needs a transfer prior", "--warm-start")
        assert not (user / f"cold_{method}").exists()
    warm = _search("--method", "bananas_prior", "--warm-start", "auto", budget=2, out="warm_prior")
    assert warm.returncode == 0, warm.stderr
    assert json.loads((user / "warm_prior" / "result.json").read_text())["evaluated"] == 2


def test_a_broken_objective_is_one_error(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOY_MODE", "raise")
    first = "the first 3 evaluations all failed, so the search stopped (last: the objective raised ZeroDivisionError"
    line = _error_line(_search(), first,
                       "(at toy.py:")  # fmt: skip
    assert "fix the objective and run the same command with --resume" in line
    assert (user / "run" / "checkpoint.pt").is_file() and not (user / "run" / "result.json").exists()
    monkeypatch.setenv("TOY_MODE", "")  # fixed: the advice works, and the 3 failed trials leave the budget whole
    again = _search("--resume")  # the same command, as the advice says
    assert again.returncode == 0, again.stderr
    res = json.loads((user / "run" / "result.json").read_text())
    assert res["failed"] == 3 and sum(e["ok"] for e in res["evaluations"]) == 6
    monkeypatch.setenv("TOY_MODE", "exit")
    _error_line(_search(out="run2"), "(last: the objective called sys.exit(3))")


def test_exits_bad_returns_and_signals_fail_their_trial_only(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a third of the first-block widths fail (32, 64): the budget fills with successes before failures reach it (the
    # search stops once they do), whatever the draws; with half of them failing it was a coin toss per seed
    monkeypatch.setenv("TOY_MODE", "mixed")
    ran = _search("--method", "random", budget=16)
    assert ran.returncode == 0, ran.stderr
    res = json.loads((user / "run" / "result.json").read_text())
    by_width: dict[int, list[dict]] = {}
    for e in res["evaluations"]:
        by_width.setdefault(e["decoded"]["blocks"][0]["width"], []).append(e)
    assert all(len(by_width[w]) for w in (8, 16, 32, 64))
    assert all(e["error"] == "the objective called sys.exit(4)" for e in by_width[64])
    assert all("the objective's return value is 'good' (str), not a number" in e["error"] for e in by_width[32])
    assert all(e["ok"] for e in by_width[8] + by_width[16])  # the trial whose worker was killed got its retry
    assert (user / "killed").exists() and res["failed"] == len(by_width[32]) + len(by_width[64])
    assert res["best"]["feasible"] and res["evaluated"] == 16 + res["failed"]  # failures do not use up the budget


def test_the_timeout_stops_a_trial_in_flight_and_resume_redoes_it(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOY_MODE", "sleep")
    ran = _search("--timeout", "3", budget=4)
    assert ran.returncode == 0, ran.stderr
    res = json.loads((user / "run" / "result.json").read_text())
    assert res["stopped_by"] == "timeout" and res["evaluated"] == 0 and res["wall_s"] < 60
    assert "--resume" in ran.stdout
    again = _search("--resume", budget=4)
    assert again.returncode == 0, again.stderr
    assert json.loads((user / "run" / "result.json").read_text())["evaluated"] == 4


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--space", "nope.py:space", "--objective", "nope.py:train"], ["--space", "no such Python file nope.py"]),
        (["--space", "toy.py:missing", "--objective", "toy.py:train"], ["has no attribute 'missing'"]),
        (["--space", "toy.py:LIMIT", "--objective", "toy.py:train"], ["is a int", "expected an mlsysopt.nas.Space"]),
        (["--space", "toy.py:train", "--objective", "toy.py:train"], ["calling it failed (TypeError"]),
        (["--space", "toy.py:space", "--objective", "toy.py:space"], ["--objective", "not a function"]),
        (["--space", "toy.py:space"], ["give the training function with --objective"]),
        (["--space", "nasbench-graph:cora", "--objective", "toy.py:train"], ["--objective applies to your own"]),
        (["--space", "toy.py:space", "--objective", "toy.py:train", "--epochs", "2"], ["--epochs applies only"]),
        (
            ["--space", "toy.py:space", "--objective", "toy.py:train", "--limit", "max_watts=3"],
            ["needs resource 'watts'"],
        ),
        (["--space", "toy.py:space", "--objective", "toy.py:train", "--limit", "watts"], ["expected NAME=VALUE"]),
        (["--space", "toy.py:space", "--objective", "toy.py:train", "--direction", "up"], ["unknown --direction"]),
    ],
)
def test_bad_user_inputs_are_one_error_and_leave_nothing(user: Path, args: list[str], needles: list[str]) -> None:
    assert_user_error(run_inprocess("nas", "search", *args, "--budget", "3", "--out", "bad"), *needles)
    assert not (user / "bad").exists()


def test_the_readme_model_family_searches_exports_and_reloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documentation's my_nas.py (a PyTorch MLP family trained for real on digits; docs/bring-your-own.md), run as
    the page says."""
    import importlib.util
    import re

    import torch

    page = (Path(__file__).resolve().parents[2] / "docs" / "bring-your-own.md").read_text()
    code = re.search(r"^```python\n(# my_nas\.py.*?)^```", page, flags=re.S | re.M)
    assert code, "docs/bring-your-own.md lost its my_nas.py example"
    (tmp_path / "my_nas.py").write_text(code.group(1))
    monkeypatch.chdir(tmp_path)
    ran = run_inprocess("nas", "search", "--space", "my_nas.py:space", "--objective", "my_nas.py:train",
                        "--max-params", "5000", "--budget", "3", "--out", "runs/mlp")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    res = json.loads((tmp_path / "runs/mlp/result.json").read_text())
    assert res["evaluated"] == 3 and res["failed"] == 0 and res["best"]["resources"]["params"] <= 5000
    assert run_inprocess("nas", "export", "runs/mlp", "--out", "runs/mlp-best").returncode == 0
    params = json.loads((tmp_path / "runs/mlp-best/params.json").read_text())
    spec = importlib.util.spec_from_file_location("readme_my_nas", tmp_path / "my_nas.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    model = mod.build(params["params"])
    model.load_state_dict(torch.load(tmp_path / "runs/mlp-best/state_dict.pt", weights_only=True))
    _, valid, _ = mod.data()
    assert mod.accuracy(model, valid) == params["value"] == res["best"]["extra"]["value"]  # the very trained model


def test_the_study_and_the_cli_run_the_same_search_and_the_store_reads_like_optuna(user: Path) -> None:
    import optuna

    from mlsysopt.nas import Study
    from mlsysopt.nas.objective import load_objective, load_space

    ran = _search("--direction", "minimize", "--storage", f"sqlite:///{user / 'store.db'}", budget=5)
    assert ran.returncode == 0, ran.stderr
    res = json.loads((user / "run" / "result.json").read_text())
    train = load_objective("toy.py:train")
    study = Study(load_space("toy.py:space"), seed=0, direction="minimize")  # method auto, budget = n_trials
    study.optimize(lambda p, seed=0: train(p, seed=seed)["value"], n_trials=5)
    assert [e["decoded"] for e in res["evaluations"]] == [t.params for t in study.trials]  # same method and seed
    assert [e["extra"]["value"] for e in res["evaluations"]] == [t.value for t in study.trials]
    stored = optuna.load_study(study_name="run", storage=f"sqlite:///{user / 'store.db'}")
    assert stored.direction == optuna.study.StudyDirection.MINIMIZE and stored.metric_names == ["train"]
    assert set(stored.trials[0].params) >= {"lr", "b1.width"} and stored.trials[0].params["lr"] in (0.1, 0.01, 0.001)
    assert [t.value for t in stored.trials] == [t.value for t in study.trials]  # your values, not negated
    assert stored.best_value == study.best_value
