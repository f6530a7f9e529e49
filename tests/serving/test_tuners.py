"""The contract every tuner keeps, run through the tuning loop on the simulator; the registry's errors."""

from __future__ import annotations

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import TUNERS, get_tuner
from mlsysopt.serving.tuning import tune

SPACE = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0, 2), intra_threads=(1, 2), inter_threads=(1,))
A, B = Workload(300.0), Workload(900.0)
SCHEDULE = [(A, 6), (B, 5)]
REPEATS_ALLOWED = {"default"}  # a reference point, not a search


def engine() -> SimulatedEngine:
    return SimulatedEngine(ServiceProfile.synthetic(cores=2), n_requests=100)


def run(name: str, seed: int = 0, objective: Objective | None = None):
    tuner = get_tuner(name, SPACE, objective or Objective(), seed=seed)
    return tuner, tune(tuner, engine(), SCHEDULE)


@pytest.mark.parametrize("name", TUNERS)
def test_contract(name: str) -> None:
    tuner, res = run(name)
    assert tuner.name == name
    assert len(res.steps) == 11
    assert [s.workload for s in res.steps] == [A] * 6 + [B] * 5
    for step in res.steps:
        assert step.config in SPACE
        assert step.measurement.config == step.config and step.measurement.workload == step.workload
    segments = [res.steps[:6], res.steps[6:]]
    for seg in segments:
        asked = [s.config for s in seg]
        if name in REPEATS_ALLOWED:
            assert len(set(asked)) == 1
        else:
            assert len(set(asked)) == len(asked), f"{name} measured a configuration twice under one workload"
        assert seg[-1].best_config in asked
        # a configuration measured more than once counts with its measurements merged (same value, up to rounding)
        assert seg[-1].best_score == pytest.approx(min(s.score for s in seg), rel=1e-12)
    # the answer is a configuration measured under the last workload, and the tuner forgot the first one
    assert res.best in {s.config for s in segments[1]}
    assert res.best_measurement is not None and res.best_measurement.config == res.best
    assert tuner.workload == B
    assert set(tuner.measured) == {s.config for s in segments[1]}
    assert tuner.best == res.best


@pytest.mark.parametrize("name", TUNERS)
def test_deterministic_with_seed(name: str) -> None:
    first = [s.config for s in run(name, seed=3)[1].steps]
    again = [s.config for s in run(name, seed=3)[1].steps]
    assert first == again


def test_seeds_differ_for_random_tuners() -> None:
    for name in ("random", "rrl", "tpe"):
        runs = {tuple(s.config for s in run(name, seed=seed)[1].steps) for seed in range(3)}
        assert len(runs) > 1, name


def test_cost_objective_runs() -> None:
    _, res = run("rrl", objective=Objective("cost", slo_ms=50.0))
    assert res.slo_met is not None
    assert res.best is not None


def test_default_asks_onnxruntime_default() -> None:
    tuner = get_tuner("default", SPACE, Objective(), cores=2)
    assert tuner.ask() == Config(1, 1, 0.0, 2, 1) == tuner.ask()


def test_exhaustive_visits_every_config_in_order_then_repeats_best() -> None:
    tuner = get_tuner("exhaustive", SPACE, Objective())
    res = tune(tuner, engine(), [(A, SPACE.size + 2)])
    asked = [s.config for s in res.steps]
    assert asked[: SPACE.size] == SPACE.configs()
    assert asked[SPACE.size :] == [res.best, res.best]


def test_hill_climb_starts_at_default_and_measures_its_neighbors() -> None:
    tuner = get_tuner("hill_climb", SPACE, Objective())
    asked = [s.config for s in tune(tuner, engine(), [(A, 5)]).steps]
    assert asked[0] == SPACE.default()
    near = SPACE.neighbors(SPACE.default())
    # at max batch 1 the timeout step and, with one inter-op thread, the execution-mode step are equivalent: 3 moves
    assert len(near) == 3 and set(asked[1:4]) == set(near)


def test_unknown_tuner_name_lists_choices() -> None:
    with pytest.raises(MlsysoptError, match=r"unknown tuner 'nope'.*rrl.*hill_climb"):
        get_tuner("nope", SPACE, Objective())


def test_unknown_knob_is_a_clear_error() -> None:
    with pytest.raises(MlsysoptError, match="radius"):
        get_tuner("rrl", SPACE, Objective(), radiuss=0.3)
    with pytest.raises(MlsysoptError, match="random"):
        get_tuner("random", SPACE, Objective(), cores=4)


@pytest.mark.parametrize("name", ["rrl", "bandit"])
def test_bad_exploration_knob_values_name_the_tuner_and_the_knob(name: str) -> None:
    with pytest.raises(MlsysoptError, match=f"{name}: invalid knob.*tau_decay=1.5"):
        get_tuner(name, SPACE, Objective(), tau_decay=1.5)
    with pytest.raises(MlsysoptError, match=f"{name}: invalid knob.*tau0=0"):
        get_tuner(name, SPACE, Objective(), tau0=0)


def test_bad_rrl_knob_values_are_listed_together() -> None:
    with pytest.raises(MlsysoptError, match=r"rrl: invalid knob.*radius=-1.*alpha=2.*hidden=\(\)"):
        get_tuner("rrl", SPACE, Objective(), radius=-1, alpha=2, hidden=[])
    with pytest.raises(MlsysoptError, match=r"rrl: invalid knob.*warm_alpha=0 \(need 0 < warm_alpha <= 1\)"):
        get_tuner("rrl", SPACE, Objective(), warm_alpha=0)
    assert get_tuner("rrl", SPACE, Objective(), hidden=[8]).knobs.hidden == (8,)


def test_the_bandit_takes_rrls_exploration_knobs_only() -> None:
    bandit = get_tuner("bandit", SPACE, Objective(), tau0=0.2)
    assert bandit.knobs.tau0 == 0.2 and bandit.knobs.temperature(0) == 0.2
    with pytest.raises(MlsysoptError, match="bandit: unknown knob.*radius"):
        get_tuner("bandit", SPACE, Objective(), radius=0.5)
