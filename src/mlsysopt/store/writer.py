"""Writing a study's trials off the search's critical path, and from other processes (a pool, Ray tasks).

:class:`StudyWriter` is the writer of one run: :meth:`~StudyWriter.add` queues a trial and returns at once, a
background thread writes what is queued in batches (one transaction each, see :mod:`mlsysopt.store.trials`), and
:meth:`~StudyWriter.flush` waits until everything queued is stored; otherwise what is queued is written every
:data:`WAKE_S` seconds (one transaction, however many trials), so the store lags the folder by half a second at
most; a killed run's resume records its checkpoint's history again and the keys keep exactly one copy of each trial.

:class:`StudyHandle` is a picklable reference to a study that a worker process writes to directly and
synchronously. A SQLite handle refuses to write from another machine (a Ray node elsewhere): the file is not
shared, and SQLite over a network share is unsafe; a server store (PostgreSQL) takes writers from anywhere.

Every write goes through :func:`retry`: a write that met a lock held by other writers (SQLite past its
``timeout``) is rolled back whole, so it is tried again after a short jittered pause, for up to :data:`RETRY_S`
seconds; one that still fails is a plain :class:`~mlsysopt.errors.StoreError` that
says so, and the run decides what that means (:mod:`mlsysopt.store.run`: it stops, unless told to go on).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import StoreBusy, StoreError
from mlsysopt.io import to_jsonable
from mlsysopt.store.database import Store
from mlsysopt.store.trials import KEY_ATTR, STATES, TrialRecord

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

    from mlsysopt.store.database import Store
    from mlsysopt.store.url import StorageSpec

BATCH = 500  # trials per transaction at most
WAKE_S = 0.5  # the thread writes what was queued at least this often
RETRIES = 100  # tries of a write that meets a lock held by other writers (RETRY_S bounds them first)
RETRY_S = 6.0  # the longest a write keeps trying (short jittered pauses: another writer's turn is milliseconds)


def retry(fn: Any, *args: Any, tries: int = RETRIES) -> Any:
    """``fn(*args)``, tried again after a :class:`~mlsysopt.errors.StoreBusy` (a rolled-back write, safe to redo:
    keyed trials are written once), up to ``tries`` times or :data:`RETRY_S` seconds; the last failure is a plain
    StoreError that says so."""
    pause, t0 = 0.01, time.monotonic()
    for attempt in range(1, tries + 1):
        try:
            return fn(*args)
        except StoreBusy as exc:
            if attempt == tries or time.monotonic() - t0 + pause > RETRY_S:
                raise StoreError(f"{exc} (tried {attempt} times over {time.monotonic() - t0:.1f} s)") from None
        time.sleep(pause * random.uniform(0.5, 1.5))
        pause = min(0.25, pause * 2)
    raise AssertionError("unreachable")


def machine_id() -> str:
    """This machine's boot id (differs between hosts and across reboots), or its host name."""
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return socket.gethostname()


