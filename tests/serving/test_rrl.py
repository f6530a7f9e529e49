"""RRL's mechanics (first measurement, region update, re-tuning from the estimator) and that it actually learns."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import RRL, RRLConfig, get_tuner
from mlsysopt.serving.tuners.base import boltzmann
from mlsysopt.serving.tuning import tune


class Bowl(Backend):
    """A smooth fake backend: latency grows with the squared normalized distance to an optimum that moves with rate."""

    cores = 16

    def __init__(self, space: Space) -> None:
        self.space = space

    def optimum(self, workload: Workload) -> np.ndarray:
        shift = 0.15 * math.log(workload.rate / 500.0)
        return np.array([0.75 + shift, 0.3, 0.0, 0.6 - shift, 0.0, 0.0])

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        d2 = float(np.sum((self.space.normalized(config) - self.optimum(workload)) ** 2))
        ms = 2.0 * (1.0 + 4.0 * d2)
        return Measurement(
            config, workload, ms, ms, 1.3 * ms, 1.5 * ms, workload.rate, None, 0.0, 0, 100, 100, 0, False, 0.1
        )


SPACE = Space.for_machine(8)
W = Workload(500.0)


def rrl_after(n: int, seed: int = 0, **knobs: object) -> tuple[RRL, Bowl]:
    tuner = RRL(SPACE, Objective(), seed=seed, **knobs)
    backend = Bowl(SPACE)
    tuner.set_workload(W)
    for _ in range(n):
        c = tuner.ask()
        tuner.tell(c, backend.measure(c, W))
    return tuner, backend


def test_first_ask_is_the_middle_and_q_starts_at_its_score() -> None:
    tuner = RRL(SPACE, Objective())
    tuner.set_workload(W)
    assert tuner.q is None and tuner.ask() == SPACE.middle()
    m = Bowl(SPACE).measure(SPACE.middle(), W)
    tuner.tell(SPACE.middle(), m)
    region = SPACE.region(SPACE.middle(), tuner.knobs.radius)
    outside = np.setdiff1d(np.arange(SPACE.size), region)
    assert outside.size > 0
    assert np.all(tuner.q[outside] == m.mean_ms)
    assert tuner.q[SPACE.index(SPACE.middle())] == m.mean_ms


def test_region_update_moves_exactly_the_configs_within_the_radius() -> None:
    tuner, backend = rrl_after(4, radius=0.45)
    before = tuner.q.copy()
    measured_before = {SPACE.index(c) for c in tuner.measured}
    c = tuner.ask()
    tuner.tell(c, backend.measure(c, W))
    region = SPACE.region(c, 0.45)
    assert 1 < region.size < SPACE.size
    changed = np.flatnonzero(tuner.q != before)
    assert set(changed) <= set(region)
    # inside the region (measured configurations are pinned to their scores): Q <- 0.7 Q + 0.3 estimate
    free = np.array([i for i in region if i not in measured_before and i != SPACE.index(c)])
    expected = 0.7 * before[free] + 0.3 * tuner.estimate(free)
    np.testing.assert_allclose(tuner.q[free], expected, rtol=1e-6)  # float32 estimator
    assert set(changed) >= set(free[np.abs(expected - before[free]) > 1e-9])
    assert tuner.q[SPACE.index(c)] == backend.measure(c, W).mean_ms


def test_retuning_reinitialises_q_from_the_estimator() -> None:
    # the earlier defaults' exploration (radius 1.0, decay 0.7): with the current ones (1.5, 0.85) the 25 samples of
    # seed 0 leave Q less correlated with this toy bowl at the new rate (r 0.38, seeds 1-2: 0.72, 0.82; the
    # preset study's shift is better with them); what is checked here is the re-initialisation itself
    tuner, backend = rrl_after(25, radius=1.0, tau_decay=0.7)
    new = Workload(1500.0)
    tuner.set_workload(new)
    assert tuner.measured == {} and tuner.steps == 0
    flat = np.full(SPACE.size, tuner.q.mean())
    assert not np.allclose(tuner.q, flat)  # not a flat start: the estimator's predictions at the new rate
    np.testing.assert_allclose(tuner.q, tuner.estimate(np.arange(SPACE.size)))
    # the estimator kept every sample (the workload is one of its inputs)
    assert tuner.estimator.n_samples == 25
    # what it learned is informative: Q ranks the true optimum of the new rate among the better configurations
    truth = np.array([backend.measure(c, new).mean_ms for c in SPACE])
    assert np.corrcoef(tuner.q, truth)[0, 1] > 0.5


def test_temperature_decays_to_its_floor_and_boltzmann_prefers_low_q() -> None:
    cfg = RRLConfig()
    temps = [cfg.temperature(t) for t in range(60)]
    assert temps[0] == cfg.tau0 and all(a >= b for a, b in itertools.pairwise(temps))
    assert temps[-1] == cfg.tau_min
    rng = np.random.default_rng(0)
    q = np.array([1.0, 1.5, 1.0, 3.0])
    picks = [boltzmann(q, np.arange(4), 0.1, rng) for _ in range(200)]
    assert set(picks) <= {0, 1, 2} and picks.count(0) > 50 and picks.count(2) > 50
    assert boltzmann(q, np.array([1, 3]), 0.01, rng) == 1


def evals_to_optimum(name: str, seed: int, budget: int) -> int:
    backend = Bowl(SPACE)
    truth = {c: backend.measure(c, W).mean_ms for c in SPACE}
    target = 1.05 * min(truth.values())
    tuner = get_tuner(name, SPACE, Objective(), seed=seed)
    tuner.set_workload(W)
    for k in range(1, budget + 1):
        c = tuner.ask()
        tuner.tell(c, backend.measure(c, W))
        if truth[tuner.best] <= target:
            return k
    return budget + 1


def test_rrl_finds_the_optimum_faster_than_random_search() -> None:
    seeds, budget = range(5), 40
    rrl = [evals_to_optimum("rrl", s, budget) for s in seeds]
    rnd = [evals_to_optimum("random", s, budget) for s in seeds]
    assert np.mean(rrl) < 0.6 * np.mean(rnd), (rrl, rnd)


def test_unknown_knob_names_the_knobs() -> None:
    with pytest.raises(MlsysoptError, match="unknown knob.*tau0"):
        RRL(SPACE, Objective(), temperature=1.0)


class NoisyBackend(Bowl):
    """The smooth fake with wide intervals: every measurement is 3 windows whose spread overlaps its neighbours'."""

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        m = super().measure(config, workload)
        lo, hi = 0.7 * m.mean_ms, 1.3 * m.mean_ms
        m.ci = {"mean_ms": [lo, hi], "p99_ms": [1.5 * lo, 1.5 * hi], "throughput": [workload.rate] * 2}
        m.windows = 3
        return m


def test_rrl_re_measures_the_incumbent_when_a_newcomer_wins_within_the_noise() -> None:
    space, obj = Space.for_machine(8), Objective()
    tuner = RRL(space, obj, seed=0, remeasure=2)
    res = tune(tuner, NoisyBackend(space), [(W, 12)])
    asked = [s.config for s in res.steps]
    repeated = {c for c in asked if asked.count(c) > 1}
    assert repeated, "with overlapping intervals RRL should have re-measured an incumbent"
    assert all(asked.count(c) <= 3 for c in repeated)  # at most `remeasure` re-measurements each
    # single windows have no interval, and RRL never repeats one: test_tuners.py's contract checks that
