"""Optuna's Gaussian-process sampler over the ordinal knob indices."""

from __future__ import annotations

import optuna

from mlsysopt.serving.tuners._optuna import OptunaTuner


class OptunaGP(OptunaTuner):
    """Bayesian optimisation with Optuna's ``GPSampler`` (default settings, seeded).

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        prior: Prior learned on other tasks; each new study first enqueues its top configurations (None: cold).
        warm_trials: How many of the prior's configurations to enqueue per study, >= 1.
        max_retries: Times a proposal of an already measured configuration is re-asked before a random one is used.
        **sampler_knobs: Passed to Optuna's ``GPSampler``.

    Raises:
        MlsysoptError: If ``warm_trials`` < 1.
    """

    name = "gp"

    def make_sampler(self, seed: int, **knobs: object) -> optuna.samplers.BaseSampler:
        """A seeded ``GPSampler``; ``knobs`` are passed through (e.g. ``n_startup_trials``)."""
        return optuna.samplers.GPSampler(seed=seed, **knobs)
