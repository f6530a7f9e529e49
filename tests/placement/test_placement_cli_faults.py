"""``placement train`` under faults, end to end: a dead pool worker, Ctrl-C, the Ray head gone, kill -9; resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from cli_helpers import run_inprocess, terminal_sigint
from mlsysopt.placement import TrainConfig, load_checkpoint, train
from mlsysopt.runtime import LocalRayCluster

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZES = {"stages": "reinforce"} | {
    "episodes_per_update": 2,
    "min_tasks": 8,
    "max_tasks": 12,
    "min_devices": 4,
    "max_devices": 6,
    "seed": 3,
}
ARGS = [a for k, v in SIZES.items() for a in (f"--{k.replace('_', '-')}", str(v))]
DEADLINE_S = 180


def start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``placement train --out run`` with a long run (400 updates), in its own process group; ``env``: more
    environment variables."""
    base = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    cmd = [sys.executable, "-m", "mlsysopt.cli", "placement", "train", *ARGS, "--updates", "400", "--out", "run"]
    return subprocess.Popen([*cmd, *extra], cwd=tmp_path, env={**base, "COLUMNS": "80", **(env or {})}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=terminal_sigint)  # fmt: skip


def wait_for(what: str, ready, proc: subprocess.Popen[str]):
    """Poll ``ready()`` until it returns something truthy; fail if the process ends or the deadline passes."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def pool_workers(pid: int, exclude: set[int] = frozenset()) -> list[psutil.Process]:
    """The run's pool worker processes that are ready: started, and ignoring SIGINT (their initializer ran).

    The workers are forks of multiprocessing's fork server (same command line), which is the run's own child.
    """
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.pid in exclude or child.ppid() == pid or "forkserver" not in " ".join(child.cmdline()):
                continue
            status = Path(f"/proc/{child.pid}/status").read_text()
        except (psutil.Error, OSError):
            continue
        ignored = int(next(ln for ln in status.splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
        if ignored & (1 << (signal.SIGINT - 1)):
            found.append(child)
    return found


def checkpointed_update(ckpt: Path) -> int:
    return int(load_checkpoint(ckpt)["update"]) if ckpt.exists() else -1


def straight(updates: int) -> list[dict]:
    """The history of the same training run in one go, serially, in this process."""
    return train(TrainConfig(**SIZES, updates=updates)).history


def test_a_dead_worker_is_survived_ctrl_c_is_one_line_and_resume_finishes_exactly(tmp_path: Path) -> None:
    proc = start(tmp_path, "--workers", "2")
    ckpt = tmp_path / "run" / "policy.pt"
    try:
        first = wait_for(
            "two ready pool workers", lambda: len(pool_workers(proc.pid)) == 2 and pool_workers(proc.pid), proc
        )
        cpu = {w.pid: sum(w.cpu_times()[:2]) for w in first}
        # a ready worker that uses CPU is running one of the first update's rollouts (the items were queued at once)
        busy = wait_for("a busy worker", lambda: [w for w in first if sum(w.cpu_times()[:2]) > cpu[w.pid]], proc)
        busy[0].kill()
        wait_for("the first update, after the dead worker's rollout ran again", lambda: ckpt.exists(), proc)
        old = {w.pid for w in first}
        wait_for("the replacement pool", lambda: len(pool_workers(proc.pid, old)) == 2, proc)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole group, workers included
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "BrokenProcessPool" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert sum("interrupted" in ln for ln in lines) == 1 and lines[-1].startswith("error: interrupted (Ctrl-C): "), err
    assert "policy.pt holds the finished updates: --resume continues" in lines[-1]
    assert not (tmp_path / "run" / "result.json").exists()

    done = checkpointed_update(ckpt) + 1
    # the resume needs no process of its own: it runs here (the runtime options are never taken from the saved run)
    proc2 = run_inprocess("placement", "train", "--out", "run", "--resume", "--updates", str(done + 1), cwd=tmp_path)
    assert proc2.returncode == 0, proc2.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["resumed_from_update"] == done and result["stopped_by"] == "updates"
    assert result["history"] == straight(done + 1)  # the re-run rollouts and the resume changed nothing


@pytest.mark.xdist_group("ray")
def test_the_ray_head_gone_is_one_error_and_resume_continues_locally_even_after_kill_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = tmp_path / "run" / "policy.pt"
    # the Ray driver gives up on a dead head after 3 s, not mlsysopt's default 15 s (same error, sooner)
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "3")
    with LocalRayCluster(nodes=1) as cluster:

        def kill_after_first_checkpoint() -> None:
            end = time.monotonic() + DEADLINE_S
            while not ckpt.exists() and time.monotonic() < end:
                time.sleep(0.02)
            cluster.kill_head()

        killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
        killer.start()
        # the real command line, in this process (no interpreter start; its Ray driver is a process of its own
        # either way); the head dies after the first checkpoint, and the run stops with one error
        ran = run_inprocess(
            "placement", "train", *ARGS, "--updates", "400", "--out", "run", "--backend", "ray",
            "--address", cluster.address, cwd=tmp_path,
        )  # fmt: skip
        killer.join(timeout=10)
    err = ran.stderr
    assert ran.returncode == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]  # the start line and the progress bar, then the error
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], err
    assert f"the Ray cluster at {cluster.address} is gone" in lines[-1] and "--resume continues" in lines[-1], err
    assert ckpt.exists() and not (tmp_path / "run" / "result.json").exists()

    lost_at = checkpointed_update(ckpt)
    proc = start(tmp_path, "--resume", "--backend", "local")  # the head is gone: go on locally
    try:
        wait_for("an update after the resume", lambda: checkpointed_update(ckpt) > lost_at, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    killed_at = checkpointed_update(ckpt)
    proc = run_inprocess(
        "placement", "train", "--out", "run", "--resume", "--updates", str(killed_at + 2), cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["history"] == straight(killed_at + 2)
