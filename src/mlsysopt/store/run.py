"""A run folder's link to the study store: one study per run, its attributes, its trials, its checkpoint copy.

:class:`~mlsysopt.io.RunDir` drives a :class:`RunStore`: ``check`` resolves and probes the store (before any folder
exists: a bad or unreachable ``--storage`` is refused like any other input), ``open`` creates the run's study
(named after the folder, ``NAME-2``... when taken) with the settings as study attributes and status ``running``,
every checkpoint is copied into the store (:meth:`RunStore.mirror_checkpoint`), ``close``
flushes and records the status and the headline figure, or removes the study again when the run failed before its
first checkpoint (the folder is removed then too).

A system's experiment layer records a trial with one call, :func:`~mlsysopt.store.record.record_trial`, which writes
to the study of the innermost open run (nothing happens when no run is open or the store is off).

Every write is retried while other writers hold the lock (:func:`~mlsysopt.store.writer.retry`). A write that still
fails stops the run with one :class:`~mlsysopt.errors.StoreError` naming the store (the folder's log and the study
both say ``failed``), so the run folder, ``runs list`` and the store never disagree silently. Only when told so
(``MLSYSOPT_STORE_ERRORS=continue``, or :func:`on_store_error`) does the run go on without the store after one
warning; the study then says ``incomplete`` (attribute ``mlsysopt.incomplete``: what was lost) once it is done.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import socket
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt import __version__
from mlsysopt.errors import MlsysoptWarning, StoreError
from mlsysopt.store.database import Store, forget
from mlsysopt.store.session import (
    ON_ERROR_ENV,
    command,
    current_storage,
    register,
    store_error_policy,
    unregister,
)
from mlsysopt.store.stopping import STOP_GRACE_S, close_stopped, fail_running, interruptibly
from mlsysopt.store.systems import direction_of, headline, result_trials, system_of
from mlsysopt.store.trials import TrialRecord
from mlsysopt.store.url import StorageSpec
from mlsysopt.store.writer import StudyHandle, StudyWriter, machine_id, retry
from mlsysopt.text import mask_secrets

if TYPE_CHECKING:
    from mlsysopt.store.database import Store

ATTR = "mlsysopt."  # prefix of the run attributes of a study (stopping.ATTR too)
SETTING = "settings."  # prefix of the run's settings
MAX_MIRROR = 64 * 2**20  # checkpoints larger than this are not copied into the store
MIRROR_EVERY_S = 5.0  # the checkpoint is copied into the store at most this often (and when the run closes)


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


class RunStore:
    """The study of one run folder.

    Args:
        path: the run folder.
        settings: the run's settings (recorded as ``settings.KEY`` study attributes).
    """

    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = Path(os.path.abspath(path))
        self.settings = settings
        self.spec: StorageSpec | None = None
        self.store: Store | None = None
        self.study_id: int | None = None
        self.study_name: str | None = None
        self.writer: StudyWriter | None = None
        self.command: str | None = None
        self.existed = False  # whether the store existed when this run was checked
        self.created_study = False
        self.disabled: str | None = None  # why the store stopped taking this run's writes
        self.policy = "stop"  # what a failed write does (store_error_policy(), read by check())
        self.recorded = 0
        self.pid = os.getpid()
        self._mirrored_at = -math.inf  # when the checkpoint was last copied into the store
        self._unmirrored: Path | None = None  # a newer checkpoint not copied yet
        self.finishing = False  # every trial is stored; only the final status is being written

    @property
    def enabled(self) -> bool:
        """Whether this run writes to a store (checked, on, and not stopped by an error)."""
        return self.spec is not None and self.spec.enabled and self.disabled is None

    # ------------------------------------------------------------------------ before the folder exists
    def check(self) -> StorageSpec:
        """Resolve and probe the store (no side effects); a bad or unreachable one is one StoreError."""

        spec = current_storage(self.path)
        self.policy = store_error_policy()
        if spec != self.spec:
            self.existed = Store.probe(spec, must_have_parent=spec.source != "default")
            self.spec = spec
        return spec

    def stored_checkpoint(self) -> tuple[str, bytes, dict[str, Any]] | None:
        """The latest checkpoint the store keeps for this folder: (file name, bytes, settings), or None."""

        spec = self.check()
        if not spec.enabled or not self.existed:
            return None
        store = Store.open(spec)
        for sid in reversed(store.study_ids(ATTR + "run_dir", str(self.path))):
            ck = store.load_checkpoint(sid)
            if ck is not None:
                attrs = store.study_attrs(sid)
                settings = {k[len(SETTING) :]: v for k, v in attrs.items() if k.startswith(SETTING)}
                return ck[0], ck[1], settings
        return None

    # ------------------------------------------------------------------------ open, record, close
    def open(self, resume: bool = False) -> None:
        """Open the store and the run's study (the study waits for its first trial when its direction is unknown)."""
        spec = self.check()
        register(self)
        if not spec.enabled:
            return
        self.command = command() or self.settings.get("command")
        interruptibly(self._open_study, spec, resume)  # a stop is not held up by another writer's lock

    def _open_study(self, spec: StorageSpec, resume: bool) -> None:

        self.store = retry(Store.open, spec)
        if resume:
            for sid in reversed(self.store.study_ids(ATTR + "run_dir", str(self.path))):
                attrs = self.store.study_attrs(sid)
                if self.command is None or attrs.get(ATTR + "command") in (None, self.command):
                    self.study_id, self.study_name = sid, self.store.study_names()[sid]
                    self.command = self.command or attrs.get(ATTR + "command")
                    resumed = int(attrs.get(ATTR + "resumed", 0)) + 1
                    retry(self.store.set_study_attrs, sid, {**self._process_attrs(), ATTR + "resumed": resumed,
                                                            ATTR + "status": "running"})  # fmt: skip
                    retry(fail_running, self.store, sid, "killed")  # what a killed process left running
                    self.writer = StudyWriter(self.store, sid)
                    return
        direction = direction_of(self.command)
        if direction is not None:
            self._create(direction)

    def _process_attrs(self) -> dict[str, Any]:
        return {ATTR + "host": socket.gethostname(), ATTR + "pid": os.getpid(), ATTR + "machine": machine_id()}

    def _create(self, direction: str) -> None:
        assert self.store is not None

        attrs: dict[str, Any] = {
            ATTR + "run_dir": str(self.path),
            ATTR + "run": self.path.name,
            ATTR + "command": self.command,
            ATTR + "system": system_of(self.command),
            ATTR + "status": "running",
            ATTR + "started": _now(),
            ATTR + "version": __version__,
            ATTR + "direction": direction,
            **self._process_attrs(),
            **{SETTING + str(k): v for k, v in self.settings.items()},
        }
        self.study_id, self.study_name = interruptibly(retry, self.store.create_study, self.path.name or "run",
                                                       direction, attrs)  # fmt: skip
        self.created_study = True
        self.writer = StudyWriter(self.store, self.study_id)

    def _guard(self, what: str, fn: Any, *args: Any) -> bool:
        """Run ``fn`` (its writes retried already); a store error that remains stops the store for this run and,
        by default, the run too (one StoreError); under policy ``continue``, one warning and the run goes on."""
        try:
            fn(*args)
            return True
        except StoreError as exc:
            self.disabled = str(exc)
            if self.policy == "continue":
                warnings.warn(
                    f"the study store stopped taking this run's {what}: {exc}; the run goes on "
                    f"({ON_ERROR_ENV}=continue), its folder keeps everything and its study is marked incomplete",
                    MlsysoptWarning,
                    stacklevel=3,
                )
                return False
            raise StoreError(
                f"the study store failed to take this run's {what}, so the run stopped: {exc} (to go on without "
                f"the store instead, set {ON_ERROR_ENV}=continue)"
            ) from None

    def record(self, trial: TrialRecord, direction: str | None = None, live: bool = False) -> bool:
        """Queue ``trial`` for the run's study (created now when it waited for its direction)."""
        if not self.enabled:
            return False
        if os.getpid() != self.pid:  # a forked worker: write directly, now
            if self.study_id is None:
                return False
            return self._guard("trials", self.handle().write, [trial])

        def add() -> None:
            if self.study_id is None:
                self._create(direction or "minimize")
            assert self.writer is not None
            self.writer.add(trial, live)

        ok = self._guard("trials", add)
        self.recorded += ok
        return ok

    def handle(self) -> StudyHandle:
        """A picklable handle on the run's study for worker processes."""
        if self.spec is None or self.study_id is None or self.study_name is None:
            raise StoreError("the run has no study yet")
        return StudyHandle(self.spec, self.study_id, self.study_name, machine_id())

    def set_objective(self, direction: str, name: str | None = None) -> bool:
        """The study's objective direction and name (Optuna's metric name); created now when it waited for it."""
        if not self.enabled or os.getpid() != self.pid:
            return False

        def put() -> None:
            if self.study_id is None:
                self._create(direction)
            assert self.store is not None and self.study_id is not None
            retry(self.store.set_objective, self.study_id, direction, name)
            retry(self.store.set_study_attrs, self.study_id, {ATTR + "direction": direction})

        return self._guard("objective", put)

    def flush(self) -> None:
        """Wait until every trial recorded so far is stored."""
        if self.enabled and self.writer is not None:
            self._guard("trials", self.writer.flush)

    def urge(self) -> None:
        """Start writing what is queued (called at each checkpoint; nobody waits for it)."""
        if self.enabled and self.writer is not None:
            self.writer.urge()

    def mirror_checkpoint(self, path: Path, force: bool = False) -> None:
        """Keep a copy of the run's checkpoint file in the store (for ``--resume`` without the folder's copy).

        At most one copy every :data:`MIRROR_EVERY_S` seconds (a search may checkpoint every batch), and the last
        one when the run closes; a store copy is therefore at most that old, and a run resumed from it redoes the
        steps after it (their trials' keys make the rewrite exact).
        """
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._mirrored_at < MIRROR_EVERY_S:
            self._unmirrored = path
            return
        self._unmirrored, self._mirrored_at = None, now
        try:
            data = path.read_bytes()
        except OSError:
            return
        if len(data) > MAX_MIRROR:
            return
        if self.study_id is None:
            self._guard("checkpoint", self._create, direction_of(self.command) or "minimize")
        if self.writer is not None:
            self._guard("checkpoint", self.writer.add_checkpoint, path.name, data)

    def close(self, status: str, result: dict[str, Any] | None, keep: bool = True) -> None:
        """Flush, then record ``status`` and the headline (``keep=False``: remove the study this run created).

        A store write that fails here (after its retries) marks the study ``failed`` if it still can and, for a run
        that ended ``done`` under policy ``stop``, raises that one StoreError (the run folder says ``failed`` too);
        a run that failed already keeps its own error.
        """
        unregister(self)
        if self.spec is None or not self.spec.enabled or self.store is None:
            return
        if status == "interrupted":
            close_stopped(self, keep)
            return
        try:
            self._close(status, result, keep)
        except KeyboardInterrupt:  # stopped while the store took the last writes: it gets the stop's grace, no more
            if not self.finishing:  # (else the status and its trials are stored, or left to the grace they had)
                close_stopped(self, keep)
            raise

    def _close(self, status: str, result: dict[str, Any] | None, keep: bool) -> None:
        assert self.store is not None
        if self.disabled is not None:  # the store stopped taking this run's writes: say so in the study
            if not keep:
                self._discard()
            self._mark_lost(status)
            if status == "done" and self.policy == "stop":  # the error was caught on the way: the run failed
                raise StoreError(f"the study store failed to take some of this run's writes, so the run failed: "
                                 f"{self.disabled}")  # fmt: skip
            return
        if not keep:
            self._discard()
            return
        try:
            self._finish(status, result)
        except StoreError:
            self._mark_lost(status)
            if status == "done" and self.policy == "stop":
                raise
            return
        self._mark_lost(status)  # only when a write failed under policy continue

    def _finish(self, status: str, result: dict[str, Any] | None) -> None:
        assert self.store is not None
        command = self.command or (result or {}).get("command")
        if self.study_id is None:
            self.command = command
            if not self._guard("study", self._create, direction_of(command) or "minimize"):
                return
        assert self.writer is not None and self.study_id is not None
        if self._unmirrored is not None and self._unmirrored.is_file():
            self.mirror_checkpoint(self._unmirrored, force=True)
        if result is not None and self.recorded == 0:
            for trial in result_trials(command, result):
                if not self._guard("trials", self.writer.add, trial):
                    return
        if not self._guard("trials", self.writer.close):
            return
        attrs: dict[str, Any] = {ATTR + "status": status, ATTR + "finished": _now()}
        if command and not self.command:
            attrs |= {ATTR + "command": command, ATTR + "system": system_of(command)}
        if result is not None:
            attrs[ATTR + "headline"] = headline(command, result)
        self.finishing = True  # every trial is stored: a stop now gives these last writes the grace (close_stopped)
        self._guard("status", lambda: interruptibly(self._last_writes, attrs, grace=STOP_GRACE_S))

    def _last_writes(self, attrs: dict[str, Any]) -> None:
        assert self.store is not None and self.study_id is not None
        retry(fail_running, self.store, self.study_id, "unfinished")  # no trial is left running
        retry(self.store.set_study_attrs, self.study_id, attrs)

    def _mark_lost(self, status: str) -> None:
        """Best effort, after the store lost some of this run's writes: the study says ``failed`` (policy ``stop``)
        or the run's own status (``done`` under policy ``continue``: shown ``incomplete``), and, in
        ``mlsysopt.incomplete``, why."""
        if self.store is None or self.study_id is None or self.disabled is None:
            return
        if self.writer is not None:
            with contextlib.suppress(StoreError):
                self.writer.close()
        stopped = self.policy == "stop" and status == "done"  # the run fails for it (an interrupted run stays so)
        attrs = {ATTR + "status": "failed" if stopped else status, ATTR + "finished": _now(),
                 ATTR + "incomplete": mask_secrets(" ".join(self.disabled.split()))[:400]}  # fmt: skip
        with contextlib.suppress(StoreError):
            retry(self.store.set_study_attrs, self.study_id, attrs)

    def _discard(self) -> None:
        """Remove what this run put in the store (a run that failed before its first checkpoint leaves nothing)."""
        assert self.store is not None
        with contextlib.suppress(StoreError):
            if self.writer is not None:
                self.writer.close()
        if self.created_study and self.study_id is not None:
            with contextlib.suppress(StoreError):
                retry(self.store.delete_study, self.study_id)
                self.study_id = None
        spec = self.store.spec
        if spec.kind == "sqlite" and not self.existed:
            with contextlib.suppress(StoreError):
                if not self.store.study_names():
                    forget(spec)
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{spec.path}{suffix}").unlink(missing_ok=True)
