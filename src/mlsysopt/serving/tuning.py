"""The tuning loop: ask a tuner, measure on a backend, tell the tuner, over a schedule of workloads.

A schedule is a list of ``(workload, measurements)``: the tuner gets ``measurements`` asks under each workload in
turn and is told of every change (``set_workload``), which is how re-tuning after a rate change is exercised.
:func:`evals_to_within` turns a run into the benchmark's number: how many measurements it took until the best
configuration so far was truly within a tolerance of the optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import to_jsonable
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.tuners.base import Tuner


@dataclass
class Step:
    """One measurement of a tuning run, with the best configuration so far under the current workload."""

    index: int
    config: Config
    measurement: Measurement
    score: float
    best_config: Config
    best_score: float
    workload: Workload

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite numbers become None)."""
        return to_jsonable(
            {
                "index": self.index,
                "config": self.config.to_dict(),
                "workload": self.workload.to_dict(),
                "score": self.score,
                "best_config": self.best_config.to_dict(),
                "best_score": self.best_score,
                "measurement": self.measurement.to_dict(),
            }
        )


@dataclass
class TuneResult:
    """A tuning run: every step, and the answer under the last workload of the schedule."""

    steps: list[Step]
    best: Config | None
    best_measurement: Measurement | None
    objective: Objective
    slo_met: bool | None  # None without an SLO
    message: str

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite numbers become None)."""
        return to_jsonable(
            {
                "best": self.best.to_dict() if self.best else None,
                "best_measurement": self.best_measurement.to_dict() if self.best_measurement else None,
                "objective": self.objective.to_dict(),
                "slo_met": self.slo_met,
                "message": self.message,
                "steps": [s.to_dict() for s in self.steps],
            }
        )


def tune(
    tuner: Tuner,
    backend: Backend,
    schedule: Sequence[tuple[Workload, int]],
    on_step: Callable[[Step], None] | None = None,
    until: Callable[[Step], bool] | None = None,
) -> TuneResult:
    """Run ``tuner`` against ``backend`` over ``schedule`` and report the best configuration under the last workload.

    With an SLO, the answer is the best-scoring configuration that meets it (p99 <= SLO, not saturated); if none
    does, ``slo_met`` is False and the answer is the one with the lowest p99. ``on_step`` sees every step;
    ``until`` ends the run early at the first step it returns True for (the answer is then the current workload's).
    """
    if not schedule:
        raise MlsysoptError("the tuning schedule is empty: give at least one (workload, measurements) pair")
    for workload, n in schedule:
        if not isinstance(workload, Workload) or int(n) < 1:
            raise MlsysoptError(f"bad schedule entry ({workload!r}, {n!r}): need a Workload and a count >= 1")
    objective = tuner.objective
    steps: list[Step] = []
    segment: list[Measurement] = []
    best_config: Config | None = None
    best_score = math.inf
    for i, (workload, n) in enumerate(schedule):
        tuner.set_workload(workload)
        if i == 0 or workload != schedule[i - 1][0]:
            segment, best_config, best_score = [], None, math.inf
        for _ in range(int(n)):
            config = tuner.ask()
            m = backend.measure(config, workload)
            tuner.tell(config, m)
            segment.append(m)
            score = objective.score(m)
            if best_config is None or score < best_score:
                best_config, best_score = config, score
            step = Step(len(steps), config, m, score, best_config, best_score, workload)
            steps.append(step)
            if on_step is not None:
                on_step(step)
            if until is not None and until(step):
                return _answer(steps, segment, objective)
    return _answer(steps, segment, objective)


def _answer(steps: list[Step], segment: list[Measurement], objective: Objective) -> TuneResult:
    workload = steps[-1].workload
    where = f"rate {workload.rate:g} req/s after {len(segment)} measurement(s)"
    if objective.slo_ms is None:
        best = min(segment, key=objective.score)
        msg = f"best {best.config.label()}: {objective.stat} {best.stat(objective.stat):.3g} ms at {where}"
        return TuneResult(steps, best.config, best, objective, None, msg)
    feasible = [m for m in segment if objective.feasible(m)]
    if feasible:
        best = min(feasible, key=objective.score)
        msg = (
            f"best {best.config.label()}: {objective.stat} {best.stat(objective.stat):.3g} ms, "
            f"p99 {best.p99_ms:.3g} ms <= SLO {objective.slo_ms:g} ms, {best.config.threads} cores at {where}"
        )
        return TuneResult(steps, best.config, best, objective, True, msg)
    best = min(segment, key=lambda m: m.p99_ms)
    msg = (
        f"no measured configuration meets the SLO of {objective.slo_ms:g} ms (p99, without saturating) at {where}; "
        f"returning the one with the lowest p99: {best.config.label()} (p99 {best.p99_ms:.3g} ms)"
    )
    return TuneResult(steps, best.config, best, objective, False, msg)


def evals_to_within(
    steps: Sequence[Step],
    true_scores: Mapping[Config, float] | Callable[[Config], float],
    optimum: float,
    tol: float = 0.05,
    start: int = 0,
) -> int | None:
    """Measurements (counted from ``start``) until the best-so-far config's true score is within ``tol`` of optimum.

    Only the workload segment that begins at step ``start`` counts; None if it never gets there. ``true_scores``
    (e.g. an exhaustive table of the simulator) judges the best-so-far configuration, not its noisy measurement.
    """
    truth = true_scores if callable(true_scores) else true_scores.__getitem__
    if not 0 <= start < len(steps):
        return None
    limit = optimum * (1 + tol) if optimum >= 0 else optimum * (1 - tol)
    workload = steps[start].workload
    for k, step in enumerate(steps[start:], start=1):
        if step.workload != workload:
            break
        if truth(step.best_config) <= limit:
            return k
    return None
