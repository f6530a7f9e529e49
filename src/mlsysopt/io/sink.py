"""What a run folder tells the layer that attached it: the sink protocol (the study store implements it, as
:class:`mlsysopt.store.RunStore`) and the sink of a run that has none. The run folder is :mod:`mlsysopt.io.rundir`;
this module imports nothing of the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class SinkSpec(Protocol):
    """Where a sink writes: whether it is on, and how to name it to a user (credentials masked)."""

    enabled: bool
    display: str


class RunSink(Protocol):
    """What a run folder tells the layer that attached it (the study store's :class:`~mlsysopt.store.RunStore`)."""

    study_name: str | None

    def check(self) -> SinkSpec:
        """Resolve and reach the sink, with no side effect (an error refuses the run before anything exists)."""

    def stored_checkpoint(self) -> tuple[str, bytes, dict[str, Any]] | None:
        """The sink's copy of this folder's latest checkpoint: (file name, bytes, settings), or None."""

    def open(self, resume: bool = False) -> None:
        """The run started (or resumed)."""

    def mirror_checkpoint(self, path: Path) -> None:
        """A checkpoint was written at ``path``."""

    def close(self, status: str, result: dict[str, Any] | None, keep: bool = True) -> None:
        """The run ended with ``status`` (``result``: its result.json; ``keep=False``: forget it)."""


class NoSink:
    """The sink of a run that has none: off, keeps nothing."""

    study_name = None
    enabled = False
    display = "none"

    def check(self) -> SinkSpec:
        return self

    def stored_checkpoint(self) -> None:
        return None

    def open(self, resume: bool = False) -> None:
        pass

    def mirror_checkpoint(self, path: Path) -> None:
        pass

    def close(self, status: str, result: dict[str, Any] | None, keep: bool = True) -> None:
        pass
