"""Every checkpoint a run writes is read back by its own ``--resume``: each resumable command is stopped by SIGTERM in
each of its phases, right after a checkpoint of that phase, and resumed; the resume finishes what the uninterrupted
run does, and the study store is left with no trial ``running`` and the run's status (``interrupted``, then ``done``).

The command runs in this process (:func:`cli_helpers.run_inprocess`: no interpreter start) and sends the signal to
itself from inside its own checkpoint write (the one place every checkpoint goes through), so the phase is exact and
the test does not race the command; the handler raises where the command happens to be next, as a real SIGTERM does.
tests/test_cli_signals.py sends real signals to a command in a process of its own.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import Ran, run_inprocess


def _stop_after(monkeypatch: pytest.MonkeyPatch, when: Callable[[Any], bool]) -> list[Any]:
    """SIGTERM this process right after the first checkpoint whose state satisfies ``when`` (``save_checkpoint``, or
    ``write_json`` of the run's checkpoint file); returns the list the state that fired goes in."""
    from mlsysopt.io import RunDir

    fired: list[Any] = []
    save, write = RunDir.save_checkpoint, RunDir.write_json

    def fire(state: Any) -> None:
        if not fired and when(state):
            fired.append(state)
            os.kill(os.getpid(), signal.SIGTERM)  # handled in this (the main) thread at its next instruction

    def save_checkpoint(self: RunDir, state: Any) -> Path:
        path = save(self, state)
        fire(state)
        return path

    def write_json(self: RunDir, name: str, data: Any) -> Path:
        path = write(self, name, data)
        if name == self.checkpoint_name:
            fire(data)
        return path

    monkeypatch.setattr(RunDir, "save_checkpoint", save_checkpoint)
    monkeypatch.setattr(RunDir, "write_json", write_json)
    return fired


def _assert_stopped(proc: Ran, out: Path, fired: list[Any], result: str = "result.json") -> None:
    """Exit 143 with one line that says --resume continues; the lock released, no result yet."""
    assert fired, f"no checkpoint of that phase was written: {proc.stderr[-1500:]}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 143, proc.stderr[-1500:]
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], proc.stderr[-1500:]
    assert lines[-1].startswith("error: stopped by SIGTERM") and "--resume" in lines[-1], lines[-1]
    assert "Traceback" not in proc.stderr
    assert not (out / ".lock").exists() and not (out / result).exists()


def _study(db: Path, run: str) -> tuple[str, dict[str, int]]:
    """The status of the study of run folder ``run`` and its trials per state."""
    con = sqlite3.connect(db)
    try:
        (sid,) = con.execute("SELECT study_id FROM studies WHERE study_name = ?", (run,)).fetchone()
        (status,) = con.execute("SELECT value_json FROM study_user_attributes WHERE study_id = ? AND "
                                "key = 'mlsysopt.status'", (sid,)).fetchone()  # fmt: skip
        states = dict(con.execute("SELECT state, count(*) FROM trials WHERE study_id = ? GROUP BY state", (sid,)))
    finally:
        con.close()
    return json.loads(status), states


