"""The tuning loop: ask a tuner, measure on a backend, tell the tuner, over a schedule of workloads.

A schedule is a list of ``(workload, measurements)``: the tuner gets ``measurements`` asks under each workload in
turn and is told of every change (``set_workload``), which is how re-tuning after a rate change is exercised.
A configuration measured more than once (RRL re-measures an incumbent a newcomer barely beats) counts with all its
measurements merged. The answer is given per rate (:class:`RateAnswer`); :func:`evals_to_within` turns a run into
the benchmark's number: how many measurements it took until the best configuration so far was truly within a
tolerance of the optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import to_jsonable
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.tuners.base import Tuner
from mlsysopt.serving.windows import merge
from mlsysopt.text import plural


@dataclass
class Step:
    """One measurement of a tuning run, with the best configuration so far under the current workload.

    Args:
        index: Position of the step in the run, from 0.
        config: The configuration measured at this step.
        measurement: Its measurement.
        score: Its objective score (lower is better).
        best_config: Best configuration so far under the current workload (measurements merged).
        best_score: Score of ``best_config`` over its merged measurements.
        workload: The workload of this step.
    """

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
class RateAnswer:
    """The answer of a tuning run under one workload: best configuration, its (merged) measurement, SLO verdict.

    Args:
        workload: The workload answered.
        best: The chosen configuration.
        measurement: Its (merged) measurement.
        score: Its objective score.
        slo_met: Whether it meets the SLO (None without an SLO).
        message: One line explaining the answer.
        measured: Every configuration measured under this workload, with its merged measurement.
    """

    workload: Workload
    best: Config
    measurement: Measurement
    score: float
    slo_met: bool | None  # None without an SLO
    message: str
    measured: dict[Config, Measurement] = field(default_factory=dict)  # every configuration measured (merged)

    def ranked(self, objective: Objective) -> list[Config]:
        """The measured configurations, best first (SLO-meeting ones first when there is an SLO)."""

        def key(c: Config) -> tuple[bool, float]:
            m = self.measured[c]
            return (objective.slo_ms is not None and not objective.feasible(m), objective.score(m))

        return sorted(self.measured, key=key)

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return to_jsonable(
            {
                "rate": self.workload.rate,
                "best": self.best.to_dict(),
                "score": self.score,
                "slo_met": self.slo_met,
                "message": self.message,
                "measurement": self.measurement.to_dict(),
            }
        )


@dataclass
class TuneResult:
    """A tuning run: every step, and the answer under every workload of the schedule (the last one first-class).

    Args:
        steps: Every step of the run, in order.
        best: Answer under the last workload (None if nothing was measured).
        best_measurement: Its merged measurement.
        objective: The objective scored.
        slo_met: Whether the last answer meets the SLO (None without an SLO).
        message: One line explaining the last answer.
        per_rate: The answer under each workload segment of the schedule.
        stopped: Why the run ended: ``"budget"``, ``"timeout"`` or ``"until"``.
    """

    steps: list[Step]
    best: Config | None
    best_measurement: Measurement | None
    objective: Objective
    slo_met: bool | None  # None without an SLO
    message: str
    per_rate: list[RateAnswer] = field(default_factory=list)
    stopped: str = "budget"  # budget | timeout | until

    def to_dict(self) -> dict:
        """A JSON-ready dict (non-finite numbers become None)."""
        return to_jsonable(
            {
                "best": self.best.to_dict() if self.best else None,
                "best_measurement": self.best_measurement.to_dict() if self.best_measurement else None,
                "objective": self.objective.to_dict(),
                "slo_met": self.slo_met,
                "message": self.message,
                "stopped": self.stopped,
                "per_rate": [a.to_dict() for a in self.per_rate],
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
    """Run ``tuner`` against ``backend`` over ``schedule`` and report the best configuration under every workload.

    With an SLO, the answer is the best-scoring configuration that meets it (p99 <= SLO, not saturated); if none
    does, ``slo_met`` is False and the answer is the one with the lowest p99. ``on_step`` sees every step;
    ``until`` ends the run early at the first step it returns True for (``stopped`` then says ``until``).

    Args:
        tuner: The tuner to ask and tell (its objective scores the run).
        backend: Measures each asked configuration.
        schedule: ``(workload, measurements)`` pairs, run in order; each count >= 1.
        on_step: Called with every :class:`Step` (None: not called).
        until: Stops the run at the first step for which it returns True (None: run the whole schedule).

    Returns:
        TuneResult: Every step and the answer under every workload.

    Raises:
        MlsysoptError: If ``schedule`` is empty or an entry is not a ``Workload`` with a count >= 1.
    """
    if not schedule:
        raise MlsysoptError("the tuning schedule is empty: give at least one (workload, measurements) pair")
    for workload, n in schedule:
        if not isinstance(workload, Workload) or int(n) < 1:
            raise MlsysoptError(f"bad schedule entry ({workload!r}, {n!r}): need a Workload and a count >= 1")
    objective = tuner.objective
    steps: list[Step] = []
    segments: list[tuple[Workload, dict[Config, list[Measurement]]]] = []
    for i, (workload, n) in enumerate(schedule):
        tuner.set_workload(workload)
        if i == 0 or workload != schedule[i - 1][0]:
            segments.append((workload, {}))
        seen = segments[-1][1]
        for _ in range(int(n)):
            config = tuner.ask()
            m = backend.measure(config, workload)
            tuner.tell(config, m)
            seen.setdefault(config, []).append(m)
            best = min(seen, key=lambda c: objective.score(merge(seen[c])))  # ties: the first measured
            step = Step(len(steps), config, m, objective.score(m), best, objective.score(merge(seen[best])), workload)
            steps.append(step)
            if on_step is not None:
                on_step(step)
            if until is not None and until(step):
                return _result(steps, segments, objective, "until")
    return _result(steps, segments, objective, "budget")


def _result(
    steps: list[Step], segments: list[tuple[Workload, dict[Config, list[Measurement]]]], objective: Objective, why: str
) -> TuneResult:
    answers = [answer(w, {c: merge(ms) for c, ms in seen.items()}, objective) for w, seen in segments if seen]
    last = answers[-1]
    return TuneResult(steps, last.best, last.measurement, objective, last.slo_met, last.message, answers, why)


def answer(workload: Workload, measured: dict[Config, Measurement], objective: Objective) -> RateAnswer:
    """The best of ``measured`` under ``objective`` (see :func:`tune`), with a one-line message."""
    n = len(measured)
    where = f"rate {workload.rate:g} req/s after {n} configuration(s)"
    ms = list(measured.values())
    if objective.slo_ms is None:
        best = min(ms, key=objective.score)
        msg = f"best {best.config.label()}: {objective.describe(objective.score(best))} at {where}"
        return RateAnswer(workload, best.config, best, objective.score(best), None, msg, measured)
    feasible = [m for m in ms if objective.feasible(m)]
    if feasible:
        best = min(feasible, key=objective.score)
        msg = (
            f"best {best.config.label()}: {objective.describe(objective.score(best))}, p99 {best.p99_ms:.3g} ms "
            f"<= SLO {objective.slo_ms:g} ms, {plural(best.config.threads, 'core')} at {where}"
        )
        return RateAnswer(workload, best.config, best, objective.score(best), True, msg, measured)
    best = min(ms, key=lambda m: (m.p99_ms if math.isfinite(m.p99_ms) else math.inf, str(m.config)))
    msg = (
        f"SLO missed: no measured configuration meets the SLO of {objective.slo_ms:g} ms (p99, without saturating) "
        f"at {where}; returning the one with the lowest p99: {best.config.label()} (p99 {best.p99_ms:.3g} ms)"
    )
    return RateAnswer(workload, best.config, best, objective.score(best), False, msg, measured)


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

    Args:
        steps: The steps of a tuning run.
        true_scores: The true score of each configuration, as a mapping or a callable.
        optimum: The true optimum score.
        tol: Relative tolerance, e.g. 0.05 = within 5% of ``optimum``.
        start: Index of the step where the counted workload segment begins.

    Returns:
        int | None: Number of measurements (1-based) until the best-so-far configuration was within ``tol``;
        None if it never got there or ``start`` is out of range.
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