class StudyWriter:
    """Queued, batched writes to one study, by a background thread.

    Args:
        store: the open store.
        study_id: the study written to.
        background: write on a thread (else every :meth:`add` writes at once).
    """

    def __init__(self, store: Store, study_id: int, background: bool = True) -> None:
        self.store, self.study_id, self.background = store, study_id, background
        self.kinds: dict[str, BaseDistribution] = {}
        self.written = 0
        self._queue: list[tuple[str, Any]] = []
        self._busy = False
        self._urgent = False  # a flush (or close) waits: write now
        self._since = 0.0  # when the oldest queued write was queued
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._deadline: float | None = None  # a stop: what is not written by then is dropped (see close)
        self.dropped = 0  # trials not stored when a stop closed the writer (the run folder keeps them)
        self._pending = 0  # trials the thread holds and has not stored yet

    # ------------------------------------------------------------------------ producer side
    def add(self, trial: TrialRecord, live: bool = False) -> None:
        """Queue ``trial`` (``live``: update the running trial of its key instead of adding another)."""
        self._put(("live" if live else "trial", trial))

    def add_checkpoint(self, name: str, data: bytes) -> None:
        """Queue the run's latest checkpoint (a newer one queued before this is written replaces it)."""
        with self._cond:
            self._queue = [op for op in self._queue if op[0] != "checkpoint"]
        self._put(("checkpoint", (name, data)))

    def _put(self, op: tuple[str, Any]) -> None:
        self._raise()
        if not self.background:
            self._apply([op])
            return
        with self._cond:
            if self._closed:
                raise StoreError("the study writer is closed")
            if not self._queue:
                self._since = time.monotonic()
            self._queue.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="mlsysopt-store", daemon=True)
                self._thread.start()
            if len(self._queue) >= BATCH:  # else the thread wakes by itself: no thread switch per trial
                self._cond.notify_all()

    def urge(self) -> None:
        """Have the thread write what is queued now, without waiting for it."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every queued write is stored; raise the first error a write met (once)."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            while self._queue or self._busy:
                self._cond.wait(0.5)
        self._raise()

    def close(self, grace: float | None = None) -> None:
        """Flush, then stop the thread.

        Args:
            grace: a stop's deadline in seconds from now (None: write everything): the thread writes what is queued
                batch by batch while time remains, checking between batches; what is left then is dropped (counted
                in :attr:`dropped`) and this returns, even while a batch still waits on the database.
        """
        if grace is not None:
            self._close_by(time.monotonic() + grace)
            return
        try:
            self.flush()
        except KeyboardInterrupt:  # a stop while flushing: the caller closes again with a grace, not 30 s here
            raise
        except BaseException:
            self._end_thread()
            raise
        self._end_thread()

    def _end_thread(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _close_by(self, deadline: float) -> None:
        with self._cond:
            self._deadline, self._closed, self._urgent = deadline, True, True
            self._cond.notify_all()
            while (self._queue or self._busy) and time.monotonic() < deadline:
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self.dropped += sum(kind == "trial" for kind, _ in self._queue) + (self._pending if self._busy else 0)
            self._queue = []
            self._cond.notify_all()
        self._error = None  # a stopped run's writes are best effort: the folder keeps what the store lost

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    # ------------------------------------------------------------------------ the thread
    def _due(self) -> bool:
        """Whether the queue is to be written now: flushed, closing, full, or its oldest write WAKE_S old."""
        if not self._queue:
            return False
        return self._urgent or self._closed or len(self._queue) >= BATCH or time.monotonic() - self._since >= WAKE_S

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._due():
                    if self._closed and not self._queue:
                        return
                    left = None if not self._queue else max(0.0, WAKE_S - (time.monotonic() - self._since))
                    self._cond.wait(left)
                ops, self._queue, self._busy, self._urgent = self._queue, [], True, False
            try:
                self._apply(ops)
            except BaseException as exc:  # kept for the producer: flush() raises it
                self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _apply(self, ops: list[tuple[str, Any]]) -> None:
        """Write ``ops`` in order: consecutive trials as batches, live updates and checkpoints one by one."""
        batch: list[TrialRecord] = []
        self._pending = sum(kind == "trial" for kind, _ in ops)

        def write_batch() -> None:
            for lo in range(0, len(batch), BATCH):
                if self._past_deadline():  # a stop: the rest is dropped (counted by close; the folder keeps it)
                    break
                chunk = batch[lo : lo + BATCH]
                self.written += len(retry(self.store.write_trials, self.study_id, chunk, self.kinds))
                self._pending -= len(chunk)
            batch.clear()

        for kind, payload in ops:
            if kind == "trial":
                batch.append(payload)
                continue
            write_batch()
            if self._past_deadline():
                continue
            if kind == "live":
                self.written += retry(update_live, self.store, self.study_id, payload, self.kinds)
            else:
                retry(self.store.save_checkpoint, self.study_id, *payload)
        write_batch()


def update_live(store: Store, study_id: int, trial: TrialRecord, kinds: dict[str, BaseDistribution]) -> int:
    """Add ``trial``, or bring the running trial of its key up to date (new steps, then its final state)."""
    from optuna.trial import TrialState  # deferred: Optuna loads only when a trial is written

    if trial.key is None:
        raise StoreError("a live trial needs a key")
    ids = store.trial_ids_by_key(study_id, str(trial.key))
    if not ids:
        return len(store.write_trials(study_id, [trial], kinds))
    tid = ids[-1]
    frozen = store.call(store.storage.get_trial, tid, doing="reading a trial")
    if frozen.state != TrialState.RUNNING:
        return 0
    s = store.storage
    for step, v in sorted(trial.intermediate.items()):
        if int(step) not in frozen.intermediate_values:
            store.call(s.set_trial_intermediate_value, tid, int(step), float(v), doing="reporting a step")
    _, _, attrs = trial.split()
    for k, v in attrs.items():
        if k != KEY_ATTR:
            store.call(s.set_trial_user_attr, tid, k, to_jsonable(v), doing="updating a trial")
    if trial.state != "running":
        store.call(s.set_trial_state_values, tid, TrialState[STATES[trial.state]], trial.values, doing="finishing")
    return 0


@dataclass(frozen=True)
class StudyHandle:
    """A study that workers write to directly (picklable: it carries the URL, never a connection).

    ``machine`` is where the handle was made; a SQLite handle refuses writes from any other machine.
    Get one from :meth:`~mlsysopt.store.RunStore.handle`.

    Args:
        spec: Where the store is.
        study_id: The study's id in the store.
        study_name: The study's name.
        machine: Id of the machine that made the handle.
    """

    spec: StorageSpec
    study_id: int
    study_name: str
    machine: str

    def write(self, trials: list[TrialRecord]) -> list[int]:
        """Write ``trials`` now, in one transaction (from any process); returns their trial numbers."""

        if self.spec.kind == "sqlite" and machine_id() != self.machine:
            raise StoreError(
                f"{self.spec.where()}: a SQLite store is written from the machine that holds it; this writer "
                f"runs on {socket.gethostname()} (pid {os.getpid()}): use PostgreSQL (--storage postgresql://...) for "
                "writers on other machines"
            )
        store = retry(Store.connect, self.spec)
        return retry(store.write_trials, self.study_id, list(trials), {})


def write_task(item: tuple[StudyHandle, list[TrialRecord], int]) -> tuple[list[int], int]:
    """What one worker of a pool or a Ray task does to write its trials: ``batch`` at a time, each batch one
    transaction. Returns (trial numbers written, pid)."""
    handle, trials, batch = item
    numbers: list[int] = []
    for lo in range(0, len(trials), max(1, batch)):
        numbers += handle.write(trials[lo : lo + max(1, batch)])
    return numbers, os.getpid()
