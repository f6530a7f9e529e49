"""Executors for many independent evaluations: serial, a local process pool (default), or Ray."""

from __future__ import annotations

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import Executor
from mlsysopt.runtime.local import LocalExecutor, SerialExecutor

BACKENDS = ("local", "ray")


def make_executor(backend: str = "local", workers: int = 1, address: str | None = None) -> Executor:
    """An executor for ``--backend local|ray``; ``local`` with one worker runs in this process."""
    if backend == "local":
        return SerialExecutor() if workers <= 1 else LocalExecutor(workers)
    if backend == "ray":
        from mlsysopt.runtime.ray_executor import RayExecutor

        return RayExecutor(address)
    raise MlsysoptError(f"unknown backend '{backend}' (choose from: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Executor", "LocalExecutor", "SerialExecutor", "make_executor"]
