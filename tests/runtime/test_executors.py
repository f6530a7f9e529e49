"""Executors: serial and spawned process pools map in input order; backend selection and its errors."""

from __future__ import annotations

import importlib.util
import os

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime import BACKENDS, Executor, LocalExecutor, SerialExecutor, make_executor

HAVE_RAY = importlib.util.find_spec("ray") is not None


def square_plus(x: int) -> tuple[int, int]:
    """Module level, so a spawned worker can unpickle it; reports the pid that ran it."""
    return x * x + 1, os.getpid()


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


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
        # a worker's exception reaches the caller
        with pytest.raises(ValueError, match="three"):
            ex.map(fail_on_three, [1, 2, 3, 4])
    assert ex._pool is None  # closed on exit
    ex.close()  # closing twice is harmless


def test_local_pool_is_lazy() -> None:
    ex = LocalExecutor(3)
    assert ex._pool is None  # nothing spawned until the first map
    ex.close()
    assert ex._pool is None


@pytest.mark.parametrize("workers", [0, -2])
def test_local_executor_needs_a_worker(workers: int) -> None:
    with pytest.raises(MlsysoptError, match="workers"):
        LocalExecutor(workers)


def test_make_executor_local() -> None:
    assert BACKENDS == ("local", "ray")
    assert type(make_executor()) is SerialExecutor
    assert type(make_executor("local", 1)) is SerialExecutor
    assert type(make_executor("local", 0)) is SerialExecutor
    ex = make_executor("local", 3)
    assert type(ex) is LocalExecutor and ex.workers == 3
    ex.close()


@pytest.mark.parametrize("backend", ["mpi", "", "Local", "threads"])
def test_make_executor_unknown_backend(backend: str) -> None:
    with pytest.raises(MlsysoptError, match="unknown backend") as info:
        make_executor(backend, 2)
    assert "local, ray" in str(info.value)


def test_make_executor_ray_without_ray_gives_the_install_hint() -> None:
    if HAVE_RAY:
        pytest.skip("ray is installed here")
    from mlsysopt.runtime.ray_executor import INSTALL_HINT

    with pytest.raises(MlsysoptError) as info:
        make_executor("ray", 2)
    assert str(info.value) == INSTALL_HINT
    assert "pip install" in INSTALL_HINT and "ray" in INSTALL_HINT
