"""The run folder every job writes to: validated first, locked while in use, resumable, never half-written.

A job builds a :class:`RunDir`, calls :meth:`RunDir.check` (no side effects), validates all of its inputs, and
only then enters ``with run:``, which creates the folder, takes an exclusive lock, clears temp files a killed run
left behind and records ``settings.json``. Inside, checkpoints and results are written atomically. If the job
fails before it has a checkpoint, everything it created is removed again, so a refused input or a crash in the
first step leaves no folder and no file; once a checkpoint exists it is kept for ``--resume``.

On ``--resume`` the saved settings must equal the current ones except for the names in ``resumable`` (a larger
budget, more epochs, other workers); the error names every setting that differs.

A run may also have a **sink** that a layer above attaches (the study store, :class:`mlsysopt.store.RunStore`,
passed as ``sink=RunStore``; this module imports nothing of it): :meth:`check` resolves and reaches it before
anything exists, every checkpoint is copied into it, so ``--resume`` works from the sink when the folder lost its
checkpoint, and closing records the run's status and headline figure there. ``log.txt`` keeps what the run printed, its
warnings and timings (:mod:`mlsysopt.io.runlog`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from mlsysopt.errors import InvalidRunDir, MlsysoptError, WriteFailed
from mlsysopt.io.files import load_torch, remove_stale_temps, save_torch_atomic, write_atomic
from mlsysopt.io.jsonio import loads_json, read_json, to_jsonable, write_json_atomic
from mlsysopt.io.runlog import RunLog
from mlsysopt.io.sink import NoSink, RunSink
from mlsysopt.text import mask_secrets

SETTINGS = "settings.json"
LOCK = ".lock"
LOG = "log.txt"
_stop_note: str | None = None  # what the last run stopped by Ctrl-C/SIGTERM/SIGHUP kept (see stop_note)


def stop_note(clear: bool = True) -> str | None:
    """What the last run folder closed after a stop (Ctrl-C, SIGTERM, SIGHUP) kept, in words: its checkpoint and
    that ``--resume`` continues it, or that nothing was kept; None when no run was stopped (since the last clear).

    Args:
        clear: Forget it once read.

    Returns:
        The note, or None.
    """
    global _stop_note
    note = _stop_note
    if clear:
        _stop_note = None
    return note


class RunDir:
    """One job's output folder.

    Args:
        path: the folder (``--out``); created on :meth:`open`, never before.
        settings: the job's settings, recorded in ``settings.json`` and compared on resume.
        resume: continue the checkpoint in ``path`` (``--resume``).
        resumable: settings that may differ on resume (e.g. ``("budget", "workers")``).
        checkpoint: checkpoint file name (``.pt``: torch, ``.json``: JSON), or None for a job that never resumes.
        sink: builds the run's sink from (folder, settings) — ``mlsysopt.store.RunStore`` for the study store —;
            None: the run has no sink.
    """

    def __init__(
        self,
        path: str | Path,
        settings: dict[str, Any] | None = None,
        resume: bool = False,
        resumable: tuple[str, ...] = (),
        checkpoint: str | None = "checkpoint.pt",
        sink: Callable[[Path, dict[str, Any]], RunSink] | None = None,
    ) -> None:
        self.path = Path(path)
        self.settings = _masked(to_jsonable(dict(settings or {})))  # no password reaches settings.json or a store
        self.resume = bool(resume)
        self.resumable = tuple(resumable)
        self.checkpoint_name = checkpoint
        if self.resume and checkpoint is None:
            raise MlsysoptError("--resume: this command has no checkpoint to continue")
        self._lock_fd: int | None = None
        self._created_folder = False
        self._before: set[str] = set()
        self.previous_settings: dict[str, Any] | None = None
        self._sink_factory = sink
        self._store: RunSink | None = None
        self._stored: tuple[str, bytes, dict[str, Any]] | None = None  # the store's copy of the checkpoint
        self.log: RunLog | None = None
        self.status = "done"
        self.stopped_after_results = False  # stopped while the sink took the last writes: the folder is complete
        self._opened_at = 0.0

    @property
    def store(self) -> RunSink:
        """The run's sink (the study store's :class:`mlsysopt.store.RunStore` when one was attached)."""
        if self._store is None:
            self._store = NoSink() if self._sink_factory is None else self._sink_factory(self.path, self.settings)
        return self._store

    # ------------------------------------------------------------------------ paths
    def file(self, name: str) -> Path:
        """Path of ``name`` inside the run folder."""
        return self.path / name

    @property
    def checkpoint(self) -> Path:
        """Path of the checkpoint file."""
        if self.checkpoint_name is None:
            raise MlsysoptError(f"{self.path}: this run keeps no checkpoint")
        return self.path / self.checkpoint_name

    @property
    def has_checkpoint(self) -> bool:
        """Whether the folder holds a checkpoint (one saved earlier, or by this run)."""
        return self.checkpoint_name is not None and self.checkpoint.is_file()

    @property
    def can_resume(self) -> bool:
        """Whether there is a checkpoint to continue: in the folder, or (the folder lost it) in the store."""
        return self.has_checkpoint or self._stored is not None

    # ------------------------------------------------------------------------ checks (no side effects)
    def check(self) -> RunDir:
        """Refuse a folder that cannot be used, before anything is created: a file, busy, or a resume mismatch."""
        p = self.path
        if p.is_symlink() and not p.exists():
            raise InvalidRunDir(
                f"--out {p} is a symbolic link to {os.readlink(p)}, which does not exist: create that folder, or "
                "choose another --out"
            )
        if p.exists() and not p.is_dir():
            raise InvalidRunDir(f"--out {p} exists and is not a folder")
        holder = _lock_holder(p / LOCK)
        if holder is not None:
            raise InvalidRunDir(f"--out {p} is in use by {holder}: wait for it to finish, or choose another --out")
        spec = self.store.check()
        if self.checkpoint_name is None:
            return self
        ckpt = self.checkpoint
        if not self.resume:
            if ckpt.exists():
                raise InvalidRunDir(f"{ckpt} exists: pass --resume to continue it, or choose another --out")
            return self
        if ckpt.is_file():
            saved = read_json(p / SETTINGS, InvalidRunDir)
        else:
            if self._stored is None:
                stored = self.store.stored_checkpoint()
                self._stored = stored if stored is not None and stored[0] == self.checkpoint_name else None
            if self._stored is None:
                also = f" nor a copy in the study store {spec.display}" if spec.enabled else ""
                raise InvalidRunDir(f"--resume: no checkpoint at {ckpt}{also} (run without --resume first)")
            saved = self._stored[2]
        self.previous_settings = saved
        diff = [k for k in self.settings if k not in self.resumable and saved.get(k) != self.settings[k]]
        if diff:
            what = ", ".join(f"{k} {saved.get(k)!r} (now {self.settings[k]!r})" for k in diff)
            raise InvalidRunDir(f"--resume: {p} was started with other settings: {what}")
        return self

    # ------------------------------------------------------------------------ open / close
    def open(self) -> RunDir:
        """Create the folder, take the lock, remove stale temp files and record ``settings.json``."""
        self.check()
        try:
            self._created_folder = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WriteFailed(f"cannot create the run folder {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = _lock_holder(self.path / LOCK) or "another process"
            raise InvalidRunDir(
                f"--out {self.path} is in use by {holder}: wait for it to finish, or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{mask_secrets(' '.join(['mlsysopt', *sys.argv[1:3]]))[:200]}\n".encode())
        self._lock_fd = fd
        remove_stale_temps(self.path)
        self._before = {p.name for p in self.path.iterdir()}
        self._opened_at = time.time()

        try:
            write_json_atomic(self.path / SETTINGS, self.settings)
            if self.resume and not self.has_checkpoint and self._stored is not None:
                write_atomic(self.checkpoint, self._stored[1])  # the folder is the source of truth again
            self.log = RunLog(self.path / LOG, resumed=self.resume).start()
            self.store.open(self.resume)
            if self.store.study_name is not None:
                self.log.note(f"study '{self.store.study_name}' in {self.store.check().display}")
        except BaseException as exc:  # a refused store, or a stop while opening: nothing is left behind, no lock
            if isinstance(exc, KeyboardInterrupt):
                self.status = "interrupted"
            self.close(failed=True)
            raise
        return self

    def close(self, failed: bool = False) -> None:
        """Release the lock; after a failure with no checkpoint, remove what this run created.

        Before that the study store gets the run's status (``done``, ``failed``, ``interrupted``) and headline
        figure, and ``log.txt`` its timings; a run removed for want of a checkpoint leaves no study either.
        """
        keep = not failed or self.has_checkpoint
        status = "done" if not failed else ("failed" if self.status == "done" else self.status)
        sink_error: BaseException | None = None
        try:  # the lock is released whatever happens here (a stop landing in the middle included)
            if self._store is not None and self._lock_fd is not None:
                try:
                    self._store.close(status, self._result() if keep else None, keep=keep)
                except MlsysoptError as exc:  # the sink lost this run's writes: the run failed (raised once closed)
                    sink_error, status = exc, "failed"
                    if self.log is not None:
                        self.log.note(f"failed: {mask_secrets(' '.join(str(exc).split()))[:400]}")
                except KeyboardInterrupt as exc:  # stopped while the sink took the last writes: the rest still runs
                    sink_error, status, self.status = exc, "interrupted", "interrupted"
                    self.stopped_after_results = not failed
            if status == "interrupted":
                global _stop_note
                kept = self.checkpoint_name is not None and keep and self.has_checkpoint
                _stop_note = f"{self.checkpoint} holds what was finished: --resume continues" if kept else None
            if self.log is not None:
                self.log.stop(status, keep=keep)
                self.log = None
            if failed and not self.has_checkpoint:
                self._roll_back()
        finally:
            if self._lock_fd is not None:
                with contextlib.suppress(OSError):
                    (self.path / LOCK).unlink(missing_ok=True)
                os.close(self._lock_fd)
                self._lock_fd = None
        if failed and self._created_folder and self.path.is_dir() and not any(self.path.iterdir()):
            self.path.rmdir()
        if sink_error is not None:
            raise sink_error

    def _roll_back(self) -> None:
        if not self.path.is_dir():
            return
        for entry in self.path.iterdir():
            if entry.name in self._before or entry.name == LOCK:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        if SETTINGS not in self._before or self._created_folder:
            (self.path / SETTINGS).unlink(missing_ok=True)

    def __enter__(self) -> RunDir:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.status = "interrupted"
        elif exc_type is not None and self.log is not None:
            self.log.note(f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
        self.close(failed=exc_type is not None)

    def _result(self) -> dict[str, Any] | None:
        """This run's result.json, if it wrote one (for the store's headline figure)."""
        path = self.path / "result.json"
        try:
            if not path.is_file() or ("result.json" in self._before and path.stat().st_mtime < self._opened_at):
                return None  # none, or an older run's result, not this one's
            data = loads_json(path.read_text(), where=str(path))
        except (OSError, MlsysoptError):
            return None
        return data if isinstance(data, dict) else None

    # ------------------------------------------------------------------------ reading and writing
    def write_json(self, name: str, data: Any) -> Path:
        """Write strict JSON ``name`` atomically."""
        return write_json_atomic(self.path / name, data)

    def read_json(self, name: str, error: type[MlsysoptError] = InvalidRunDir) -> Any:
        """Read JSON ``name`` with the guarded reader."""
        return read_json(self.path / name, error)

    def save_checkpoint(self, state: Any) -> Path:
        """Write the checkpoint atomically (torch for ``.pt``, JSON otherwise); the store gets a copy of it."""
        if self.checkpoint.suffix == ".pt":
            path = save_torch_atomic(self.checkpoint, state)
        else:
            path = write_json_atomic(self.checkpoint, state)
        if self._store is not None:
            self._store.mirror_checkpoint(path)
        return path

    def load_checkpoint(self, error: type[MlsysoptError] = InvalidRunDir) -> Any:
        """Read the checkpoint (torch weights-only for ``.pt``, guarded JSON otherwise); the store's copy when the
        folder lost its own on ``--resume``."""
        if not self.checkpoint.is_file() and self._stored is not None:
            return _load_bytes(self._stored[1], self.checkpoint, error)
        if self.checkpoint.suffix == ".pt":
            return load_torch(self.checkpoint, error)
        return read_json(self.checkpoint, error)


def _masked(value: Any) -> Any:
    """``value`` (JSON-ready) with every string's URL passwords masked (:func:`~mlsysopt.text.mask_secrets`)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    return value


def _load_bytes(data: bytes, name: Path, error: type[MlsysoptError]) -> Any:
    """A checkpoint's contents from its bytes (the store's copy), read as safely as the file would be."""

    if name.suffix != ".pt":
        return loads_json(data.decode("utf-8", errors="replace"), error, f"{name} (the study store's copy)")
    with tempfile.TemporaryDirectory(prefix="mlsysopt-ckpt-") as tmp:
        path = Path(tmp) / name.name
        path.write_bytes(data)
        return load_torch(path, error)


def _lock_holder(lock: Path) -> str | None:
    """'process PID (COMMAND)' when another process holds ``lock``, else None."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        text = Path(lock).read_text(errors="replace").splitlines()
        pid = text[0].strip() if text else "?"
        cmd = text[1].strip() if len(text) > 1 else "mlsysopt"
        return f"process {pid} ({cmd})"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
