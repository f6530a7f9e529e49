"""Shared plumbing of the Optuna tuners: ordinal encoding of the knobs, ask/tell, and no wasted repeats.

Each knob is an ``IntDistribution`` over its grid index, so a sampler can exploit the order of the values. A
proposal outside the space (too many threads in total) is mapped to the nearest configuration in it. Optuna is told
``log(score)``: the same minimiser, but a saturated configuration's enormous latency does not swamp a GP. If the
sampler proposes a configuration already measured under the current workload, it is told the cached score at once
and asked again (up to ``max_retries`` times), then a random unmeasured configuration is measured instead (and added
to the study as a trial), so no measurement is spent on a repeat. A new workload starts a new study: a study cannot
carry what it learned to another workload.

**Warm start** (Feurer et al.; what an Optuna user does with earlier studies): given a ``prior``
(:class:`~mlsysopt.serving.prior.TaskPrior`, the same one RRL gets), every new study first enqueues the prior's top
``warm_trials`` configurations for its workload (``study.enqueue_trial``), in the prior's order; they replace the
sampler's random start-up trials as the first points its model sees.
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from typing import TYPE_CHECKING

import optuna
from optuna.distributions import IntDistribution
from optuna.trial import TrialState

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.prior import prior_from_store
from mlsysopt.serving.space import KNOBS, Config, Space, Workload
from mlsysopt.serving.tuners.base import Tuner

if TYPE_CHECKING:
    from mlsysopt.serving.prior import Prior, TaskPrior

WARM_TRIALS = 10  # as many as the samplers' default random start-up trials


class OptunaTuner(Tuner):
    """A tuner driven by an Optuna sampler through the ask/tell API.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        prior: Prior learned on other tasks; each new study first enqueues its top configurations (None: cold).
        warm_trials: How many of the prior's configurations to enqueue per study, >= 1.
        max_retries: Times a proposal of an already measured configuration is re-asked before a random one is used.
        **sampler_knobs: Passed to the subclass's Optuna sampler.

    Raises:
        MlsysoptError: If ``warm_trials`` < 1.
    """

    name = "optuna"

    def __init__(
        self,
        space: Space,
        objective: Objective,
        seed: int = 0,
        prior: TaskPrior | None = None,
        warm_trials: int = WARM_TRIALS,
        max_retries: int = 20,
        **sampler_knobs: object,
    ) -> None:
        super().__init__(space, objective, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if warm_trials < 1:
            raise MlsysoptError(f"{self.name}: warm_trials={warm_trials} must be >= 1")
        self.prior, self.warm_trials = prior, int(warm_trials)
        self.pending_prior: Prior | None = None  # fitted by warm_start, bound to the task by the tuning job
        self._warmed = False
        self.max_retries = max_retries
        self.sampler_knobs = sampler_knobs
        self.distributions = {k: IntDistribution(0, len(space.values[k]) - 1) for k in KNOBS}
        self.studies = 0
        self._new_study()

    @abstractmethod
    def make_sampler(self, seed: int, **knobs: object) -> optuna.samplers.BaseSampler:
        """The sampler of one study."""

    def _new_study(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = self.make_sampler(self.seed + 1000 * self.studies, **self.sampler_knobs)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.studies += 1
        self.pending: tuple[optuna.Trial, Config] | None = None
        self._warmed = False

    def _warm_start(self, workload: Workload) -> None:
        """Enqueue the prior's top configurations for ``workload`` (once per study)."""
        if self.prior is None or self._warmed:
            return
        for config in self.prior.ranked(self.space, workload, self.objective, self.warm_trials):
            self.study.enqueue_trial(self._params(config), skip_if_exists=True)
        self._warmed = True

    def _value(self, m: Measurement) -> float:
        return math.log(max(self.objective.capped_score(m), 1e-12))

    def _params(self, config: Config) -> dict[str, int]:
        return {k: self.space.values[k].index(getattr(config, k)) for k in KNOBS}

    def ask(self) -> Config:
        """The sampler's next proposal that is not yet measured (cached repeats are told back at once)."""
        if self.pending is not None:  # asked before and never told: that trial failed
            self.study.tell(self.pending[0], state=TrialState.FAIL)
            self.pending = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for _ in range(self.max_retries):
                trial = self.study.ask(self.distributions)
                proposal = Config(**{k: self.space.values[k][trial.params[k]] for k in KNOBS})
                config = self.space.nearest(proposal)
                if config in self.measured:
                    self.study.tell(trial, self._value(self.measured[config]))
                    continue
                self.pending = (trial, config)
                return config
        todo = self.unmeasured()
        return self.space.config(int(self.rng.choice(todo))) if todo.size else self.best  # type: ignore[return-value]

    def tell(self, config: Config, measurement: Measurement) -> None:
        """Tell the study the (log) score of the pending trial, or add the measurement as a new trial."""
        super().tell(config, measurement)
        value = self._value(measurement)
        if self.pending is not None and self.pending[1] == config:
            self.study.tell(self.pending[0], value)
        else:
            trial = optuna.trial.create_trial(
                params=self._params(config), distributions=self.distributions, value=value
            )
            self.study.add_trial(trial)
        self.pending = None

    def warm_start(self, histories: list[dict]) -> int:
        """``--warm-start``: fit a prior on the study store's history records (other runs' measurements); the job
        binds it to this task's profile before the search (:attr:`pending_prior`). Returns the measurements used."""

        prior, used = prior_from_store(histories)
        if prior is not None:
            self.pending_prior = prior
        return used

    def set_workload(self, workload: Workload) -> None:
        """A new workload starts a new study."""
        if self.workload is not None and workload != self.workload:
            self._new_study()
        super().set_workload(workload)
        self._warm_start(workload)
