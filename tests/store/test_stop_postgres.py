"""A stop honoured on PostgreSQL too: SIGTERM while a comparison's trials wait on the server (another session holds a
lock on the trials table) ends the command within 10 s with one line, the folder released and complete; the writes
land within the stop's grace once the lock goes, no trial is left ``running``, the study says ``interrupted``, and
the password of the storage URL is in no stream, file or attribute.

The command runs in this process (no interpreter start) and a watcher thread sends it the real SIGTERM once its
result is written; tests/test_cli_signals.py does the same against SQLite with a command in a process of its own."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cli_helpers import run_inprocess
from mlsysopt.graph.generate import layered_dag

pytestmark = pytest.mark.xdist_group("postgres")  # the session's one PostgreSQL server (tests/conftest.py)
SECRET = "S3cretPW0rd"
DEADLINE_S = 120


def test_sigterm_while_postgresql_takes_the_last_writes_ends_in_seconds(pg_url: str, tmp_path: Path) -> None:
    import optuna
    import psycopg2

    from mlsysopt.store import Store, parse_storage
    from mlsysopt.store.query import list_runs

    url = pg_url.replace("postgresql://mlsysopt@", f"postgresql://mlsysopt:{SECRET}@")  # the server trusts loopback
    layered_dag(10, num_types=2, seed=0).save(tmp_path / "g.npz")
    Store.open(parse_storage(pg_url))  # the store's tables, so that another session can lock one
    holder = psycopg2.connect(pg_url)
    holder.cursor().execute("LOCK TABLE trials IN SHARE MODE")  # another session: the run's trial writes wait on it
    signalled: list[float] = []
    ended = threading.Event()  # the command returned: no signal may reach this process any more

    def stop_while_closing() -> None:  # the real signal, to this process (the command runs in its main thread)
        deadline = time.monotonic() + DEADLINE_S
        while not (tmp_path / "run" / "result.json").exists():
            if ended.wait(0.02) or time.monotonic() > deadline:
                holder.rollback()
                return
        time.sleep(0.3)  # the run is closing now: its writer waits on the lock
        if ended.is_set():
            return
        signalled.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
        holder.rollback()  # the lock goes within the stop's grace: the queued trials and the status land

    watcher = threading.Thread(target=stop_while_closing, daemon=True)
    watcher.start()
    try:
        ran = run_inprocess("placement", "compare", "g.npz", "--methods", "heft", "--seeds", "40", "--devices", "3",
                            "--storage", url, "--out", "run", cwd=tmp_path)  # fmt: skip
        took = time.monotonic() - signalled[0] if signalled else float("inf")
    finally:
        ended.set()
        watcher.join(timeout=DEADLINE_S)
        holder.close()
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    assert ran.returncode == 143 and took < 10, (took, ran.stderr)
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], ran.stderr
    assert "the comparison was complete" in lines[-1] and "Traceback" not in ran.stderr, ran.stderr
    assert (tmp_path / "run" / "result.json").is_file() and not (tmp_path / "run" / ".lock").exists()

    study = optuna.load_study(study_name="run", storage=pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    states = [t.state.name for t in study.trials]
    assert len(states) == 40 and "RUNNING" not in states, states  # every trial landed within the grace
    assert study.user_attrs["mlsysopt.status"] == "interrupted", study.user_attrs
    (summary,) = list_runs(Store.open(parse_storage(pg_url)))
    assert summary.status == "interrupted"
    assert SECRET not in ran.stdout + ran.stderr
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaks and SECRET not in repr(study.user_attrs), leaks
