"""A stopped run never waits on the store for long and leaves no trial ``running`` (mlsysopt.store.stopping)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import optuna
import pytest

from mlsysopt.io import RunDir
from mlsysopt.store import RunStore, Store, StudyWriter, TrialRecord, parse_storage, record_trial, storage
from mlsysopt.store.stopping import fail_running


def _trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=url).trials


def _locked(db: Path) -> sqlite3.Connection:
    """Another writer holding SQLite's write lock (a long transaction, a hung process)."""
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_writer_closed_with_a_grace_returns_in_time_and_counts_what_it_dropped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db?timeout=30"
    store = Store.open(parse_storage(url))
    sid, name = store.create_study("w", "minimize", {})
    writer = StudyWriter(store, sid)
    writer.add(TrialRecord({"i": 0}, [0.0], key="0"))
    writer.flush()
    holder = _locked(tmp_path / "s.db")
    try:
        for i in range(1, 1201):  # three batches, the first blocked on the lock
            writer.add(TrialRecord({"i": i}, [float(i)], key=str(i)))
        t0 = time.monotonic()
        writer.close(grace=0.5)
        assert time.monotonic() - t0 < 1.5  # not the 30 s of the store's timeout
        assert writer.dropped >= 700  # the batches queued behind the blocked one (the blocked one may still land)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    time.sleep(0.5)
    assert 1 <= len(_trials(url, name)) <= 1201 - 700


def test_fail_running_fails_trials_in_flight_and_frees_their_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    store = Store.open(parse_storage(url))
    sid, name = store.create_study("f", "maximize", {})
    store.write_trials(sid, [TrialRecord({"e": 1}, None, state="running", key="training", intermediate={1: 0.5}),
                             TrialRecord({"e": 2}, [0.7], key="done")], {})  # fmt: skip
    assert fail_running(store, sid, "interrupted") == 1
    stopped, done = _trials(url, name)
    assert stopped.state.name == "FAIL" and stopped.user_attrs["stopped"] == "interrupted"
    assert stopped.user_attrs["key"] == "training@stopped-0" and stopped.intermediate_values == {1: 0.5}
    assert done.state.name == "COMPLETE" and done.user_attrs["key"] == "done"
    # the key is free again: the resumed training writes its trial; a finished key still keeps one copy
    store.write_trials(sid, [TrialRecord({"e": 3}, [0.9], key="training"), TrialRecord({"e": 2}, [0.7], key="done")],
                       {})  # fmt: skip
    assert [t.user_attrs["key"] for t in _trials(url, name)] == ["training@stopped-0", "done", "training"]
    assert fail_running(store, sid, "interrupted") == 0


def test_a_run_stopped_while_the_store_is_locked_exits_in_its_grace_and_releases_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlsysopt.store.stopping as stopping

    monkeypatch.setattr(stopping, "STOP_GRACE_S", 1.0)  # the store's 60 s timeout against a 1 s grace
    url = f"sqlite:///{tmp_path}/s.db"
    run = RunDir(tmp_path / "run", {"command": "nas search"}, checkpoint="checkpoint.json", sink=RunStore)
    holder: sqlite3.Connection | None = None
    with storage(url), pytest.raises(KeyboardInterrupt), run:
        run.save_checkpoint({"done": 1})
        record_trial({"x": 1}, 1.0, key="1")
        record_trial({"x": 2}, None, state="running", key="2", live=True)
        holder = _locked(tmp_path / "s.db")
        t0 = time.monotonic()
        raise KeyboardInterrupt  # Ctrl-C; SIGTERM and SIGHUP raise the same in the CLI
    assert holder is not None
    try:
        assert time.monotonic() - t0 < 2.5
        assert not (tmp_path / "run" / ".lock").exists() and (tmp_path / "run" / "checkpoint.json").is_file()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_stopped_run_marks_its_trials_in_flight_failed_and_its_study_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    run = RunDir(tmp_path / "run", {"command": "nas search"}, checkpoint="checkpoint.json", sink=RunStore)
    with storage(url), pytest.raises(KeyboardInterrupt), run:
        run.save_checkpoint({"done": 1})
        record_trial({"x": 1}, 1.0, key="1")
        record_trial({"x": 2}, None, state="running", key="2", live=True)
        raise KeyboardInterrupt
    store = Store.open(parse_storage(url))
    (sid,) = store.study_ids("mlsysopt.run_dir", str(tmp_path / "run"))
    assert store.study_attrs(sid)["mlsysopt.status"] == "interrupted"
    assert [t.state.name for t in _trials(url, "run")] == ["COMPLETE", "FAIL"]
    # a run killed with its trial running (SIGKILL: no cleanup) has it failed when it is resumed
    store.write_trials(sid, [TrialRecord({"x": 3}, None, state="running", key="3")], {})
    with storage(url), RunDir(tmp_path / "run", {"command": "nas search"}, resume=True,
                              checkpoint="checkpoint.json", sink=RunStore):  # fmt: skip
        pass
    assert [t.state.name for t in _trials(url, "run")] == ["COMPLETE", "FAIL", "FAIL"]
    assert store.study_attrs(sid)["mlsysopt.status"] == "done"


def test_a_stop_while_a_finished_run_writes_its_status_ends_within_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trial is stored and the final status waits on another writer's lock (SQLite's 60 s busy timeout) when
    SIGTERM arrives: the command ends within the stop's grace, and the status lands once the lock frees."""
    import os
    import signal
    import threading

    import mlsysopt.store.run as run_module
    from mlsysopt.cli import stop_signals_as_interrupts

    monkeypatch.setattr(run_module, "STOP_GRACE_S", 1.0)
    url = f"sqlite:///{tmp_path}/s.db"
    holder: list[sqlite3.Connection] = []
    last_writes = run_module.RunStore._last_writes

    def locked_then_stopped(self: RunStore, attrs: dict) -> None:
        holder.append(_locked(tmp_path / "s.db"))  # another writer takes the lock just before the status write
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        last_writes(self, attrs)

    monkeypatch.setattr(run_module.RunStore, "_last_writes", locked_then_stopped)
    run = RunDir(tmp_path / "run", {"command": "nas search"}, checkpoint="checkpoint.json", sink=RunStore)
    t0 = time.monotonic()
    try:
        with stop_signals_as_interrupts(), storage(url), pytest.raises(KeyboardInterrupt), run:
            run.save_checkpoint({"done": 1})
            record_trial({"x": 1}, 1.0, key="1")
        took = time.monotonic() - t0
    finally:
        for h in holder:
            h.execute("ROLLBACK")
            h.close()
    assert took < 10 and not (tmp_path / "run" / ".lock").exists()  # not the 60 s of SQLite's busy timeout
    store = Store.open(parse_storage(url))
    (sid,) = store.study_ids("mlsysopt.run_dir", str(tmp_path / "run"))
    deadline = time.monotonic() + 10
    while store.study_attrs(sid)["mlsysopt.status"] != "done" and time.monotonic() < deadline:
        time.sleep(0.1)  # the status write still waiting lands once the lock frees
    assert store.study_attrs(sid)["mlsysopt.status"] == "done"
    assert [t.state.name for t in _trials(url, "run")] == ["COMPLETE"]
