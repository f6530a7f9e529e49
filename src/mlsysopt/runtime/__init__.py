"""Executors for many independent evaluations: serial, a local process pool (default), or Ray.

``make_executor("local", 4)`` is a pool of 4 processes; ``make_executor("ray", 8, "auto")`` runs on the Ray
cluster this machine belongs to, 8 tasks at a time. The same function over the same items gives the same results
on every backend.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import TYPE_CHECKING

from mlsysopt.errors import InvalidOption, MlsysoptError, MlsysoptWarning
from mlsysopt.lazy import lazy_exports
from mlsysopt.limits import memory_budget
from mlsysopt.runtime.local import LocalExecutor, SerialExecutor
from mlsysopt.runtime.ray_executor import INSTALL_HINT, RayExecutor
from mlsysopt.text import plural

BACKENDS = ("local", "ray")
#: Most Ray tasks one command keeps in flight (a cluster may have many more cores than this machine).
MAX_RAY_WORKERS = 10_000

_EXPORTS = {
    "Executor": "mlsysopt.runtime.base",
    "ExecutorLost": "mlsysopt.runtime.base",
    "MAX_RETRIES": "mlsysopt.runtime.base",
    "SerialExecutor": "mlsysopt.runtime.local",
    "LocalExecutor": "mlsysopt.runtime.local",
    "RayExecutor": "mlsysopt.runtime.ray_executor",
    "LocalRayCluster": "mlsysopt.runtime.local_cluster",
    "run_data_parallel": "mlsysopt.runtime.data_parallel",
    "torch_threads": "mlsysopt.runtime.threads",
}

if TYPE_CHECKING:
    from mlsysopt.runtime.base import MAX_RETRIES, Executor, ExecutorLost
    from mlsysopt.runtime.data_parallel import run_data_parallel
    from mlsysopt.runtime.local import LocalExecutor, SerialExecutor
    from mlsysopt.runtime.local_cluster import LocalRayCluster
    from mlsysopt.runtime.ray_executor import RayExecutor
    from mlsysopt.runtime.threads import torch_threads


def check_backend(backend: str, address: str | None = None) -> None:
    """MlsysoptError for an unknown backend, ``--address`` without Ray, or Ray not installed (cheap, no import).

    Args:
        backend: ``local`` or ``ray``.
        address: The Ray cluster (``auto`` or ``HOST:PORT``); only valid with ``ray``.

    Raises:
        MlsysoptError: If ``backend`` is unknown, ``address`` is given for ``local``, or Ray is not installed.
    """
    if backend not in BACKENDS:
        raise MlsysoptError(f"unknown backend '{backend}' (choose from: {', '.join(BACKENDS)})")
    if address is not None and backend != "ray":
        raise MlsysoptError("--address is for --backend ray (the local backend runs on this machine)")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise MlsysoptError(INSTALL_HINT)


def max_workers(backend: str) -> int:
    """The largest ``--workers`` for ``backend``: local processes by memory (~256 MiB each), Ray tasks by count.

    Args:
        backend: ``local`` or ``ray`` (anything but ``local`` gets the Ray limit).

    Returns:
        For ``local``, the larger of the CPU count and the memory budget / 256 MiB; otherwise
        :data:`MAX_RAY_WORKERS`.
    """
    if backend != "local":
        return MAX_RAY_WORKERS
    return max(os.cpu_count() or 1, memory_budget() // (256 * 2**20))


def check_parallel(workers: int, backend: str = "local", address: str | None = None) -> None:
    """Refuse an unusable ``--backend``/``--address`` or too many ``--workers`` (cheap: no Ray import), and warn
    (:class:`~mlsysopt.errors.MlsysoptWarning`) when local workers are more than this machine's cores.

    Args:
        workers: processes (``local``) or Ray tasks in flight (``ray``).
        backend: ``local`` or ``ray``.
        address: the Ray cluster (``auto``, ``HOST:PORT``), only with ``ray``.
    """
    check_backend(backend, address)
    cores = os.cpu_count() or 1
    limit = max_workers(backend)
    if workers > limit:
        where = "local worker processes (each needs ~256 MiB)" if backend == "local" else "Ray tasks in flight"
        raise InvalidOption(f"--workers {workers:,} is above the limit of {limit:,} {where}")
    if backend == "local" and workers > cores:
        msg = f"--workers {workers} is more than this machine's {plural(cores, 'core')}: they will share them"
        warnings.warn(msg, MlsysoptWarning, stacklevel=2)


def check_threads(threads: int, workers: int = 1, backend: str = "local", option: str = "--threads") -> None:
    """Warn when ``threads`` per worker x local ``workers`` is more than this machine's cores (they would share).

    Warns with :class:`~mlsysopt.errors.MlsysoptWarning`; never raises.

    Args:
        threads: Threads each worker uses.
        workers: Worker processes; only counted for the ``local`` backend (Ray workers run elsewhere).
        backend: ``local`` or ``ray``.
        option: The option name the warning quotes.
    """
    cores = os.cpu_count() or 1
    total = threads * (workers if backend == "local" else 1)
    if total > cores:
        each = f" x {workers} workers" if backend == "local" and workers > 1 else ""
        msg = (f"{option} {threads}{each} = {total} threads on this machine's {plural(cores, 'core')}: they will "
               "share them (slower than one thread per core)")  # fmt: skip
        warnings.warn(msg, MlsysoptWarning, stacklevel=2)


def make_executor(backend: str = "local", workers: int = 1, address: str | None = None) -> Executor:
    """An executor for ``--backend local|ray``; ``local`` with one worker runs in this process.

    For ``ray``, ``workers`` bounds the tasks in flight and ``address`` is None (a private local instance with
    ``workers`` CPUs), ``"auto"`` or ``HOST:PORT``.

    Args:
        backend: ``local`` or ``ray``.
        workers: Local processes (<= 1: a :class:`SerialExecutor`), or Ray tasks in flight (at least 1).
        address: The Ray cluster: None, ``"auto"`` or ``HOST:PORT``; only with ``ray``.

    Returns:
        A :class:`SerialExecutor`, :class:`LocalExecutor` or :class:`RayExecutor`; close it (or use it as a
        context manager) when done.

    Raises:
        MlsysoptError: If the backend is unknown, ``address`` is given for ``local``, Ray is not installed, or the
            Ray cluster cannot be reached.
    """
    check_backend(backend, address)
    if backend == "local":
        return SerialExecutor() if workers <= 1 else LocalExecutor(workers)

    return RayExecutor(address, max(1, workers))


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(
    [*_EXPORTS, "BACKENDS", "MAX_RAY_WORKERS", "check_backend", "check_parallel", "check_threads", "make_executor",
     "max_workers"]
)  # fmt: skip
