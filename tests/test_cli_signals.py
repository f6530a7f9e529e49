"""SIGTERM and SIGHUP stop a command like Ctrl-C: the checkpoint is kept, the lock released, one line, exit 128+N.

These start the real command (a signal needs a process of its own) and signal only its main process, as ``kill``,
systemd, Slurm and Kubernetes do: what it started (pool workers, a user factory's child process) must go with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mlsysopt.graph.generate import layered_dag

DEADLINE_S = 180
# layered DAGs only: the default mixed distribution also builds WfChef workflows and traces DNNs (~5 s more before
# the first checkpoint), which the signal handling never sees
SIZES = ["--episodes-per-update", "2", "--min-tasks", "8", "--max-tasks", "12", "--min-devices", "4",
         "--imitation-problems", "2", "--teacher-steps", "2", "--distribution", "layered",
         "--max-devices", "6", "--seed", "3"]  # fmt: skip


def _start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    return subprocess.Popen([sys.executable, "-m", "mlsysopt.cli", *args], cwd=cwd, env={**env, "COLUMNS": "80"},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def _sigterm_and_wait(proc: subprocess.Popen[str]) -> tuple[float, str]:
    """SIGTERM ``proc``; the seconds until it ended and its stderr."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=DEADLINE_S)
    return time.monotonic() - t0, err


def _reap(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` if a failed check left it running."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _wait_for(what: str, ready, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the command ended (exit {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}


def test_sigterm_keeps_the_checkpoint_releases_the_lock_and_stops_the_workers(tmp_path: Path) -> None:
    # REINFORCE only: its first checkpoint comes after an update the pool workers ran (imitation's, before any did)
    proc = _start(tmp_path, "placement", "train", *SIZES, "--stages", "reinforce", "--updates", "400", "--workers", "2",
                  "--out", "run")  # fmt: skip
    ckpt = tmp_path / "run" / "policy.pt"
    try:
        _wait_for("the first checkpoint", ckpt.exists, proc)
        workers = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        proc.send_signal(signal.SIGTERM)  # the main process only, as `kill PID` does
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], err
    assert lines[-1].startswith("error: stopped by SIGTERM: ") and "--resume continues" in lines[-1], err
    assert ckpt.exists() and not (tmp_path / "run" / ".lock").exists()
    assert not (tmp_path / "run" / "result.json").exists()
    deadline = time.monotonic() + 30
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(workers), "pool workers outlived the command"


def test_sighup_stops_a_factory_and_its_child_process(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import os, pathlib, time\n\ndef model():\n    pathlib.Path('pid').write_text(str(os.getpid()))\n"
        "    time.sleep(120)\n"
    )
    proc = _start(tmp_path, "graph", "info", "./slow.py:model")
    _wait_for("the factory to start", lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text(), proc)
    child = int((tmp_path / "pid").read_text())
    assert child != proc.pid  # the factory runs in a child process
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 129 and lines == ["error: stopped by SIGHUP"], err
    assert not _alive({child})


@pytest.mark.realtime  # its stop must end within seconds of the clock: make test runs it at normal priority
def test_sigterm_while_the_store_takes_the_last_writes_ends_in_seconds(tmp_path: Path) -> None:
    """The store is locked by another writer (60 s SQLite timeout) while a comparison closes: SIGTERM ends it within
    10 s with one line, the folder unlocked and complete, and no trial of the study is left running."""
    import sqlite3

    layered_dag(10, num_types=2, seed=0).save(tmp_path / "g.npz")  # the input, made here (no interpreter start)
    db = tmp_path / "s.db"
    proc = _start(tmp_path, "placement", "compare", "g.npz", "--methods", "heft", "--seeds", "40", "--devices", "3",
                  "--storage", str(db), "--out", "run")  # fmt: skip

    def study_made() -> bool:
        try:
            with sqlite3.connect(db, timeout=0.1) as con:
                return con.execute("SELECT count(*) FROM studies").fetchone()[0] > 0
        except sqlite3.Error:
            return False

    holder: sqlite3.Connection | None = None
    try:
        _wait_for("the run's study", study_made, proc)
        holder = sqlite3.connect(db, isolation_level=None, timeout=10)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock: the run's writes wait on it
        _wait_for("the comparison's result", (tmp_path / "run" / "result.json").exists, proc)
        time.sleep(0.3)  # the run is closing now: its writer waits on the lock
        took, err = _sigterm_and_wait(proc)
    finally:
        _reap(proc)
        if holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 143 and took < 10, (took, err)
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], err
    assert "the comparison was complete" in lines[-1] and "Traceback" not in err
    assert (tmp_path / "run" / "result.json").is_file() and not (tmp_path / "run" / ".lock").exists()
    with sqlite3.connect(db) as con:
        assert not con.execute("SELECT count(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0]


def test_sigterm_while_the_run_waits_for_a_locked_store_ends_in_seconds(tmp_path: Path) -> None:
    """Another writer holds the store's lock before the run starts: the run's study waits for it (SQLite's 60 s
    busy timeout, inside C code where no signal handler runs), yet SIGTERM ends the command within 10 s, with one
    line and nothing left behind (it had no checkpoint)."""
    import sqlite3

    from mlsysopt.store import Store, parse_storage

    layered_dag(10, num_types=2, seed=0).save(tmp_path / "g.npz")  # the input, made here (no interpreter start)
    db = tmp_path / "s.db"
    Store.open(parse_storage(str(db)))  # the store exists, with its tables
    holder = sqlite3.connect(db, isolation_level=None, timeout=10)
    holder.execute("BEGIN IMMEDIATE")
    proc = _start(tmp_path, "placement", "compare", "g.npz", "--methods", "heft", "--seeds", "2", "--devices", "3",
                  "--storage", str(db), "--out", "run")  # fmt: skip
    try:
        _wait_for("the run folder", (tmp_path / "run" / "log.txt").exists, proc)
        time.sleep(1.0)  # the run is opening its study now: it waits on the lock
        took, err = _sigterm_and_wait(proc)
    finally:
        _reap(proc)
        holder.execute("ROLLBACK")
        holder.close()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 143 and took < 10, (took, err)
    assert (
        [ln for ln in lines if ln.startswith("error:")]
        == lines[-1:]
        == ["error: stopped by SIGTERM: nothing was written"]
    ), err
    assert not (tmp_path / "run").exists()
