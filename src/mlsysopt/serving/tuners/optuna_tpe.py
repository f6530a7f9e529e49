"""Optuna's Tree-structured Parzen Estimator over the ordinal knob indices."""

from __future__ import annotations

import optuna

from mlsysopt.serving.tuners._optuna import OptunaTuner


class OptunaTPE(OptunaTuner):
    """Bayesian optimisation with Optuna's ``TPESampler`` (default settings, seeded).

    Args:
        space, objective, seed, prior, warm_trials, max_retries: as
            :class:`~mlsysopt.serving.tuners._optuna.OptunaTuner`.
        **sampler_knobs: Passed to Optuna's ``TPESampler``.
    """

    name = "tpe"

    def make_sampler(self, seed: int, **knobs: object) -> optuna.samplers.BaseSampler:
        """A seeded ``TPESampler``; ``knobs`` are passed through (e.g. ``multivariate=True``)."""
        return optuna.samplers.TPESampler(seed=seed, **knobs)