def _stop_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], out: str,
                     *stops: Callable[[Any], bool], result: str = "result.json") -> dict:  # fmt: skip
    """Run ``args`` once per stop, each stopped after the first checkpoint its ``when`` accepts (the second on are
    resumes), check what each left, then resume to the end; returns the result."""
    store = ("--storage", str(tmp_path / "s.db"))
    for k, when in enumerate(stops):
        with monkeypatch.context() as m:
            fired = _stop_after(m, when)
            stopped = run_inprocess(*args, *store, "--out", out, *(("--resume",) if k else ()), cwd=tmp_path)
        _assert_stopped(stopped, tmp_path / out, fired, result)
        status, states = _study(tmp_path / "s.db", out)
        assert status == "interrupted" and "RUNNING" not in states, (status, states)
    resumed = run_inprocess(*args, *store, "--out", out, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    status, states = _study(tmp_path / "s.db", out)
    assert status == "done" and "RUNNING" not in states, (status, states)
    assert not (tmp_path / out / ".lock").exists()
    return json.loads((tmp_path / out / result).read_text())


# ---------------------------------------------------------------------------- placement train
GIPH = ("placement", "train", "--episodes-per-update", "2", "--min-tasks", "8", "--max-tasks", "12",
        "--min-devices", "4", "--max-devices", "6", "--imitation-problems", "2", "--teacher-steps", "2",
        "--imitation-epochs", "3", "--distribution", "layered", "--updates", "2", "--seed", "3")  # fmt: skip


def _stage(state: Any) -> str | None:
    history = state.get("history") or [{}]
    return history[-1].get("stage")


def test_placement_train_stopped_in_each_stage_resumes_to_the_uninterrupted_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped during imitation (the earlier bug: --resume refused its own teacher.pt), resumed and stopped during
    REINFORCE, resumed to the end: the same training as an uninterrupted one, bit for bit."""
    whole = run_inprocess(*GIPH, "--storage", "none", "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    ref = json.loads((tmp_path / "whole" / "result.json").read_text())
    stops = [lambda s, st=stage: _stage(s) == st for stage in ("imitation", "reinforce")]
    result = _stop_and_resume(tmp_path, monkeypatch, GIPH, "run", *stops)
    assert (tmp_path / "run" / "teacher.pt").is_file()
    assert result["updates_done"] == ref["updates_done"] == 5
    assert [h["stage"] for h in result["history"]] == ["imitation"] * 3 + ["reinforce"] * 2
    assert result["history"] == ref["history"]


# ---------------------------------------------------------------------------- costmodel train, collect, collect-latency
def test_costmodel_train_stopped_in_each_phase_resumes_to_the_uninterrupted_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = run_inprocess("costmodel", "synth", "layout", "--out", "d", "--graphs", "train=2,valid=1,test=1",
                         "--nodes", "200-300", "--configs", "6", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    args = ("costmodel", "train", "--data", "d", "--mode", "gst+efd", "--segment-size", "150", "--configs-per-graph",
            "6", "--hidden", "8", "--layers", "1", "--epochs", "2", "--finetune-epochs", "2")  # fmt: skip
    whole = run_inprocess(*args, "--storage", "none", "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    ref = json.loads((tmp_path / "whole" / "result.json").read_text())
    stops = [lambda s, p=phase: (s.get("history") or [{}])[-1].get("phase") == p for phase in ("train", "finetune")]
    result = _stop_and_resume(tmp_path, monkeypatch, args, "run", *stops)
    assert [h["loss"] for h in result["history"]] == [h["loss"] for h in ref["history"]]
    assert [h["phase"] for h in result["history"]] == ["train", "train", "finetune", "finetune"]
    assert result["test"] == ref["test"]


def test_costmodel_collect_stopped_between_graphs_resumes_to_the_same_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("costmodel", "collect", "--graphs", "2", "--configs", "4", "--rounds", "3", "--families", "vgg,nas",
            "--threads", "1", "--seed", "2")  # fmt: skip
    when = lambda s: len(s.get("done", ())) == 1  # noqa: E731
    manifest = _stop_and_resume(tmp_path, monkeypatch, args, "real", when, result="collection.json")
    from mlsysopt.costmodel.collection import make_plan

    assert manifest["complete"] and [i["name"] for i in make_plan(2, 2, ["vgg", "nas"], [])] == [
        g["name"] for g in manifest["graphs"]
    ]


def test_costmodel_collect_latency_stopped_in_its_second_pass_resumes_to_a_complete_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("costmodel", "collect-latency", "--models", "2", "--rounds", "2", "--families", "mlp,gru",
            "--max-others", "64", "--seed", "1")  # fmt: skip

    def timed(*rounds: int) -> Callable[[Any], bool]:  # stop when the models were timed so many rounds each
        return lambda state: sorted(len(v) for v in (state.get("rounds") or {}).values()) == list(rounds)

    # the first pass (every model timed once) is replayed: a stop in it resumes the same way
    manifest = _stop_and_resume(tmp_path, monkeypatch, args, "lat", timed(1, 2), result="collection.json")
    assert manifest["complete"] and manifest["models"] == 2 and (tmp_path / "lat" / "latency.npz").is_file()


# ---------------------------------------------------------------------------- nas search, serving tune
def test_nas_search_stopped_after_a_batch_resumes_to_the_uninterrupted_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("nas", "search", "--space", "digits", "--method", "random", "--epochs", "1", "--max-blocks", "1",
            "--budget", "3", "--seed", "1")  # fmt: skip
    whole = run_inprocess(*args, "--storage", "none", "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    ref = json.loads((tmp_path / "whole" / "result.json").read_text())
    cut = _stop_and_resume(tmp_path, monkeypatch, args, "cut", lambda s: True)
    assert 1 <= cut["resumed_from"] < 3 and cut["evaluated"] == 3
    key = ("arch", "perf", "test_perf", "ok")
    assert [[e[k] for k in key] for e in cut["evaluations"]] == [[e[k] for k in key] for e in ref["evaluations"]]


def test_serving_tune_real_stopped_in_each_phase_resumes_and_replays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped in the search (after the noise phase), resumed and stopped in the confirmation, resumed to the end:
    every phase's checkpoint is replayed by the next resume."""
    args = ("serving", "tune", "--engine", "real", "--model", "zoo:cnn", "--instances", "1", "--max-batch", "1,4",
            "--batch-timeout-ms", "0", "--intra", "1", "--inter", "1", "--rate", "1000", "--requests", "20",
            "--budget", "2", "--confirm-top", "2", "--confirm-rounds", "2", "--noise-windows", "2",
            "--seed", "1")  # fmt: skip
    stops = [lambda s, p=phase: bool(s.get(p)) for phase in ("measurements", "confirm")]
    result = _stop_and_resume(tmp_path, monkeypatch, args, "t", *stops)
    assert result["replayed_from_checkpoint"] == 2 and len(result["measurements"]) == 2
    assert result["noise"]["windows"] == 2 and result["verdict"]["decision"]


def test_serving_study_real_stopped_in_its_second_table_resumes_to_the_full_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("serving", "study", "--engine", "real", "--model", "zoo:cnn", "--rate", "100,200", "--instances", "1",
            "--max-batch", "1", "--intra", "1", "--seeds", "1", "--tuners", "random", "--window-s", "0.2")  # fmt: skip

    def rows(rate: str, n: int) -> Callable[[Any], bool]:  # stop when the table of ``rate`` has ``n`` rows
        return lambda state: sum(k.startswith(f"{rate}|") for k in state.get("rows", {})) == n

    # the first rate's table is replayed from the checkpoint: a stop in it resumes the same way
    result = _stop_and_resume(tmp_path, monkeypatch, args, "s", rows("200", 1))
    for rate in ("100.0", "200.0"):
        assert len(result["tables"][rate]["mean_ms"]) == result["space_size"] >= 2


def test_epnas_stopped_in_its_warmup_and_in_its_ranked_rounds_resumes_to_the_uninterrupted_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EPNAS (cold): the controller's order for the first 10 evaluations (warmup), then the predictor's ranking."""
    args = ("nas", "search", "--space", "nasbench-graph:cora", "--method", "epnas_cold", "--budget", "14",
            "--seed", "2")  # fmt: skip
    whole = run_inprocess(*args, "--storage", "none", "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    ref = json.loads((tmp_path / "whole" / "result.json").read_text())
    warmup = lambda s: 1 <= len(s["history"]) < 10  # noqa: E731
    ranked = lambda s: len(s["history"]) > 10  # noqa: E731
    cut = _stop_and_resume(tmp_path, monkeypatch, args, "cut", warmup, ranked)
    assert cut["evaluated"] == ref["evaluated"] == 14
    key = ("arch", "perf", "test_perf", "ok")
    assert [[e[k] for k in key] for e in cut["evaluations"]] == [[e[k] for k in key] for e in ref["evaluations"]]
