"""The search driver shared by every NAS method: Optuna-like ask/tell searchers, parallel evaluation, resume.

:func:`run_search` asks the searcher for a batch of ``workers`` candidates, evaluates them through a
``mlsysopt.runtime`` executor (the top-level, picklable :func:`evaluate_one`), retries each failure once, tells the
searcher, and atomically checkpoints the history and the searcher's state after every batch. The budget counts
successful evaluations: a failed one is recorded as failed and does not use up the budget (as a retried failure counts
once), unless ``count_failed`` (``--count-failed``); the search stops once as many evaluations have failed as the budget
(so a broken objective cannot run forever). When the executor itself breaks on :data:`PATIENCE` batches in a row
(retries included) the driver stops with an error rather than record every remaining evaluation as failed. In hard-
constraint mode an infeasible candidate (judged on the resources ``space.resources_for`` gives without training) is
never evaluated: it is told back as failed without spending budget, and ``result.best`` is the best *feasible*
evaluation by validation performance. In soft mode ``best`` maximises the MnasNet reward. A limit on a costly
resource that none of many checked candidates meets (:data:`~mlsysopt.nas.candidates.UNREACHABLE_AFTER`) stops
the search at once (``stopped == "unreachable"``) with a message naming the closest value seen.
The checkpoint is a :class:`~mlsysopt.io.RunDir`'s (``checkpoint.pt``) or a ``.pt`` path, written atomically by
:mod:`mlsysopt.io` and read back weights-only (plain data and tensors). It is written after every batch, except that
when batches are much faster than writing it (a long history of table look-ups, where writing after every batch
would cost time quadratic in the budget) it is written once the history grew by 5% or the time since the last write
is ten times what that write took; a resumed search redoes the unsaved batches identically. It also
keeps the best evaluation's index and, for spaces that train, its trained weights (``best``), which is what
``mlsysopt nas export`` writes out.

``timeout`` (seconds of wall clock, per call) stops the search before the next batch once it is spent, like Optuna's
``timeout``: the batch in flight finishes, the checkpoint is written, and a later call continues it. On a space whose
evaluations are your own code (``space.interruptible``: :class:`~mlsysopt.nas.objective.ObjectiveSpace`) the
timeout also stops the trials in flight: their batch is dropped (the checkpoint keeps the state before it, and a
resumed search redoes it). Such a space also fails fast: when its first :data:`FAIL_FAST` evaluations all fail the
search stops with one error (the objective is broken) instead of spending its budget on failures. When the
executor is lost (:class:`~mlsysopt.runtime.ExecutorLost`: the Ray head is gone, or no worker can be started) the
batch in flight is dropped and the driver stops with one error that says how to continue: the last checkpoint
holds everything before that batch, and resuming redoes it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlsysopt.errors import ConstraintUnreachable, InvalidCheckpoint, MlsysoptError
from mlsysopt.io import RunDir, load_torch, save_torch_atomic
from mlsysopt.nas.evaluation import TIMED_OUT, evaluate_batch, executor_failed
from mlsysopt.nas.search_result import STOP_REASONS, SearchResult
from mlsysopt.nas.searcher import Searcher
from mlsysopt.nas.spaces.base import Evaluation
from mlsysopt.runtime import Executor, ExecutorLost, SerialExecutor

CHECKPOINT_VERSION = 2  # 2: EPNAS saves its round in progress (round_size)
PATIENCE = 3  # consecutive empty asks (or broken-executor batches) before the driver stops
CHECKPOINT_SPACING = 10.0  # write a checkpoint once the time since the last one is this many times its write time,
CHECKPOINT_GROWTH = 0.05  # or once the history grew by this fraction since it was written
FAIL_FAST = 3  # on a space that fails fast (your objective), this many failures before any success stop the search


class _Checkpoint:
    """Where a search checkpoints: a RunDir's checkpoint file, or a plain ``.pt`` path."""

    def __init__(self, where: str | Path | RunDir) -> None:
        self.run = where if isinstance(where, RunDir) else None
        self.path = where.checkpoint if isinstance(where, RunDir) else Path(where)

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict[str, Any]:
        data = self.run.load_checkpoint(InvalidCheckpoint) if self.run else load_torch(self.path, InvalidCheckpoint)
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
            raise InvalidCheckpoint(f"{self.path}: not a search checkpoint of version {CHECKPOINT_VERSION}")
        return data

    def save(self, data: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.save_checkpoint(data)
        else:
            save_torch_atomic(self.path, data)


def read_checkpoint(where: str | Path | RunDir) -> dict[str, Any]:
    """A search checkpoint's contents (``history``, ``searcher`` state, counts), checked to be of this version.

    Args:
        where: A run folder (:class:`RunDir`) or the path of a ``.pt`` checkpoint.

    Returns:
        dict[str, Any]: The checkpoint's contents (``history``, ``searcher`` state, counts).

    Raises:
        InvalidCheckpoint: If the file cannot be read or is not a search checkpoint of this version.
    """
    return _Checkpoint(where).load()


def _score(ev: Evaluation, searcher: Searcher[Any]) -> float:
    """What ``best`` maximises: validation performance (hard mode) or the MnasNet reward (soft mode)."""
    if searcher.constraints.hard:
        return ev.perf
    return searcher.constraints.reward(ev.perf, {**searcher.resources(ev.arch), **ev.resources})


class _Best:
    """The best usable evaluation so far (the first of equals), and the trained model of it when the space keeps one.

    Updated with each batch in O(batch) instead of rescanning the history, and saved in the checkpoint as
    ``{"index", "trained"}``.
    """

    def __init__(self, searcher: Searcher[Any], saved: dict[str, Any] | None, history: list[Evaluation]) -> None:
        self.searcher = searcher
        self.index: int | None = None
        self.score = -math.inf
        self.trained: dict[str, Any] | None = None
        if saved is not None and saved.get("index") is not None:
            self.index, self.trained = int(saved["index"]), saved.get("trained")
            self.score = _score(history[self.index], searcher)
        elif history:  # a checkpoint without the record: find it once
            self.update(history, 0)

    def update(self, history: list[Evaluation], start: int) -> None:
        """Look at ``history[start:]``; drop what the others trained (only the best's model is kept)."""
        for i in range(start, len(history)):
            ev = history[i]
            if self.searcher.usable(ev) and _score(ev, self.searcher) > self.score:
                self.index, self.score, self.trained = i, _score(ev, self.searcher), ev.trained
            ev.trained = None

    def best(self, history: list[Evaluation]) -> Evaluation | None:
        """The best evaluation (None: nothing usable yet)."""
        return None if self.index is None else history[self.index]

    def state(self) -> dict[str, Any]:
        """``{"index", "trained"}`` for the checkpoint."""
        return {"index": self.index, "trained": self.trained}


class _Saver:
    """Writes the checkpoint after a batch unless the last write was recent compared with how long it took."""

    def __init__(self, ckpt: _Checkpoint | None, saved: int) -> None:
        self.ckpt, self.saved = ckpt, saved  # saved: evaluations in the checkpoint on disk
        self.cost, self.last, self.dirty = 0.0, time.perf_counter(), False

    def save(self, data: Callable[[], dict[str, Any]], evaluations: int, force: bool = False) -> None:
        """Write ``data()`` now if forced or due (see :data:`CHECKPOINT_SPACING`), else remember it is unsaved."""
        if self.ckpt is None:
            return
        self.dirty = True
        grown = (evaluations - self.saved) >= CHECKPOINT_GROWTH * evaluations
        if not (force or grown or time.perf_counter() - self.last >= CHECKPOINT_SPACING * self.cost):
            return
        t0 = time.perf_counter()
        self.ckpt.save(data())
        self.last = time.perf_counter()
        self.cost, self.saved, self.dirty = self.last - t0, evaluations, False


def _lost(exc: Exception, saver: _Saver) -> ExecutorLost:
    """The one error for a lost executor: what was lost, and what the checkpoint keeps."""
    if saver.ckpt is not None and saver.ckpt.exists():
        kept = (
            f"; the search stopped: {saver.ckpt.path} keeps its first {saver.saved} evaluation(s), "
            "and running the same command with --resume continues it"
        )
    else:
        kept = "; the search stopped before its first checkpoint: run the command again"
    return ExecutorLost(f"{exc}{kept}")


def _message(best: Evaluation | None, history: list[Evaluation], searcher: Searcher[Any]) -> str:
    cons = searcher.constraints
    if best is not None:
        violated = cons.violated({**searcher.resources(best.arch), **best.resources})
        note = f"; violates (soft) {', '.join(violated)}" if violated else ""
        return f"best validation performance {best.perf:.4g} after {len(history)} evaluation(s){note}"
    if not any(ev.ok for ev in history) and history:
        return f"all {len(history)} evaluation(s) failed; last error: {history[-1].error}"
    never = [c.describe() for c in cons.constraints if searcher.met.get(c.name) is False]
    if never:
        return f"no architecture met the constraints: never met {', '.join(never)}"
    if cons.constraints:
        return f"no architecture met all constraints at once ({cons.describe()})"
    return "no architecture was evaluated"


def run_search(
    searcher: Searcher[Any],
    executor: Executor | None = None,
    workers: int = 1,
    checkpoint: str | Path | RunDir | None = None,
    on_eval: Callable[[Evaluation, int], None] | None = None,
    timeout: float | None = None,
    count_failed: bool = False,
) -> SearchResult:
    """Run ``searcher`` to its budget in batches of ``workers``; resume from ``checkpoint`` when it exists.

    Args:
        searcher: the method, e.g. ``get_method("epnas", space, constraints, budget=40)``.
        executor: evaluates each batch (default: in this process).
        workers: candidates asked for and evaluated per batch.
        checkpoint: an open :class:`~mlsysopt.io.RunDir` (its checkpoint file) or a ``.pt`` path; saved after
            batches (see the module docstring), continued when it exists.
        on_eval: called with each evaluation and the number of evaluations so far.
        timeout: wall-clock seconds for this call; no new batch starts once they are spent (None: no limit).
        count_failed: failed evaluations count against the budget (default: only successful ones do).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise MlsysoptError(f"workers must be >= 1, got {workers!r}")
    if timeout is not None and not (isinstance(timeout, int | float) and 0 <= timeout < math.inf):
        raise MlsysoptError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    executor = executor or SerialExecutor()
    space, cons = searcher.space, searcher.constraints
    history: list[Evaluation] = []
    failed = skipped = resumed_from = 0
    wall_before = 0.0
    saved_best: dict[str, Any] | None = None
    ckpt = _Checkpoint(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.exists():
        data = ckpt.load()
        for key, want in (("method", searcher.name), ("space", space.name), ("seed", searcher.seed)):
            if data.get(key) != want:
                raise InvalidCheckpoint(f"{ckpt.path}: checkpoint is for {key} {data.get(key)!r}, not {want!r}")
        history = [Evaluation.from_dict(d) for d in data["history"]]
        resumed_from = len(history)
        failed, skipped, wall_before = data["failed"], data["skipped"], data["wall_s"]
        searcher.load_state_dict(data["searcher"])
        saved_best = data.get("best")
    tracker = _Best(searcher, saved_best, history)
    saver = _Saver(ckpt, resumed_from)
    t0 = time.perf_counter()

    def state() -> dict[str, Any]:
        meta = {"method": searcher.name, "space": space.name, "seed": searcher.seed, "budget": searcher.budget}
        data = {"history": [ev.to_dict() for ev in history], "failed": failed, "skipped": skipped}
        data |= {"wall_s": wall_before + time.perf_counter() - t0, "searcher": searcher.state_dict()}
        return {"version": CHECKPOINT_VERSION, **meta, "constraints": cons.to_dict(), **data, "best": tracker.state()}

    # A space whose evaluations the timeout may stop in flight (your objective): the checkpoint is kept at the
    # state before each batch, so a batch cut by the timeout is dropped whole and a resumed search redoes it.
    interruptible = timeout is not None and bool(getattr(space, "interruptible", False))
    if interruptible and ckpt is not None and not ckpt.exists():
        saver.save(state, len(history), force=True)
    idle = broken = 0
    stopped, unreachable = "budget", ""
    dropped = False

    def spent() -> int:  # evaluations counted against the budget
        return len(history) if count_failed else len(history) - failed

    while spent() < searcher.budget and idle < PATIENCE:
        if not count_failed and failed >= searcher.budget:
            stopped = "failures"
            break
        elapsed = time.perf_counter() - t0
        if timeout is not None and elapsed >= timeout:
            stopped = "timeout"
            break
        if interruptible and saver.dirty:
            saver.save(state, len(history), force=True)
        n = min(workers, searcher.budget - spent())
        try:
            archs = list(searcher.ask(n))[:n]
            for a in archs:
                space.check(a)
            todo = [a for a in archs if not cons.hard or searcher.feasible(a)]
        except ConstraintUnreachable as exc:  # hard mode: no evaluation ran, nothing is lost
            stopped, unreachable = "unreachable", str(exc)
            break
        refused = [a for a in archs if a not in todo]
        idle = 0 if todo else idle + 1
        limit = None if not interruptible else max(timeout - elapsed, 0.0)  # type: ignore[operator]
        try:
            evals = evaluate_batch(executor, space, todo, searcher.seed, limit) if todo else []
        except ExecutorLost as exc:  # the batch is dropped: the checkpoint is from before it was asked for
            raise _lost(exc, saver) from None
        if any(ev.extra.get(TIMED_OUT) for ev in evals):
            stopped, dropped = "timeout", True  # the checkpoint holds the state before this batch
            break
        broken = broken + 1 if executor_failed(evals) else 0
        start = len(history)
        for ev in evals:
            history.append(ev)
            failed += not ev.ok
            if on_eval is not None:
                on_eval(ev, len(history))
        tracker.update(history, start)
        skipped += len(refused)
        infeasible = [
            Evaluation(a, float("nan"), None, searcher.resources(a), 0.0, ok=False, error="infeasible (not evaluated)")
            for a in refused
        ]
        searcher.tell(evals + infeasible)
        saver.save(state, len(history), force=broken >= PATIENCE)
        if getattr(space, "fail_fast", False) and len(history) >= FAIL_FAST and not any(ev.ok for ev in history):
            saver.save(state, len(history), force=True)
            again = (
                "run the same command with --resume (the failed trials stay recorded as failed and do not count "
                "against the budget)"
                if ckpt is not None
                else "run the search again"
            )
            raise MlsysoptError(
                f"the first {len(history)} evaluations all failed, so the search stopped (last: {history[-1].error}); "
                f"fix the objective and {again}"
            )
        if broken >= PATIENCE:
            kept = f"; {ckpt.path} keeps the search so far (run again to resume)" if ckpt is not None else ""
            raise MlsysoptError(
                f"the executor failed on {broken} batches in a row, retries included (last error: {evals[-1].error}); "
                f"stopping instead of recording every remaining evaluation as failed{kept}"
            )
    if idle >= PATIENCE:
        stopped = "exhausted"
    if not dropped and (saver.dirty or (ckpt is not None and not ckpt.exists())):
        saver.save(state, len(history), force=True)
    best = tracker.best(history)
    message = _message(best, history, searcher)
    if stopped == "failures":
        message = f"stopped after {failed} failed evaluation(s), as many as the budget; {message}"
    if stopped == "timeout":
        message = (
            f"stopped by the timeout ({timeout:g} s) after {len(history)} of {searcher.budget} evaluations; {message}"
        )
    if stopped == "unreachable":
        message = f"stopped early: {unreachable}"
    return SearchResult(
        method=searcher.name,
        space=space.name,
        history=history,
        best=best,
        message=message,
        failed=failed,
        wall_s=wall_before + time.perf_counter() - t0,
        skipped=skipped,
        constraints=cons.to_dict(),
        best_decoded=None if best is None else space.decode(best.arch),
        resumed_from=resumed_from,
        stopped=stopped,
    )


__all__ = ["CHECKPOINT_VERSION", "PATIENCE", "STOP_REASONS", "SearchResult", "read_checkpoint", "run_search"]
