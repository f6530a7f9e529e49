"""What a stopped run leaves in its study: no trial ``running``, and a stop that never waits on the store for long.

A run stopped by Ctrl-C, SIGTERM or SIGHUP (its folder's status ``interrupted``) gives its study at most
:data:`STOP_GRACE_S` seconds: the writer stores what is queued batch by batch while time remains and drops the rest
(the run folder keeps it: its ``--resume`` records it again, the keys keeping one copy of each trial), then the
trials still ``running`` are marked ``FAIL`` (:func:`fail_running`) and the study's status set; a store that does
not answer in time (another writer holding SQLite's lock, a PostgreSQL server gone) is left as it is and the run
exits anyway, its study then listed as ``killed``. A resumed run fails what a killed process left ``running``
first.

A failed trial keeps its record; its key is renamed (``KEY@stopped-N``) so the resumed run writes the trial of
that key again (a training's later epochs) instead of finding a finished one it may not update.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import StoreError
from mlsysopt.store.trials import KEY_ATTR, dumps_attr, utc_now
from mlsysopt.text import mask_secrets

if TYPE_CHECKING:
    from mlsysopt.store.database import Store

ATTR = "mlsysopt."  # the prefix of a run's study attributes (mlsysopt.store.run.ATTR, which imports this module)

#: Seconds a stopped run's store gets (writing what is queued, failing trials in flight, the status); the command
#: exits within about this plus a second, whatever the store does.
STOP_GRACE_S = 5.0
STOPPED_ATTR = "stopped"  # user attribute of a trial failed by a stop: why (interrupted, killed, unfinished)


def fail_running(store: Store, study_id: int, why: str) -> int:
    """Mark every ``running`` trial of the study ``FAIL`` in one transaction; returns how many.

    Each keeps its parameters, steps and record, gains the attribute ``stopped`` (``why``) and has its key renamed
    to ``KEY@stopped-NUMBER``, so that the key is free for the resumed run.

    Args:
        store: The open store.
        study_id: The study.
        why: What stopped them (``interrupted``: a stop; ``killed``: found by a resume; ``unfinished``: the run ended).

    Returns:
        The number of trials marked failed.
    """
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    trials, tua = store.tables["trials"], store.tables["trial_user_attributes"]
    running = sa.cast(trials.c.state, sa.String) == "RUNNING"
    with store.transaction("failing the trials a stop left running") as conn:
        rows = conn.execute(sa.select(trials.c.trial_id, trials.c.number)
                            .where(trials.c.study_id == study_id, running)).all()  # fmt: skip
        if not rows:
            return 0
        ids = [int(r[0]) for r in rows]
        numbers = dict(rows)
        keys = conn.execute(sa.select(tua.c.trial_id, tua.c.value_json)
                            .where(tua.c.trial_id.in_(ids), tua.c.key == KEY_ATTR)).all()  # fmt: skip
        for tid, value in keys:
            renamed = f"{json.loads(value)}@stopped-{numbers[tid]}"
            conn.execute(sa.update(tua).where(tua.c.trial_id == tid, tua.c.key == KEY_ATTR)
                         .values(value_json=dumps_attr(renamed)))  # fmt: skip
        conn.execute(sa.delete(tua).where(tua.c.trial_id.in_(ids), tua.c.key == STOPPED_ATTR))
        conn.execute(sa.insert(tua), [{"trial_id": t, "key": STOPPED_ATTR, "value_json": dumps_attr(why)} for t in ids])
        conn.execute(sa.update(trials).where(trials.c.trial_id.in_(ids))
                     .values(state="FAIL", datetime_complete=utc_now()))  # fmt: skip
    return len(ids)


def within(seconds: float, fn: Any, *args: Any) -> bool:
    """Run ``fn(*args)`` on a daemon thread and wait for it at most ``seconds``; whether it ended in time.

    Its exceptions are dropped (a stopped run's store work is best effort); one still running is abandoned: a
    database call blocked on a lock ends with the process, its transaction rolled back by the database.

    Args:
        seconds: The longest wait.
        fn: What to run.
        *args: Its arguments.

    Returns:
        True when ``fn`` returned (or raised) in time.
    """
    done = threading.Event()

    def body() -> None:
        try:
            fn(*args)
        except BaseException:
            pass
        finally:
            done.set()

    threading.Thread(target=body, name="mlsysopt-store-stop", daemon=True).start()
    deadline = time.monotonic() + max(0.0, seconds)
    while not done.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            done.wait(min(left, 0.1))
        except KeyboardInterrupt:  # another Ctrl-C while the store is given its grace: stop waiting
            return False
    return True


def interruptibly(fn: Any, *args: Any, grace: float = 0.0) -> Any:
    """``fn(*args)`` (a store call that may wait on another writer's lock) on a helper thread, waited for in slices a
    stop interrupts: Ctrl-C, SIGTERM and SIGHUP raise in the main thread at once instead of after the database's
    busy timeout (SQLite's waits inside C code, where no signal handler runs). Outside the main thread: a plain call.

    Args:
        fn: The call.
        *args: Its arguments.
        grace: Seconds the call still gets after a stop before the stop is raised (a second stop ends them).

    Returns:
        What ``fn`` returns (its exception is raised here).
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    out: dict[str, Any] = {}
    done = threading.Event()

    def body() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller
            out["error"] = exc
        finally:
            done.set()

    threading.Thread(target=body, name="mlsysopt-store-call", daemon=True).start()
    try:
        while not done.wait(0.1):  # a signal's handler runs between the waits
            pass
    except KeyboardInterrupt:
        within_grace = time.monotonic() + grace
        with contextlib.suppress(KeyboardInterrupt):
            while not done.wait(0.1) and time.monotonic() < within_grace:
                pass
        raise
    if "error" in out:
        raise out["error"]
    return out.get("value")


def close_stopped(run: Any, keep: bool) -> None:
    """Close the study of a run stopped by Ctrl-C, SIGTERM or SIGHUP in :data:`STOP_GRACE_S` seconds at most: what is
    queued while time remains, the latest checkpoint's copy, trials in flight failed, the status ``interrupted``
    (``keep=False``: the study removed, as its folder is); then the run exits, whatever the store did.

    Args:
        run: The run's :class:`~mlsysopt.store.run.RunStore` (open; not imported here: it imports this module).
        keep: Whether the run keeps its folder (it has a checkpoint).
    """
    deadline = time.monotonic() + STOP_GRACE_S
    within(STOP_GRACE_S, _close_stopped, run, keep, deadline)


def _close_stopped(run: Any, keep: bool, deadline: float) -> None:
    assert run.store is not None
    if run.writer is not None:
        if keep and run.disabled is None and run._unmirrored is not None and run._unmirrored.is_file():
            with contextlib.suppress(StoreError):
                run.mirror_checkpoint(run._unmirrored, force=True)
        run.writer.close(grace=max(0.0, deadline - time.monotonic() - 1.0))  # a second left for the status
    if not keep:
        run._discard()
        return
    if run.study_id is None:
        return
    fail_running(run.store, run.study_id, "interrupted")
    now = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    attrs: dict[str, Any] = {ATTR + "status": "interrupted", ATTR + "finished": now}
    if run.writer is not None and run.writer.dropped:  # the folder has them; --resume records them again
        attrs[ATTR + "unwritten"] = run.writer.dropped
    if run.disabled is not None:
        attrs[ATTR + "incomplete"] = mask_secrets(" ".join(run.disabled.split()))[:400]
    run.store.set_study_attrs(run.study_id, attrs)
