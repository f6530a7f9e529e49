"""The tuning loop: schedules of workloads, the result and its SLO message, and evals-to-within."""

from __future__ import annotations

import json

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Space, Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning import Step, TuneResult, evals_to_within, tune

SPACE = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0, 2), intra_threads=(1, 2), inter_threads=(1,))
A, B = Workload(300.0), Workload(900.0)


def engine(slo_ms: float | None = None) -> SimulatedEngine:
    return SimulatedEngine(ServiceProfile.synthetic(cores=2), n_requests=100, slo_ms=slo_ms)


def test_schedule_with_two_workloads() -> None:
    tuner = get_tuner("random", SPACE, Objective(), seed=1)
    seen: list[Step] = []
    res = tune(tuner, engine(), [(A, 4), (B, 3)], on_step=seen.append)
    assert isinstance(res, TuneResult)
    assert seen == res.steps
    assert [s.index for s in res.steps] == list(range(7))
    assert [s.workload for s in res.steps] == [A] * 4 + [B] * 3
    assert tuner.workload == B
    for seg in (res.steps[:4], res.steps[4:]):
        bests = [s.best_score for s in seg]
        assert bests == sorted(bests, reverse=True)  # the best so far never gets worse within a workload
        assert bests[0] == seg[0].score  # and starts over when the workload changes
        assert all(s.best_config in [t.config for t in seg[: i + 1]] for i, s in enumerate(seg))
    assert res.best == res.steps[-1].best_config
    assert res.best_measurement.config == res.best and res.best_measurement.workload == B
    assert res.objective == Objective() and res.slo_met is None
    assert res.best.label() in res.message
    data = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert len(data["steps"]) == 7 and data["best"] == res.best.to_dict()


def test_slo_met_returns_the_best_feasible_configuration() -> None:
    objective = Objective("cost", slo_ms=1000.0)
    res = tune(get_tuner("exhaustive", SPACE, objective), engine(1000.0), [(A, SPACE.size)])
    assert res.slo_met is True
    feasible = [s.measurement for s in res.steps if objective.feasible(s.measurement)]
    assert res.best_measurement.config.threads == min(m.config.threads for m in feasible)
    assert "SLO" in res.message


def test_slo_unmet_says_so_and_returns_the_lowest_p99() -> None:
    objective = Objective("latency", slo_ms=0.01)  # nothing serves in 10 us
    res = tune(get_tuner("random", SPACE, objective), engine(0.01), [(A, 5)])
    assert res.slo_met is False
    assert "no measured configuration meets the SLO" in res.message and "lowest p99" in res.message
    assert res.best_measurement.p99_ms == min(s.measurement.p99_ms for s in res.steps)


def test_evals_to_within() -> None:
    objective = Objective()
    be = engine()
    truth = {c: objective.score(be.measure(c, B)) for c in SPACE}
    optimum = min(truth.values())
    res = tune(get_tuner("exhaustive", SPACE, objective), be, [(A, 3), (B, SPACE.size)])
    first_ok = next(i for i, c in enumerate(SPACE.configs(), start=1) if truth[c] <= 1.05 * optimum)
    assert evals_to_within(res.steps, truth, optimum, start=3) == first_ok
    assert evals_to_within(res.steps, truth.__getitem__, optimum, start=3) == first_ok
    assert evals_to_within(res.steps, truth, optimum, tol=0.0, start=3) <= SPACE.size
    # the first segment only counts its own steps, and an unreachable target is None
    assert evals_to_within(res.steps, truth, optimum * 0.5, start=0) is None
    assert evals_to_within(res.steps, truth, optimum, start=len(res.steps)) is None


@pytest.mark.parametrize("schedule", [[], [(A, 0)], [("fast", 3)]])
def test_bad_schedule_is_a_clear_error(schedule: list) -> None:
    with pytest.raises(MlsysoptError, match="schedule"):
        tune(get_tuner("random", SPACE, Objective()), engine(), schedule)
