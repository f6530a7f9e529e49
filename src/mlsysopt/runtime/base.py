"""The executor interface: run many independent evaluations, locally or on a cluster, the same way."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any


class Executor(ABC):
    """Maps a picklable function over independent items; results come back in input order."""

    @abstractmethod
    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, possibly in parallel."""

    def close(self) -> None:  # noqa: B027 (optional hook, not abstract)
        """Release workers (no-op by default)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
