"""Executors: serial and spawned process pools map in input order, recover lost workers, leave Ctrl-C to the parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from workloads import RANKS, allreduce_rank, always_die, die_once, env_value, fail_on_three, square_plus

from cli_helpers import terminal_sigint
from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.runtime import (
    BACKENDS,
    Executor,
    ExecutorLost,
    LocalExecutor,
    SerialExecutor,
    make_executor,
    run_data_parallel,
)


def test_serial_maps_in_order() -> None:
    ex = SerialExecutor()
    assert isinstance(ex, Executor)
    out = ex.map(square_plus, range(6))
    assert [v for v, _ in out] == [x * x + 1 for x in range(6)]
    assert {pid for _, pid in out} == {os.getpid()}  # in this process
    assert ex.map(square_plus, []) == []
    assert ex.map(len, (s for s in ["a", "bb", "ccc"])) == [1, 2, 3]  # any iterable
    with SerialExecutor() as ctx:
        assert ctx.map(abs, [-1, 2, -3]) == [1, 2, 3]


def test_local_pool_maps_in_order_in_other_processes() -> None:
    items = list(range(20, 0, -1))  # descending, so order is not an accident of sorting
    with LocalExecutor(2) as ex:
        assert ex.workers == 2
        out = ex.map(square_plus, items)
        assert [v for v, _ in out] == [x * x + 1 for x in items]
        assert os.getpid() not in {pid for _, pid in out}
        # the pool is reused between calls
        pool = ex._pool
        assert pool is not None
        assert [v for v, _ in ex.map(square_plus, iter([7, 8]))] == [50, 65]
        assert ex._pool is pool
        assert ex.map(square_plus, []) == []
        # a worker's exception reaches the caller, as its own type
        with pytest.raises(InvalidOption, match="three"):
            ex.map(fail_on_three, [1, 2, 3, 4])
        assert [v for v, _ in ex.map(square_plus, [2])] == [5]  # and the executor still works
    assert ex._pool is None  # closed on exit
    ex.close()  # closing twice is harmless


def test_a_pool_started_later_has_the_environment_of_then(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers fork from a server started with the first pool; each pool still sees the caller's environment."""
    monkeypatch.delenv("MLSYSOPT_TEST_ENV", raising=False)
    with LocalExecutor(2) as ex:
        assert ex.map(env_value, ["MLSYSOPT_TEST_ENV"]) == [None]
    monkeypatch.setenv("MLSYSOPT_TEST_ENV", "then")
    with LocalExecutor(2) as ex:
        assert ex.map(env_value, ["MLSYSOPT_TEST_ENV"] * 2) == ["then", "then"]


def test_local_pool_is_lazy() -> None:
    ex = LocalExecutor(3)
    assert ex._pool is None  # nothing spawned until the first map
    ex.close()
    assert ex._pool is None


@pytest.mark.parametrize("workers", [0, -2, 1.5, True])
def test_local_executor_needs_a_worker(workers: object) -> None:
    with pytest.raises(MlsysoptError, match="workers"):
        LocalExecutor(workers)  # type: ignore[arg-type]


def test_a_killed_worker_is_replaced_and_its_item_rerun(tmp_path: Path) -> None:
    items = [(x, str(tmp_path)) for x in range(6)]
    with LocalExecutor(2) as ex:
        assert ex.map(die_once, items) == [x * 10 for x in range(6)]
        assert ex.restarts == 1
        assert (tmp_path / "died-2").exists()


def test_a_worker_that_always_dies_ends_in_one_clear_error() -> None:
    with LocalExecutor(2, max_retries=1) as ex, pytest.raises(ExecutorLost, match="died 2 times"):
        ex.map(always_die, [1])


def _pool_script(tmp_path: Path, seconds: float, on_interrupt: str = "raise") -> subprocess.Popen:
    """Start a script whose LocalExecutor(2) runs ``slow_echo`` items; return once both workers are in an item."""
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from workloads import slow_echo
        from mlsysopt.runtime import LocalExecutor

        if __name__ == "__main__":
            with LocalExecutor(2) as ex:
                try:
                    ex.map(slow_echo, [(x, {str(tmp_path)!r}, {seconds}) for x in range(4)])
                except KeyboardInterrupt:
                    {on_interrupt}
        """
    )
    (tmp_path / "main.py").write_text(script)
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "main.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=terminal_sigint,
    )
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("*-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc


def test_ctrl_c_reaches_only_the_main_process(tmp_path: Path) -> None:
    """A terminal's Ctrl-C signals the whole process group: workers ignore it, so no worker traceback appears."""
    proc = _pool_script(tmp_path, 30.0, on_interrupt='print("interrupted", flush=True)')
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "interrupted"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_workers_exit_when_the_main_process_is_killed(tmp_path: Path) -> None:
    """A SIGKILLed parent (no clean-up runs) leaves no worker busy in its item."""
    proc = _pool_script(tmp_path, 120.0)
    workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("*-*")]
    assert len(workers) == 2
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 20
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in workers if _running(pid)]
    assert alive == [], f"workers still running after their parent was killed: {alive}"


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_data_parallel_ranks_agree_locally() -> None:
    """Two local gloo ranks (the same ranks on Ray: tests/runtime/test_ray_executor.py)."""
    assert run_data_parallel(allreduce_rank, 2, 1.5, backend="local") == RANKS


def test_make_executor_local() -> None:
    assert BACKENDS == ("local", "ray")
    assert type(make_executor()) is SerialExecutor
    assert type(make_executor("local", 1)) is SerialExecutor
    assert type(make_executor("local", 0)) is SerialExecutor
    ex = make_executor("local", 3)
    assert type(ex) is LocalExecutor and ex.workers == 3
    assert ex.describe() == "local (3 workers)"
    ex.close()


@pytest.mark.parametrize("backend", ["mpi", "", "Local", "threads"])
def test_make_executor_unknown_backend(backend: str) -> None:
    with pytest.raises(MlsysoptError, match="unknown backend") as info:
        make_executor(backend, 2)
    assert "local, ray" in str(info.value)


def test_address_is_only_for_ray() -> None:
    with pytest.raises(MlsysoptError, match="--address is for --backend ray"):
        make_executor("local", 2, "127.0.0.1:6379")


def test_ray_missing_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from mlsysopt.runtime.ray_executor import INSTALL_HINT

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(MlsysoptError) as info:
        make_executor("ray", 2)
    assert str(info.value) == INSTALL_HINT
    assert "pip install" in INSTALL_HINT and "ray" in INSTALL_HINT
