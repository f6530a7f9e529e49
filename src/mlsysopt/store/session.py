"""What this process's runs write to: the store URL, what a failed write does, the command, the open runs.

Set once by the CLI (or a Python user) before runs open, read by :class:`~mlsysopt.store.run.RunStore` when one
opens; :func:`current_run` is the innermost open run, the one :func:`~mlsysopt.store.record.record_trial` writes to.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlsysopt.errors import StoreError
from mlsysopt.store.url import StorageSpec, resolve_storage

_explicit: str | None = None  # --storage of the command being run (None: MLSYSOPT_STORAGE or the default)
_on_error: str | None = None  # what a failed store write does: stop or continue (None: MLSYSOPT_STORE_ERRORS, stop)
ON_ERROR_ENV = "MLSYSOPT_STORE_ERRORS"
_command: str | None = None  # the command being run ("nas search"), when the CLI runs one
_open: list[Any] = []  # the open RunStores of this process, innermost last
_lock = threading.Lock()


def use_storage(url: str | None) -> None:
    """Make ``url`` the store of the runs this process opens next (None: ``MLSYSOPT_STORAGE`` or the default).

    Args:
        url: A storage spec (``sqlite:///F.db``, ``postgresql://...``, a path, ``none``), or None for the default.
    """
    global _explicit
    _explicit = url


@contextlib.contextmanager
def storage(url: str | None) -> Iterator[None]:
    """Runs opened inside write to ``url`` (``none``: to no store).

    The previous setting is restored when the ``with`` block ends.

    Args:
        url: A storage spec (``sqlite:///F.db``, ``postgresql://...``, a path, ``none``), or None for the default.
    """
    global _explicit
    before, _explicit = _explicit, url
    try:
        yield
    finally:
        _explicit = before


def on_store_error(policy: str | None) -> None:
    """What a store write that fails after its retries does to the runs opened next: ``stop`` (the default: the
    run ends with that StoreError) or ``continue`` (one warning; the run goes on, its study marked incomplete).
    None: ``$MLSYSOPT_STORE_ERRORS``, else ``stop``."""
    global _on_error
    if policy not in (None, "stop", "continue"):
        raise StoreError(f"store error policy {policy!r}: choose stop or continue")
    _on_error = policy


def store_error_policy() -> str:
    """``stop`` or ``continue`` (see :func:`on_store_error`); a bad ``$MLSYSOPT_STORE_ERRORS`` is one StoreError."""
    if _on_error is not None:
        return _on_error
    value = os.environ.get(ON_ERROR_ENV, "").strip().lower() or "stop"
    if value not in ("stop", "continue"):
        raise StoreError(f"{ON_ERROR_ENV}={value[:40]!r}: choose stop or continue")
    return value


def set_command(command: str | None) -> None:
    """The command the CLI is running (its study's ``command`` attribute and objective direction)."""
    global _command
    _command = command


def current_storage(run_path: str | Path | None = None) -> StorageSpec:
    """The store a run in ``run_path`` would write to now."""
    return resolve_storage(_explicit, run_path)


def current_run() -> Any:
    """The innermost open run of this process (None when none is open).

    Returns:
        The :class:`~mlsysopt.store.run.RunStore` of the most recently opened run that is still open, or None.
    """
    with _lock:
        return _open[-1] if _open else None


def command() -> str | None:
    """The command the CLI is running (:func:`set_command`), or None."""
    return _command


def register(run: Any) -> None:
    """``run`` (a :class:`~mlsysopt.store.run.RunStore`) is open: it becomes the innermost one."""
    with _lock:
        _open.append(run)


def unregister(run: Any) -> None:
    """``run`` is closed (nothing happens if it was not open)."""
    with _lock:
        if run in _open:
            _open.remove(run)
