"""Many writers at once on a real PostgreSQL server and on SQLite: no trial lost or doubled, a killed writer leaves a
consistent study, and SQLite refuses what it cannot do safely with one clear error."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from mlsysopt.errors import StoreError
from mlsysopt.runtime import LocalExecutor
from mlsysopt.store import Store, StudyHandle, TrialRecord, parse_storage
from mlsysopt.store.writer import machine_id, write_task

pytestmark = pytest.mark.xdist_group("postgres")
WRITERS, PER_WRITER = 8, 12


def _handle(url: str, name: str = "shared") -> StudyHandle:
    spec = parse_storage(url)
    store = Store.open(spec)
    sid, name = store.create_study(name, "minimize", {"mlsysopt.command": "test"})
    return StudyHandle(spec, sid, name, machine_id())


def _items(handle: StudyHandle) -> list[tuple[StudyHandle, list[TrialRecord], int]]:
    return [
        (handle, [TrialRecord({"w": w, "i": i}, [w + i / 100], key=f"{w}:{i}") for i in range(PER_WRITER)], 3)
        for w in range(WRITERS)
    ]


def _check_consistent(url: str, name: str, expect: int | None = None) -> list[optuna.trial.FrozenTrial]:
    """Every trial whole (state, params, value), numbers 0..n-1 without a gap or a double, keys unique."""
    storage = url.replace("postgresql://", "postgresql+psycopg2://")
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert all(t.state.name == "COMPLETE" and set(t.params) == {"w", "i"} and t.value is not None for t in trials)
    keys = [t.user_attrs.get("key", t.number) for t in trials]
    assert len(set(keys)) == len(keys)
    if expect is not None:
        assert len(trials) == expect
    return trials


def test_eight_writers_of_a_local_pool_lose_no_trial_on_postgres(pg_url: str) -> None:
    handle = _handle(pg_url)
    with LocalExecutor(WRITERS) as ex:
        out = ex.map(write_task, _items(handle))
    assert len({pid for _, pid in out}) > 1  # really written from several processes
    assert sorted(n for numbers, _ in out for n in numbers) == list(range(WRITERS * PER_WRITER))
    _check_consistent(pg_url, handle.study_name, WRITERS * PER_WRITER)
    # a writer retried after its worker died writes nothing twice (the keys are already stored)
    assert write_task(_items(handle)[3])[0] == []
    _check_consistent(pg_url, handle.study_name, WRITERS * PER_WRITER)


def test_the_unix_socket_reaches_the_same_server(postgres, pg_url: str) -> None:
    sock = pg_url.replace(f"127.0.0.1:{postgres.port}", "") + f"?host={postgres.folder}&port={postgres.port}"
    handle = _handle(sock, "via-socket")
    handle.write([TrialRecord({"w": 0, "i": 0}, [1.0])])
    _check_consistent(pg_url, "via-socket", 1)


_KILLED_WRITER = """
import sys, time
from mlsysopt.store import Store, StudyHandle, TrialRecord, parse_storage
from mlsysopt.store.writer import machine_id
spec = parse_storage(sys.argv[1])
handle = StudyHandle(spec, int(sys.argv[2]), sys.argv[3], machine_id())
for b in range(100000):
    handle.write([TrialRecord({"w": 0, "i": b * 50 + i}, [float(i)], record={"pad": "x" * 2000}) for i in range(50)])
    print(b, flush=True)
"""


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_a_killed_writer_leaves_the_study_consistent(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if kind == "postgres" else f"sqlite:///{tmp_path}/s.db"
    handle = _handle(url)
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, url, str(handle.study_id), handle.study_name],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        for _ in range(3):  # three batches committed, then kill it in the middle of writing more
            assert proc.stdout is not None and proc.stdout.readline()
        time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    trials = _check_consistent(url, handle.study_name)
    assert len(trials) % 50 == 0 and len(trials) >= 150  # whole batches only: a transaction is all or nothing
    handle.write([TrialRecord({"w": 1, "i": 0}, [0.0])])  # the next writer just goes on numbering
    assert len(_check_consistent(url, handle.study_name)) == len(trials) + 1
    if kind == "sqlite":
        assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sqlite_refuses_a_writer_it_cannot_admit_with_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    """Another process holds SQLite's write lock past the timeout: the writer stops with an error that says what to
    do, writes nothing, and the file stays sound (no half trial, no corruption)."""
    from mlsysopt.store import writer as writer_mod

    monkeypatch.setattr(writer_mod, "RETRY_S", 1.5)  # its retries give up sooner (6 s by default): the same error
    url = f"sqlite:///{tmp_path}/s.db?timeout=0.5"
    handle = _handle(url)
    handle.write([TrialRecord({"w": 0, "i": 0}, [1.0])])
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a writer that holds the lock (a long transaction, a hung process)
    try:
        t0 = time.perf_counter()
        with pytest.raises(StoreError, match=r"stayed locked by other writers for more than 0.5 s.*PostgreSQL"):
            handle.write([TrialRecord({"w": 0, "i": i}, [1.0]) for i in range(1, 10)])
        assert time.perf_counter() - t0 < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _check_consistent(url, handle.study_name, 1)
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sqlite_takes_concurrent_writers_of_one_machine_in_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    handle = _handle(url)
    with LocalExecutor(2) as ex:  # two processes, four writers' trials
        out = ex.map(write_task, _items(handle)[:4])
    assert sorted(n for numbers, _ in out for n in numbers) == list(range(4 * PER_WRITER))
    _check_consistent(url, handle.study_name, 4 * PER_WRITER)


def test_a_sqlite_store_refuses_writers_on_another_machine(tmp_path: Path) -> None:
    handle = _handle(f"sqlite:///{tmp_path}/s.db")
    elsewhere = StudyHandle(handle.spec, handle.study_id, handle.study_name, "another-machine")
    with pytest.raises(StoreError, match="written from the machine that holds it.*PostgreSQL"):
        elsewhere.write([TrialRecord({"w": 0, "i": 0}, [1.0])])
    assert optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path}/s.db").trials == []
