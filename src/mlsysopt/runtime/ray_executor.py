"""Ray executor: the same interface on a Ray cluster (``--backend ray [--address ...]``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import Executor

INSTALL_HINT = "Ray is not installed: install the extra with `pip install -e '.[ray]'` (or `pip install ray`)"


class RayExecutor(Executor):
    """Runs each item as a Ray task; ``address=None`` starts (or joins) a local Ray instance."""

    def __init__(self, address: str | None = None, local_mode: bool = False) -> None:
        try:
            import ray
        except ModuleNotFoundError:
            raise MlsysoptError(INSTALL_HINT) from None
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, local_mode=local_mode, ignore_reinit_error=True, log_to_driver=False)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """Submit one remote task per item and gather the results in order."""
        remote = self._ray.remote(fn)
        return self._ray.get([remote.remote(x) for x in items])
