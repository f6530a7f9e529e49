"""Evaluating architectures for a search: one at a time without ever raising, and in parallel with one retry.

An evaluation that raises or returns NaN is a failed :class:`Evaluation`. When the executor itself breaks (a worker
process died, a task could not be pickled) the batch's evaluations fail with ``extra["executor_error"]``; the
retry then runs on a fresh pool (:class:`~mlsysopt.runtime.LocalExecutor` drops a broken one), and
:func:`~mlsysopt.nas.search.run_search` stops with a clear error when the executor breaks batch after batch.

An :class:`~mlsysopt.runtime.ExecutorLost` has two causes that need opposite answers: a candidate that kills every
worker it runs on (a segfault, running out of memory) must fail alone while the search goes on, but a lost cluster
(the Ray head is gone) must stop the search with its checkpoint intact. A tiny probe task tells them apart: if the
executor can still run it, the batch's candidates are retried one by one and the one that keeps killing its worker
is recorded as failed; if it cannot, the ExecutorLost goes up to the driver.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.runtime import Executor, ExecutorLost

EXECUTOR_ERROR = "executor_error"  # ``Evaluation.extra`` flag: the executor broke, not the evaluation itself
TIMED_OUT = "timed_out"  # ``Evaluation.extra`` flag: the search's timeout stopped this evaluation in flight


class TrialTimeout(BaseException):
    """The search's time ran out while an evaluation was running (a BaseException: ``except Exception`` in the
    user's code does not swallow it)."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`TrialTimeout` in the block once ``seconds`` have passed (SIGALRM; the main thread only).

    Python code is interrupted at once; a long call into C (one huge matrix product) at its end. Where no alarm
    can be set (another thread, Windows) the block runs unbounded.
    """
    usable = (
        seconds is not None and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise TrialTimeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 1e-3))  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def executor_failed(evals: list[Evaluation]) -> bool:
    """Whether every evaluation of a batch failed because the executor broke (even on the retry)."""
    return bool(evals) and all(ev.extra.get(EXECUTOR_ERROR) for ev in evals)


def evaluate_one(space: SearchSpace, arch: Arch, seed: int = 0, limit_s: float | None = None) -> Evaluation:
    """Evaluate one architecture, turning a crash or a non-finite performance into ``ok=False`` (never raises).

    ``limit_s`` (the search's remaining time) stops the evaluation in flight: it comes back failed and flagged
    :data:`TIMED_OUT`, and the driver drops its batch (a resumed search redoes it).

    Args:
        space: The space that evaluates.
        arch: The architecture.
        seed: Seed of the evaluation (e.g. training).
        limit_s: Seconds the evaluation may take (None: no limit).

    Returns:
        Evaluation: The outcome; ``ok=False`` with ``error`` set on a crash, a timeout or a non-finite performance.
    """
    t0 = time.perf_counter()
    try:
        with time_limit(limit_s):
            ev = space.evaluate(arch, seed)
    except TrialTimeout:
        err = f"stopped by the timeout after {time.perf_counter() - t0:.1f} s"
        return Evaluation(arch, float("nan"), None, {}, time.perf_counter() - t0, False, err, {TIMED_OUT: True})
    except Exception as e:  # an evaluation's crash must not stop the search: it is recorded instead
        try:
            res = dict(space.resources(arch))
        except Exception:
            res = {}
        err = str(e) if getattr(e, "plain", False) else f"{type(e).__name__}: {e}"
        return Evaluation(arch, float("nan"), None, res, time.perf_counter() - t0, ok=False, error=err)
    if ev.perf is None or not math.isfinite(float(ev.perf)):
        ev.perf, ev.ok = float("nan"), False
        ev.error = ev.error or "evaluation returned a non-finite performance"
    return ev


def _evaluate_task(task: tuple[SearchSpace, Arch, int, float | None]) -> Evaluation:
    return evaluate_one(*task)


def probe(x: int) -> int:
    """The executor's health check: returns its input (module-level, so every worker can import it)."""
    return x


def executor_alive(executor: Executor) -> bool:
    """Whether ``executor`` can still run a task (False when it is lost, e.g. its Ray head is gone)."""
    try:
        return executor.map(probe, [1]) == [1]
    except ExecutorLost:
        return False


def evaluate_batch(
    executor: Executor, space: SearchSpace, archs: list[Arch], seed: int, limit_s: float | None = None
) -> list[Evaluation]:
    """Evaluate ``archs`` in parallel; each failure is retried once (the retry is flagged in ``extra``).

    When the executor broke, the retries run one candidate per call, so a candidate that kills its worker
    (a segfault, running out of memory) fails alone instead of taking its batch mates down again. ``limit_s``
    bounds each evaluation (:func:`evaluate_one`); one the timeout stopped is not retried.
    """
    deadline = None if limit_s is None else time.monotonic() + limit_s

    def run(batch: list[Arch]) -> list[Evaluation]:
        left = None if deadline is None else max(deadline - time.monotonic(), 1e-3)
        try:
            return list(executor.map(_evaluate_task, [(space, a, seed, left) for a in batch]))
        except ExecutorLost as e:
            if not executor_alive(executor):
                raise  # the cluster is gone: the driver stops, keeping its checkpoint
            err = f"ExecutorLost: {e}"  # a candidate kills its workers: fail the batch; the retry isolates it
            return [Evaluation(a, float("nan"), None, {}, 0.0, False, err, {EXECUTOR_ERROR: True}) for a in batch]
        except Exception as e:  # the executor itself broke (lost worker, pickling): fail this batch, keep going
            err = f"{type(e).__name__}: {e}"
            return [Evaluation(a, float("nan"), None, {}, 0.0, False, err, {EXECUTOR_ERROR: True}) for a in batch]

    evals = run(archs)
    if any(ev.extra.get(TIMED_OUT) for ev in evals):
        return evals  # out of time: the driver drops this batch
    again = [i for i, ev in enumerate(evals) if not ev.ok]
    if again:
        if executor_failed(evals):  # one crashing candidate took the batch down: retry each alone to isolate it
            retried = [ev for i in again for ev in run([archs[i]])]
        else:
            retried = run([archs[i] for i in again])
        for i, ev in zip(again, retried, strict=True):
            ev.extra = {**ev.extra, "retried": True, "first_error": evals[i].error}
            evals[i] = ev
    return evals
