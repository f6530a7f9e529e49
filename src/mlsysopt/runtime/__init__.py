"""Executors for many independent evaluations: serial, a local process pool (default), or Ray.

``make_executor("local", 4)`` is a pool of 4 processes; ``make_executor("ray", 8, "auto")`` runs on the Ray
cluster this machine belongs to, 8 tasks at a time. The same function over the same items gives the same results
on every backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.errors import MlsysoptError
from mlsysopt.lazy import lazy_exports

BACKENDS = ("local", "ray")

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
    """MlsysoptError for an unknown backend, ``--address`` without Ray, or Ray not installed (cheap, no import)."""
    if backend not in BACKENDS:
        raise MlsysoptError(f"unknown backend '{backend}' (choose from: {', '.join(BACKENDS)})")
    if address is not None and backend != "ray":
        raise MlsysoptError("--address is for --backend ray (the local backend runs on this machine)")
    if backend == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            from mlsysopt.runtime.ray_executor import INSTALL_HINT

            raise MlsysoptError(INSTALL_HINT)


def make_executor(backend: str = "local", workers: int = 1, address: str | None = None) -> Executor:
    """An executor for ``--backend local|ray``; ``local`` with one worker runs in this process.

    For ``ray``, ``workers`` bounds the tasks in flight and ``address`` is None (a private local instance with
    ``workers`` CPUs), ``"auto"`` or ``HOST:PORT``.
    """
    check_backend(backend, address)
    if backend == "local":
        from mlsysopt.runtime.local import LocalExecutor, SerialExecutor

        return SerialExecutor() if workers <= 1 else LocalExecutor(workers)
    from mlsysopt.runtime.ray_executor import RayExecutor

    return RayExecutor(address, max(1, workers))


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "BACKENDS", "check_backend", "make_executor"])
