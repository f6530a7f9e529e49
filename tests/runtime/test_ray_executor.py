"""The Ray executor on a real local 2-node cluster: same answers as the local backends, retries, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from workloads import RANKS, allreduce_rank, fail_on_three, hash_of, slow_echo, square_plus

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.runtime import (
    ExecutorLost,
    LocalExecutor,
    LocalRayCluster,
    RayExecutor,
    SerialExecutor,
    make_executor,
    run_data_parallel,
)

pytestmark = pytest.mark.xdist_group("ray")
HERE = str(Path(__file__).parent)


def test_ray_maps_in_order_on_both_nodes(ray_cluster) -> None:
    items = list(range(30, 0, -1))
    with make_executor("ray", 2, ray_cluster.address) as ex:
        assert isinstance(ex, RayExecutor) and ex.workers == 2 and ex.cluster_cpus == 2
        out = ex.map(square_plus, items)
        assert ex.map(square_plus, []) == []
    assert [v for v, _ in out] == [x * x + 1 for x in items]
    assert os.getpid() not in {pid for _, pid in out}


def test_serial_local_and_ray_give_identical_results(ray_cluster) -> None:
    items = list(range(12))
    answers = []
    for ex in (SerialExecutor(), LocalExecutor(2), RayExecutor(ray_cluster.address, 2)):
        with ex:
            answers.append([v for v, _ in ex.map(square_plus, items)])
    assert answers[0] == answers[1] == answers[2]


def test_a_task_error_reaches_the_caller_as_its_own_type(ray_cluster) -> None:
    with RayExecutor(ray_cluster.address, 2) as ex:
        with pytest.raises(InvalidOption, match="three is not allowed"):
            ex.map(fail_on_three, [1, 2, 3, 4])
        assert ex.map(fail_on_three, [5]) == [5]  # the executor survives it


def _kill_when_running(folder: Path, count: int, act, suffix: str = "") -> threading.Thread:
    """Call ``act`` once ``count`` tasks started (and one of them on the node whose IP ends the marker names)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = list(folder.iterdir())
            if len(started) >= count and any(p.name.endswith(suffix) for p in started):
                break
            time.sleep(0.05)
        act()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_killed_ray_worker_is_retried_with_the_same_result(ray_cluster, tmp_path: Path) -> None:
    items = [(x, str(tmp_path), 1.0) for x in range(6)]

    def kill_one() -> None:
        pid = int(sorted(tmp_path.iterdir())[0].read_text())
        os.kill(pid, signal.SIGKILL)

    # killed as soon as the first task started (it sleeps 1 s): waiting for a second one let the first finish on a
    # loaded box while another task went to an idle worker, and the kill then hit a worker with nothing to retry
    thread = _kill_when_running(tmp_path, 1, kill_one)
    with RayExecutor(ray_cluster.address, 2) as ex:
        assert ex.map(slow_echo, items) == [x * 10 for x in range(6)]
    thread.join()
    assert len(list(tmp_path.iterdir())) > 6  # the killed item ran again


def test_a_removed_node_is_survived_with_the_same_result(ray_cluster, tmp_path: Path) -> None:
    extra = ray_cluster.add_node()  # the shared cluster gets a third node, which then dies like a machine
    items = [(x, str(tmp_path), 1.0) for x in range(9)]
    thread = _kill_when_running(tmp_path, 3, lambda: ray_cluster.remove_node(extra), suffix=f"-{extra.ip}")
    with RayExecutor(ray_cluster.address, 3) as ex:
        assert ex.map(slow_echo, items) == [x * 10 for x in range(9)]
    thread.join()
    assert extra not in ray_cluster.started
    on_removed = [p for p in tmp_path.iterdir() if p.name.endswith(f"-{extra.ip}")]
    assert on_removed and len(list(tmp_path.iterdir())) > 9  # a task ran there, and ran again elsewhere


def test_the_head_gone_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the driver gives up on a dead head after 3 s instead of its default 15 (HEAD_TIMEOUT_S): the same error, sooner
    monkeypatch.setenv("RAY_gcs_rpc_server_reconnect_timeout_s", "3")
    with LocalRayCluster(nodes=1, pythonpath=(HERE,)) as cluster:
        ex = RayExecutor(cluster.address, 1)
        thread = _kill_when_running(tmp_path, 1, cluster.kill_head)
        t0 = time.monotonic()
        with pytest.raises(ExecutorLost, match=f"the Ray cluster at {cluster.address} is gone"):
            ex.map(slow_echo, [(x, str(tmp_path), 2.0) for x in range(4)])
        thread.join()
        assert time.monotonic() - t0 < 60
        with pytest.raises(ExecutorLost, match="closed"):
            ex.map(square_plus, [1])
        ex.close()


@pytest.mark.parametrize("address", ["127.0.0.9:{port}", "not-an-address", "127.0.0.9:99999"])
def test_no_cluster_at_the_address_is_one_clear_error(address: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.9", 0))
        port = s.getsockname()[1]
    address = address.format(port=port)
    with pytest.raises(MlsysoptError, match=f"--address {address}: (no Ray head answers|expected auto)"):
        RayExecutor(address, 1)


def test_a_dead_ray_address_fails_auto_at_once_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--address auto`` with a RAY_ADDRESS where no head answers: one error naming RAY_ADDRESS, in seconds (Ray
    itself tries it for about half a minute)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.9", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.9:{port}")
    t0 = time.monotonic()
    with pytest.raises(MlsysoptError, match=f"--address auto: RAY_ADDRESS=127.0.0.9:{port}: no Ray head answers"):
        RayExecutor("auto", 1)
    assert time.monotonic() - t0 < 10


def test_a_cluster_whose_workers_hash_otherwise_runs_the_job_with_the_drivers_seed(
    ray_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared cluster's workers run with seed 0; a driver whose process has seed 7 gets workers with seed 7
    (saga's tie-breaks then match the command's own), and a driver with seed 0 keeps the cluster's workers."""
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    seven = subprocess.run([sys.executable, "-c", "print(hash('abc'))"], capture_output=True, text=True, check=True)
    with RayExecutor(ray_cluster.address, 2) as ex:
        assert ex.map(hash_of, ["abc", "abc"]) == [("7", int(seven.stdout))] * 2
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    with RayExecutor(ray_cluster.address, 2) as ex:
        assert {seed for seed, _ in ex.map(hash_of, ["abc", "abc"])} == {"0"}


def test_data_parallel_ranks_agree_on_ray_and_locally(ray_cluster) -> None:
    """The same ranks on Ray as locally (the local run: tests/runtime/test_executors.py, beside the Ray group)."""
    assert run_data_parallel(allreduce_rank, 2, 1.5, backend="ray", address=ray_cluster.address) == RANKS


def test_without_an_address_a_private_instance_is_started() -> None:
    """``--backend ray`` alone: a fresh single-machine Ray, never a cluster this machine happens to run."""
    from mlsysopt.runtime.probes import noop

    with RayExecutor(None, 2) as ex:
        assert ex.describe() == "ray (2 workers, private local instance)"
        assert ex.map(noop, [3, 4]) == [3, 4]
        # a task whose module the workers cannot import (tests/ is not on their path): one clear error
        with pytest.raises(MlsysoptError, match="a Ray worker could not run the task .*No module named 'workloads'"):
            ex.map(square_plus, [1])
