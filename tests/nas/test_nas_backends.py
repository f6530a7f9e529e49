"""NAS candidates on every backend: serial = local pool = Ray for a fixed round size, and Ray's faults survived.

The CNN space on digits trains for real in every worker (1 epoch, 1 block), so identical results mean identical
training in other processes and on other (local) nodes, not just identical table look-ups.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_inprocess
from mlsysopt.nas import SearchOptions, get_method, get_space, prepare_search, run_search
from mlsysopt.runtime import LocalExecutor, LocalRayCluster, RayExecutor, SerialExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")
#: the tests that use Ray run in the one Ray group (tests/conftest.py); the local-pool one runs beside it
RAY = pytest.mark.xdist_group("ray")

SPACE = {"epochs": 1, "max_blocks": 1}
KNOBS = {"round_size": 2, "warmup": 2}  # a fixed round: the search is the same on any number of workers
BUDGET, SEED = 4, 3
CLI = ("nas", "search", "--space", "digits", "--epochs", "1", "--max-blocks", "1", "--budget", str(BUDGET),
       "--seed", str(SEED), "--knob", "round_size=2", "--knob", "warmup=2")  # fmt: skip


def _key(history: list[Any]) -> list[tuple]:
    return [(ev.arch, ev.perf, ev.test_perf, ev.ok) for ev in history]


def _search(executor: Any, workers: int) -> Any:
    searcher = get_method("epnas", get_space("digits", **SPACE), budget=BUDGET, seed=SEED, **KNOBS)
    return run_search(searcher, executor, workers=workers)


@pytest.fixture(scope="session")
def serial() -> Any:
    """The reference: the same search in this process, one candidate at a time (session-scoped: the suite runs the
    longest tests first, so this module's tests need not run one after another, and it is made once per worker)."""
    return _search(SerialExecutor(), workers=1)


def test_serial_and_local_pool_give_identical_results(serial: Any) -> None:
    with LocalExecutor(2) as pool:
        local = _search(pool, workers=2)
    assert len(serial.history) == BUDGET and serial.failed == 0
    assert _key(local.history) == _key(serial.history)
    assert local.best.arch == serial.best.arch
    assert len({ev.perf for ev in serial.history}) > 1  # real training: the candidates differ


@pytest.fixture(scope="module")
def on_ray(ray_cluster: Any) -> Iterator[RayExecutor]:
    """One Ray executor (driver) for the two searches on the shared cluster: its workers import torch and the NAS
    code once (~2.5 s of CPU each), not once per test; the killed-worker search still loses one and gets a new one."""
    with RayExecutor(ray_cluster.address, 2) as ex:
        yield ex


@RAY
def test_serial_and_ray_give_identical_results(serial: Any, on_ray: RayExecutor) -> None:
    result = _search(on_ray, workers=2)
    assert _key(result.history) == _key(serial.history)
    assert result.best.arch == serial.best.arch


def _kill_first_task(deadline_s: float = 90.0) -> threading.Thread:
    """SIGKILL the first Ray worker process seen running a task (its title is ``ray::apply``), once."""
    import psutil

    killed: list[int] = []

    def watch() -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and not killed:
            for proc in psutil.process_iter(["pid", "cmdline"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if cmd.startswith("ray::apply"):
                    os.kill(proc.info["pid"], signal.SIGKILL)
                    killed.append(proc.info["pid"])
                    break
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.killed = killed  # type: ignore[attr-defined]
    thread.start()
    return thread


@RAY
def test_a_ray_worker_killed_mid_search_is_retried_with_the_same_result(serial: Any, on_ray: RayExecutor) -> None:
    thread = _kill_first_task()
    result = _search(on_ray, workers=2)
    thread.join(timeout=5)
    assert thread.killed, "no Ray task was seen running"  # type: ignore[attr-defined]
    assert _key(result.history) == _key(serial.history) and result.failed == 0
    assert not any(ev.extra.get("retried") for ev in result.history)  # Ray re-ran the task; the driver saw nothing


def _result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


@RAY
def test_the_head_gone_is_one_error_the_checkpoint_kept_and_resume_continues_on_ray_and_locally(
    tmp_path: Path, serial: Any, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill the head after the first checkpoint; resume one copy on another Ray cluster and one on this machine."""
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "3")  # the driver gives up on a dead head sooner
    out = tmp_path / "cut"
    with LocalRayCluster(nodes=1) as cluster:
        ckpt = out / "checkpoint.pt"

        def kill_after_first_checkpoint() -> None:
            end = time.monotonic() + 120
            while not ckpt.exists() and time.monotonic() < end:
                time.sleep(0.05)
            cluster.kill_head()

        killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
        killer.start()
        # the real command line, in this process (the Ray driver is a process of its own either way); the search is
        # finite (budget 4), so it cannot hang without the head
        proc = run_inprocess(*CLI, "--backend", "ray", "--address", cluster.address, "--out", "cut", cwd=tmp_path)
        killer.join(timeout=10)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert f"the Ray cluster at {cluster.address} is gone" in errors[0] and "--resume" in errors[0], errors[0]
    assert ckpt.exists() and not (out / "result.json").exists()
    shutil.copytree(out, tmp_path / "cut_local")
    want = [[ev.arch.to_dict(), ev.perf, ev.test_perf, ev.ok] for ev in serial.history]  # the same search, uncut
    key = ("arch", "perf", "test_perf", "ok")
    options = SearchOptions(space="digits", method="epnas", budget=BUDGET, seed=SEED, space_options=SPACE, knobs=KNOBS)
    for folder, executor, backend, address in (
        ("cut", RayExecutor(ray_cluster.address, 1), "ray", ray_cluster.address),  # on the shared cluster
        ("cut_local", SerialExecutor(), "local", None),  # on this machine
    ):
        options.backend, options.address = backend, address
        with executor:
            job = prepare_search(tmp_path / folder, options, resume=True)
            assert 1 <= job.resumed_from < BUDGET
            job.run(executor)
        got = _result(tmp_path / folder)
        assert got["evaluated"] == BUDGET and got["resumed_from"] == job.resumed_from
        assert [[e[k] for k in key] for e in got["evaluations"]] == want
        assert got["best"]["arch"] == serial.best.arch.to_dict()
