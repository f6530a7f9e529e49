"""A store that says what it lost: writers contending for SQLite's lock (a tiny ``timeout``) retry their writes;
a write that still fails stops the run with one line naming the store, unless ``MLSYSOPT_STORE_ERRORS=continue``;
either way the run folder, ``runs list`` and the store agree on every run's status and trials."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_inprocess
from mlsysopt.errors import StoreBusy, StoreError
from mlsysopt.io import RunDir
from mlsysopt.store import parse_storage, storage
from mlsysopt.store import writer as writer_mod
from mlsysopt.store.database import Store
from mlsysopt.store.query import list_runs
from mlsysopt.store.record import record_trial
from mlsysopt.store.run import RunStore
from mlsysopt.store.session import current_run, on_store_error

MLSYSOPT = str(Path(sys.executable).parent / "mlsysopt")
WRITERS, SEEDS = 4, 30


def folder_status(run: Path) -> str:
    """The status the run folder's ``log.txt`` ends with (``done``, ``failed``, ...)."""
    last = run.joinpath("log.txt").read_text().strip().splitlines()[-1]
    return last.removeprefix("=== ").split(" ")[0].rstrip(",")


def test_retry_redoes_a_write_that_met_a_lock_and_names_the_tries_when_it_gives_up(monkeypatch) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise StoreBusy("sqlite:///x.db: locked")
        return "ok"

    assert writer_mod.retry(flaky) == "ok" and len(calls) == 3
    monkeypatch.setattr(writer_mod, "RETRY_S", 0.1)
    with pytest.raises(StoreError, match=r"locked \(tried \d+ times over") as err:
        writer_mod.retry(lambda: (_ for _ in ()).throw(StoreBusy("sqlite:///x.db: locked")))
    assert not isinstance(err.value, StoreBusy)  # given up: not retried again by an outer retry


def test_contending_writers_lose_nothing_or_stop_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "MLSYSOPT_STORAGE": "", "COLUMNS": "200"}
    env.pop("MLSYSOPT_STORE_ERRORS", None)
    gen = run_inprocess("graph", "generate", "--out", "g.npz", "--tasks", "10", "--types", "2",
                        "--cluster-out", "c.json", "--devices", "3", "--seed", "1", cwd=tmp_path)  # fmt: skip
    assert gen.returncode == 0, gen.stderr  # the inputs, made here (no interpreter start)
    url = f"sqlite:///{tmp_path / 's.db'}?timeout=0.001"
    procs = [
        subprocess.Popen(
            [
                MLSYSOPT,
                "placement",
                "compare",
                "g.npz",
                "--cluster",
                "c.json",
                "--methods",
                "heft",
                "--seeds",
                str(SEEDS),
                "--out",
                f"r{w}",
                "--storage",
                url,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    outcomes = {}
    for w, proc in enumerate(procs):
        _, err = proc.communicate(timeout=120)
        outcomes[f"r{w}"] = (proc.returncode, [ln for ln in err.splitlines() if ln.startswith("error:")])
    runs = {r.name: r for r in list_runs(Store.open(parse_storage(url)))}
    for name, (code, errors) in outcomes.items():
        folder = tmp_path / name
        if code == 0:  # every trial in the store, and the same status everywhere
            assert errors == []
            assert folder_status(folder) == "done" and runs[name].status == "done"
            assert runs[name].trials == runs[name].complete == SEEDS
            assert json.loads((folder / "result.json").read_text())["results"]["heft"]
        else:  # stopped with one line naming the store; folder and store both say failed (or hold nothing)
            assert len(errors) == 1 and "--storage sqlite:///" in errors[0] and "store" in errors[0], errors
            if folder.is_dir():
                assert folder_status(folder) == "failed"
            if name in runs:
                assert runs[name].status == "failed"
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _run_with_a_held_lock(tmp_path: Path, monkeypatch, swallow: bool = False) -> tuple[RunDir, StoreError | None, str]:
    """A run records 5 trials while another connection holds the SQLite lock past every retry; the lock is let go
    before the run closes. Returns (the run, the error it stopped with, the store URL)."""
    monkeypatch.setattr(writer_mod, "RETRY_S", 0.3)
    url = f"sqlite:///{tmp_path / 's.db'}?timeout=0.01"
    run = RunDir(tmp_path / "run", {"command": "nas search"}, checkpoint="checkpoint.json", sink=RunStore)
    error = None
    with storage(url):
        try:
            with run:
                run.save_checkpoint({"step": 0})
                holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
                holder.execute("BEGIN IMMEDIATE")
                try:
                    for i in range(5):
                        record_trial({"i": i}, float(i), key=i)
                    store = current_run()
                    assert store is not None
                    try:
                        store.flush()
                    except StoreError:
                        if not swallow:  # else: code on the way catches the error and the run goes on
                            raise
                finally:
                    holder.execute("ROLLBACK")
                    holder.close()
                run.write_json("result.json", {"command": "nas search"})
        except StoreError as exc:
            error = exc
    return run, error, url


def test_a_write_that_keeps_failing_stops_the_run_and_both_sides_say_failed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLSYSOPT_STORE_ERRORS", raising=False)
    on_store_error(None)
    run, error, url = _run_with_a_held_lock(tmp_path, monkeypatch)
    assert error is not None
    text = str(error)
    assert "\n" not in text and "stayed locked" in text and "run stopped" in text and "--storage sqlite:///" in text
    assert "MLSYSOPT_STORE_ERRORS=continue" in text
    assert folder_status(run.path) == "failed"
    (summary,) = list_runs(Store.open(parse_storage(url)))
    assert summary.status == "failed" and summary.trials == 0


def test_a_store_error_caught_on_the_way_still_fails_the_run_on_both_sides(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLSYSOPT_STORE_ERRORS", raising=False)
    on_store_error(None)
    run, error, url = _run_with_a_held_lock(tmp_path, monkeypatch, swallow=True)
    assert error is not None and "so the run failed" in str(error) and "--storage sqlite:///" in str(error)
    assert folder_status(run.path) == "failed"
    (summary,) = list_runs(Store.open(parse_storage(url)))
    assert summary.status == "failed"


def test_continue_goes_on_without_the_store_and_marks_the_study_incomplete(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLSYSOPT_STORE_ERRORS", "continue")
    on_store_error(None)
    with pytest.warns(Warning, match="MLSYSOPT_STORE_ERRORS=continue"):
        run, error, url = _run_with_a_held_lock(tmp_path, monkeypatch)
    assert error is None
    assert folder_status(run.path) == "done"
    (summary,) = list_runs(Store.open(parse_storage(url)))
    assert summary.status == "incomplete"


def test_a_bad_policy_is_one_store_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLSYSOPT_STORE_ERRORS", "maybe")
    on_store_error(None)
    with pytest.raises(StoreError, match="MLSYSOPT_STORE_ERRORS='maybe': choose stop or continue"):
        RunStore(tmp_path / "run", {}).check()
