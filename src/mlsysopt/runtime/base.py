"""The executor interface: run many independent evaluations, locally or on a cluster, the same way.

Every system's parallel work (NAS candidates, GiPH rollouts and seeds, serving studies) is a pure function of its
item, so any executor returns the same results in the same order; only where they are computed differs.
An executor recovers from lost workers by re-running the items they held (``max_retries`` times per item) and
raises :class:`ExecutorLost` when it cannot: the caller keeps its checkpoint and stops with one clear error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from mlsysopt.errors import MlsysoptError

#: Default times an item is re-run after the worker (or node) running it died.
MAX_RETRIES = 2


class ExecutorLost(MlsysoptError):
    """The executor cannot go on: workers keep dying, or the Ray cluster (its head) is gone."""


class Executor(ABC):
    """Maps a picklable function over independent items; results come back in input order.

    Subclasses implement :meth:`map`; use an executor as a context manager so that :meth:`close` runs.

    The base class takes no arguments (see :class:`~mlsysopt.runtime.local.LocalExecutor` and
    :class:`~mlsysopt.runtime.ray_executor.RayExecutor` for theirs).
    """

    #: ``serial``, ``local`` or ``ray``.
    backend: str = "serial"
    #: Items computed at the same time (1 for the serial executor).
    workers: int = 1

    @abstractmethod
    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, possibly in parallel."""

    def describe(self) -> str:
        """One line for progress output, e.g. ``ray (4 workers at 10.0.0.5:6379)``."""
        return self.backend if self.workers <= 1 else f"{self.backend} ({self.workers} workers)"

    def close(self) -> None:  # noqa: B027 (optional hook, not abstract)
        """Release workers (no-op by default)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
