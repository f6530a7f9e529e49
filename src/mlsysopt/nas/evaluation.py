"""Evaluating architectures for a search: one at a time without ever raising, and in parallel with one retry."""

from __future__ import annotations

import math
import time

from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.runtime import Executor


def evaluate_one(space: SearchSpace, arch: Arch, seed: int = 0) -> Evaluation:
    """Evaluate one architecture, turning a crash or a non-finite performance into ``ok=False`` (never raises)."""
    t0 = time.perf_counter()
    try:
        ev = space.evaluate(arch, seed)
    except Exception as e:  # an evaluation's crash must not stop the search: it is recorded instead
        try:
            res = dict(space.resources(arch))
        except Exception:
            res = {}
        return Evaluation(
            arch, float("nan"), None, res, time.perf_counter() - t0, ok=False, error=f"{type(e).__name__}: {e}"
        )
    if ev.perf is None or not math.isfinite(float(ev.perf)):
        ev.perf, ev.ok = float("nan"), False
        ev.error = ev.error or "evaluation returned a non-finite performance"
    return ev


def _evaluate_task(task: tuple[SearchSpace, Arch, int]) -> Evaluation:
    return evaluate_one(*task)


def evaluate_batch(executor: Executor, space: SearchSpace, archs: list[Arch], seed: int) -> list[Evaluation]:
    """Evaluate ``archs`` in parallel; each failure is retried once (the retry is flagged in ``extra``)."""

    def run(batch: list[Arch]) -> list[Evaluation]:
        try:
            return list(executor.map(_evaluate_task, [(space, a, seed) for a in batch]))
        except Exception as e:  # the executor itself broke (lost worker, pickling): fail this batch, keep going
            return [
                Evaluation(a, float("nan"), None, {}, 0.0, ok=False, error=f"{type(e).__name__}: {e}") for a in batch
            ]

    evals = run(archs)
    again = [i for i, ev in enumerate(evals) if not ev.ok]
    if again:
        for i, ev in zip(again, run([archs[i] for i in again]), strict=True):
            ev.extra = {**ev.extra, "retried": True, "first_error": evals[i].error}
            evals[i] = ev
    return evals
