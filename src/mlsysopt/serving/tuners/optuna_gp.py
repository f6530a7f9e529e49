"""Optuna's Gaussian-process sampler over the ordinal knob indices."""

from __future__ import annotations

import optuna

from mlsysopt.serving.tuners._optuna import OptunaTuner


class OptunaGP(OptunaTuner):
    """Bayesian optimisation with Optuna's ``GPSampler`` (default settings, seeded).

    Args:
        space, objective, seed, prior, warm_trials, max_retries: as
            :class:`~mlsysopt.serving.tuners._optuna.OptunaTuner`.
        **sampler_knobs: Passed to Optuna's ``GPSampler``.
    """

    name = "gp"

    def make_sampler(self, seed: int, **knobs: object) -> optuna.samplers.BaseSampler:
        """A seeded ``GPSampler``; ``knobs`` are passed through (e.g. ``n_startup_trials``)."""
        return optuna.samplers.GPSampler(seed=seed, **knobs)
