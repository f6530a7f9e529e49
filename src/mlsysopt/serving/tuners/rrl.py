"""RRL (Qin et al., SC'19): region-based reinforcement learning for serving configuration.

The algorithm, as in the paper (a contextual bandit: the reward is the score, there is no next state):

1. Measure the middle configuration of the space; initialise the value table ``Q`` (the *estimated score* of every
   configuration, lower is better) everywhere to its score.
2. After every measurement, retrain a latency estimator on every (workload, configuration) -> latency sample so far,
   across workloads, and pull ``Q`` toward the estimator in the *region* around the measured configuration (a ball of
   radius ``r`` in normalized space): ``Q <- (1 - alpha) Q + alpha * estimate``. The measured configuration's ``Q``
   is its measured score.
3. Pick the next configuration by Boltzmann exploration over ``Q`` among those not yet measured under this workload.
4. When the workload changes, re-initialise ``Q`` from the estimator's predictions at the new workload: the workload
   is an input of the estimator, so what was learned carries over.

On noisy measurements (windows with 95% intervals, :mod:`mlsysopt.serving.windows`): a configuration's value is
its measurements merged (every window pooled), the estimator weights each sample by the inverse of its squared
relative interval half-width (a tight measurement counts more than a wide one), and when a newcomer beats the
incumbent by less than their intervals allow (the newcomer's upper end is above the incumbent's lower end) the
next measurement re-measures the incumbent instead of exploring (at most ``remeasure`` times per configuration),
so a lucky window does not crown a configuration. A single window has no interval, and RRL then behaves as in
the paper.

Departures from the paper, all knobs of :class:`RRLConfig`: the estimator predicts log(objective quantity:
latency statistic, or throughput) and log(p99) so that the ``cost`` and ``throughput`` objectives can be
estimated too; the Boltzmann energy is
relative to the best estimate (see :func:`~mlsysopt.serving.tuners.base.boltzmann`); the temperature decays per
measurement.

Defaults, tuned on the simulator (synthetic 32-core profile, ``Space.for_machine(32, max_batch=1..64)``, 1,848
configurations, mean latency at 400-8000 req/s) by evals-to-within-5% of the exhaustive optimum, median over 40
seeds; the tuner never sees the optimum. The paper's radius (3 on a 0..10 grid, 0.3 normalized) covers up to 9% of
its 3-knob space but <1% of this 5-knob one, and left RRL stuck in one neighbourhood on some seeds; 0.6 (~8%) was
better and 1.0 (~40% of the space) best. alpha = 0.3 as in the paper (0.6 was worse). The temperature starts at
0.5 (configurations estimated 50% worse than the best are e times rarer) and decays by 0.7 per measurement to 0.01:
near-greedy on Q after ~12 measurements. After a workload change it restarts at 0.1, since Q then comes from the
estimator rather than from one measurement.

Issue 22 re-chose two of them on the *tuning* presets (:mod:`mlsysopt.serving.presets`: 7 profiles, one per
model, several seeds each, cap 60, mean latency at the study's rate A; warm runs with a prior fitted without the
profile's own model; the held-out presets were not looked at): radius 1.5 and
a temperature decay of 0.85 per measurement took the median evals-to-within-5% of cold RRL from 23 to 11 (p90 44 ->
22; Optuna's GP there: 15, p90 33); radius 2.0 / 2.5, decay 0.9, tau0 0.3, alpha 0.45 / 0.6 were worse. Warm RRL was
unchanged by them (median 2 either way). A check of both on 5 of those profiles x 4 seeds, with the rate change
(30 measurements at A, then 1.5x): after the change cold RRL needs a median 2 either way (p90 29 -> 5), warm RRL 4
-> 2 (p90 11 -> 5).

``warm_alpha`` (0.6: the step of Q toward the estimate when RRL starts from a prior) was chosen the same way, on the
14 tuning presets x 10 seeds with leave-one-model-out priors (cap 60, mean latency at rate A): with the cold step
0.3, warm RRL needed a median 2.5 measurements to within 5% (p90 21, mean 6.4; Optuna's GP warm-started with the
same prior 4.5, p90 34); 0.6 took it to 2 (p90 14, mean 5.3), and after the rate change from 2.5 to 2 (p90 13
either way). 0.45 was in between, 0.8 and radius 2.0 about equal; a global update (radius 3, step 1), radius 1.0,
re-tune temperatures 0.05 / 0.15, a decay of 0.7 and a residual learning rate of 0.03 were worse. The prior's
estimate is informed before the first measurement, so Q may follow it further than the paper's estimator, which
starts from nothing.

Issue 34 closes warm RRL's gap to warm GP on the held-out presets with **expected improvement**
(``acquisition="ei"``: a GP on the prior's residuals, :mod:`~mlsysopt.serving.tuners.acquisition`). On the 14
tuning presets x 10 seeds (the same protocol; share of tunes within 5% after 10 / 30 / 60 measurements, the first
tune and the re-tune after the rate change pooled) the value table led at 10 (86% vs 79%) and tied at 60, and
expected improvement led at 30 (100% vs 98%, outside the bootstrap noise); so ``serving tune``'s rule
(:mod:`mlsysopt.serving.tuner_rule`) runs expected improvement for a prior and a budget of 11-30 and the value
table otherwise, and the knob's default stays ``boltzmann``. Mean / p90 measurements to within 5% there: 5.3 / 14
(value table), 5.9 / 17 (expected improvement), 10.4 / 34 (Optuna GP warm), 12.6 / 32 (TPE warm); on the held-out
presets 9.1 / 25, 5.1 / 14, 5.3 / 21, 5.9 / 18 (BENCHMARKS.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.prior import prior_from_store
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners.acquisition import ResidualGP, expected_improvement
from mlsysopt.serving.tuners.base import Exploration, Tuner, boltzmann, knobs_from
from mlsysopt.serving.tuners.estimator import LatencyEstimator, PriorEstimator

if TYPE_CHECKING:
    from mlsysopt.serving.prior import Prior, TaskPrior

ACQUISITIONS = ("boltzmann", "ei")


@dataclass(frozen=True)
class RRLConfig(Exploration):
    """RRL's knobs: the temperature schedule of :class:`Exploration` and these (the defaults and why: module doc).

    Args:
        tau0: Initial Boltzmann temperature (relative to the best estimate), > 0.
        tau_decay: Temperature multiplier per measurement, in (0, 1].
        tau_min: Temperature floor, > 0.
        tau_retune: Initial temperature after a workload change, > 0.
        radius: Region radius in normalized coordinates, > 0.
        alpha: Step of Q toward the estimate inside the region, in (0, 1].
        warm_alpha: The same step when starting from a prior, in (0, 1].
        hidden: Hidden layer widths of the estimator MLP, each >= 1.
        steps_per_tell: Adam steps on all samples after each measurement, > 0.
        lr: Adam learning rate, > 0.
        huber_delta: Huber loss threshold in log-ms, > 0.
        remeasure: Times one configuration may be re-measured when a newcomer's lead is within the noise, >= 0.
        weight_floor: Relative interval half-width below which samples weigh the same, > 0.
        acquisition: With a prior: ``ei`` (expected improvement of a GP on the prior's residuals) or
            ``boltzmann`` (the value table, as without a prior).

    Raises:
        MlsysoptError: If a knob is out of range.
    """

    tau_decay: float = 0.85  # slower than Exploration's 0.7: chosen on the tuning presets (module doc)
    radius: float = 1.5  # region radius in normalized space (the paper: distance 3 on a 0..10 grid, i.e. 0.3)
    alpha: float = 0.3  # step of Q toward the estimate inside the region (the paper's 0.3)
    warm_alpha: float = 0.6  # the same step when the estimate rests on a prior (module doc: chosen on tuning presets)
    hidden: tuple[int, ...] = (64, 32)  # estimator hidden layers (the paper: 256, 64)
    steps_per_tell: int = 40  # Adam steps on all samples after each measurement (warm-started)
    lr: float = 0.01  # Adam learning rate
    huber_delta: float = 0.5  # Huber loss threshold in log-ms
    remeasure: int = 2  # times one configuration may be re-measured because a newcomer's lead was within the noise
    weight_floor: float = 0.02  # relative interval half-width below which samples weigh the same
    acquisition: str = "boltzmann"  # warm: the value table, as cold ("ei": expected improvement, issue 34)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        super().__post_init__()

    def invalid(self) -> list[str]:
        """The knobs out of range, as ``name=value``."""
        positive = ("radius", "lr", "huber_delta", "steps_per_tell", "weight_floor")
        bad = [*super().invalid(), *(f"{k}={getattr(self, k)}" for k in positive if not getattr(self, k) > 0)]
        if self.remeasure < 0:
            bad.append(f"remeasure={self.remeasure} (need >= 0)")
        for k in ("alpha", "warm_alpha"):
            if not 0 < getattr(self, k) <= 1:
                bad.append(f"{k}={getattr(self, k)} (need 0 < {k} <= 1)")
        if self.acquisition not in ACQUISITIONS:
            bad.append(f"acquisition={self.acquisition!r} (one of {', '.join(ACQUISITIONS)})")
        if not self.hidden or min(self.hidden) < 1:
            bad.append(f"hidden={self.hidden}")
        return bad


class RRL(Tuner):
    """Region-based RL: a value table over every configuration, pulled toward a learned estimate region by region.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        prior: Prior learned on other models; RRL then starts from its estimate (None: cold start).
        **knobs: Fields of :class:`RRLConfig`.

    Raises:
        MlsysoptError: For an unknown knob or a value out of range.
    """

    name = "rrl"

    def __init__(
        self, space: Space, objective: Objective, seed: int = 0, prior: TaskPrior | None = None, **knobs: object
    ) -> None:
        super().__init__(space, objective, seed)
        self.knobs = knobs_from(RRLConfig, knobs, "rrl")
        self.prior = prior
        self.q: np.ndarray | None = None  # estimated score per configuration (None before the first measurement)
        self.steps = 0  # measurements under the current workload (drives the temperature)
        self.retuning = False  # whether Q started from the estimator (after a workload change, or from a prior)
        self.estimator: LatencyEstimator | PriorEstimator
        if prior is None:
            self.estimator = LatencyEstimator(space, objective, self.knobs, seed)
        else:
            self.estimator = PriorEstimator(prior, space, objective, self.knobs, seed)
        self._recheck: Config | None = None  # an incumbent to re-measure next (a newcomer's lead within the noise)
        self._remeasured: dict[Config, int] = {}
        self.pending_prior: Prior | None = None  # fitted by warm_start, bound to the task by the tuning job
        self.residual: ResidualGP | None = None
        if prior is not None and self.knobs.acquisition == "ei":
            self.residual = ResidualGP(space, seed)

    @property
    def warm(self) -> bool:
        """Whether RRL starts from a prior learned on other models."""
        return self.prior is not None

    @property
    def alpha(self) -> float:
        """The step of Q toward the estimate: larger with a prior, whose estimate is informed from the start."""
        return self.knobs.warm_alpha if self.warm else self.knobs.alpha

    # ------------------------------------------------------------------ estimates
    def estimate(self, idx: np.ndarray) -> np.ndarray:
        """The estimator's scores of configurations ``idx`` under the current workload."""
        return self.estimator.scores(idx, self.workload)

    # ------------------------------------------------------------------ ask / tell
    def temperature(self) -> float:
        """The current Boltzmann temperature."""
        return self.knobs.temperature(self.steps, self.retuning)

    def ask(self) -> Config:
        """The middle configuration (cold) or the prior's best (warm) first; an incumbent whose lead is within the
        noise; else Boltzmann over Q."""
        if self.q is None:
            return self.space.middle()
        if self._recheck is not None:
            config, self._recheck = self._recheck, None
            self._remeasured[config] = self._remeasured.get(config, 0) + 1
            return config
        candidates = self.unmeasured()
        if candidates.size == 0:
            return self.best  # type: ignore[return-value]
        if self.residual is not None:  # expected improvement over the prior + its residual GP
            return self.space.config(self._ei_pick(candidates))
        if self.warm and self.steps == 0:  # the prior's best, greedily
            return self.space.config(int(candidates[np.argmin(self.q[candidates])]))
        return self.space.config(boltzmann(self.q, candidates, self.temperature(), self.rng))

    def _prior_scores(self) -> np.ndarray:
        return self.prior.scores(self.space, self.workload, self.objective)  # type: ignore[union-attr,arg-type]

    def _ei_pick(self, candidates: np.ndarray) -> int:
        """The unmeasured configuration of highest expected improvement (log score) under prior + residual GP; the
        lowest predicted score before any measurement under this workload."""
        base = np.log(np.maximum(self._prior_scores()[candidates], 1e-12))
        mean, std = self.residual.predict(self.workload, candidates)  # type: ignore[union-attr,arg-type]
        if not self.measured:
            return int(candidates[np.argmin(base + mean)])
        best = math.log(max(min(self.objective.capped_score(m) for m in self.measured.values()), 1e-12))
        ei = expected_improvement(base + mean, std, best)
        return int(candidates[np.lexsort((base + mean, -ei))[0]])

    def _weight(self, m: Measurement) -> float:
        """Inverse squared relative half-width of the measurement's interval (1/floor^2 without one)."""
        floor = self.knobs.weight_floor
        ci = self.objective.score_interval(m)
        score = self.objective.capped_score(m)
        if ci is None or not all(math.isfinite(v) for v in ci) or score <= 0:
            return 1.0 / floor**2
        return 1.0 / max((ci[1] - ci[0]) / (2 * score), floor) ** 2

    def _lead_within_noise(self, newcomer: Config, incumbent: Config) -> bool:
        """Whether ``newcomer`` beats ``incumbent`` by less than their intervals allow."""
        a, b = self.measured[newcomer], self.measured[incumbent]
        ia, ib = self.objective.score_interval(a), self.objective.score_interval(b)
        if ia is None or ib is None:
            return False
        return self.objective.score(a) < self.objective.score(b) and ia[1] >= ib[0]

    def tell(self, config: Config, measurement: Measurement) -> None:
        """Learn from the measurement: retrain the estimator, then update Q in the region around ``config``."""
        incumbent = self.best
        super().tell(config, measurement)
        if self.workload is None:
            self.workload = measurement.workload
        score = self.objective.capped_score(self.measured[config])
        if self.residual is None:
            self.estimator.add(config, measurement, self._weight(measurement))
            self.estimator.fit()
        else:  # the residual GP replaces the estimator and the value table
            i = self.space.index(config)
            self.residual.add(self.workload, i, self.objective.capped_score(measurement), self._prior_scores()[i])
        if (
            incumbent is not None
            and incumbent != config
            and self._remeasured.get(incumbent, 0) < self.knobs.remeasure
            and self._lead_within_noise(config, incumbent)
        ):
            self._recheck = incumbent
        if self.q is None:
            self.q = np.full(self.space.size, score)
        if self.residual is not None:
            self.steps += 1
            return
        region = self.space.region(config, self.knobs.radius)
        alpha = self.alpha
        self.q[region] = (1.0 - alpha) * self.q[region] + alpha * self.estimate(region)
        self._pin_measured()
        self.steps += 1

    def warm_start(self, histories: list[dict]) -> int:
        """``--warm-start``: fit a prior on the study store's history records (other runs' measurements); the job
        binds it to this task's profile before the search (:attr:`pending_prior`). Returns the measurements used."""
        prior, used = prior_from_store(histories)
        if prior is not None:
            self.pending_prior = prior
        return used

    def _pin_measured(self) -> None:
        # a measured score (every measurement of it merged) beats any estimate of it
        for c, m in self.measured.items():
            self.q[self.space.index(c)] = self.objective.capped_score(m)  # type: ignore[index]

    def set_workload(self, workload: Workload) -> None:
        """Forget which configurations were measured, keep the estimator, and re-initialise Q from its predictions.

        With a prior, Q starts from the prior's estimate under the first workload too.
        """
        changed = self.workload is not None and workload != self.workload
        first = self.workload is None
        if changed:
            self._recheck, self._remeasured = None, {}
        super().set_workload(workload)
        if (changed and self.estimator.trained) or (first and self.warm):
            self.q = self.estimate(np.arange(self.space.size))
            self.steps, self.retuning = 0, True
