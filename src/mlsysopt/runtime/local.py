"""In-process and process-pool executors (the default backends)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import Executor


class SerialExecutor(Executor):
    """Runs everything in this process, one item after another (workers = 1, and in tests)."""

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]``."""
        return [fn(x) for x in items]


class LocalExecutor(Executor):
    """A pool of worker processes on this machine (spawned, so torch and numba start clean)."""

    def __init__(self, workers: int = 2) -> None:
        if workers < 1:
            raise MlsysoptError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """Results of ``fn`` over ``items`` computed by the pool, in input order."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("spawn"))
        try:
            return list(self._pool.map(fn, items))
        except BrokenProcessPool:  # a worker died: the pool is unusable, so the next call starts a fresh one
            self.close()
            raise

    def close(self) -> None:
        """Shut the pool down."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
