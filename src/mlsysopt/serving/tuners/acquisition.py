"""Expected improvement over a prior: a Gaussian process on the prior's residuals (RRL's ``acquisition="ei"``).

The prior (:class:`~mlsysopt.serving.prior.TaskPrior`, learned on other models) is the GP's mean function: a
scikit-learn ``GaussianProcessRegressor`` (Matern 5/2 with one length scale per input, plus white noise) learns
``log(measured score) - log(prior's score)`` over (workload features, normalized configuration). Where nothing was
measured the prediction *is* the prior and the GP's standard deviation is its prior amplitude; near a measurement it
follows the measurement. The next configuration maximizes expected improvement (minimization, in log score) over
the best measured under the current workload: the prior decides where to look first, the residuals where the prior
was wrong (and, through the workload inputs, carry over to a new rate).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from mlsysopt.serving.space import Space, Workload

_LOG_FLOOR = 1e-12


class ResidualGP:
    """A GP on ``log(score) - log(prior score)`` over workload features and normalized configuration coordinates.

    Args:
        space: The configurations (their normalized coordinates are the inputs).
        seed: Seed of the optimizer's restarts.
    """

    def __init__(self, space: Space, seed: int = 0) -> None:
        self.space, self.seed = space, seed
        self.x: list[np.ndarray] = []
        self.y: list[float] = []
        self.model: object | None = None
        self._ref: np.ndarray | None = None  # features of the first workload: inputs are offsets from it

    def inputs(self, workload: Workload, idx: np.ndarray) -> np.ndarray:
        """GP inputs of configurations ``idx`` under ``workload``: (workload offset, normalized coordinates).

        Args:
            workload: The workload.
            idx: Configuration indices.

        Returns:
            np.ndarray: (len(idx), n_workload + n_knobs) inputs.
        """
        feats = workload.features()
        if self._ref is None:
            self._ref = feats
        w = np.broadcast_to(feats - self._ref, (len(idx), feats.size))
        return np.hstack([w, self.space.coords[idx]])

    def add(self, workload: Workload, index: int, score: float, prior_score: float) -> None:
        """Record one measured score beside the prior's score of the same configuration (both > 0 after a floor).

        Args:
            workload: The workload it was measured under.
            index: The configuration's index.
            score: Measured score (lower is better).
            prior_score: The prior's score of that configuration under ``workload``.
        """
        self.x.append(self.inputs(workload, np.array([index]))[0])
        self.y.append(math.log(max(score, _LOG_FLOOR)) - math.log(max(prior_score, _LOG_FLOOR)))
        self.model = None

    def _fit(self) -> object:
        from sklearn.exceptions import ConvergenceWarning  # deferred: sklearn, fit only
        from sklearn.gaussian_process import GaussianProcessRegressor  # deferred: sklearn, fit only
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel  # deferred: sklearn, fit only

        dims = len(self.x[0])
        kernel = ConstantKernel(0.25, (1e-3, 1e2)) * Matern(
            length_scale=np.full(dims, 0.5), length_scale_bounds=(0.05, 20.0), nu=2.5
        ) + WhiteKernel(1e-3, (1e-6, 1e-1))
        gp = GaussianProcessRegressor(kernel=kernel, normalize_y=False, random_state=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(np.stack(self.x), np.asarray(self.y))
        return gp

    def predict(self, workload: Workload, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Residual mean and standard deviation of configurations ``idx`` under ``workload`` (zeros before data).

        Args:
            workload: The workload.
            idx: Configuration indices.

        Returns:
            tuple[np.ndarray, np.ndarray]: (mean, std) of the log residual, each of length ``len(idx)``.
        """
        if not self.y:
            return np.zeros(len(idx)), np.full(len(idx), 0.5)
        if self.model is None:
            self.model = self._fit()
        mean, std = self.model.predict(self.inputs(workload, idx), return_std=True)  # type: ignore[attr-defined]
        return np.asarray(mean, dtype=np.float64), np.maximum(np.asarray(std, dtype=np.float64), 1e-9)


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """Expected improvement below ``best`` of Gaussian predictions (minimization).

    Args:
        mean: Predicted means.
        std: Predicted standard deviations (> 0).
        best: The best (lowest) value observed.

    Returns:
        np.ndarray: EI per prediction (>= 0).
    """
    from scipy.stats import norm  # deferred: scipy loads only for expected improvement

    z = (best - mean) / std
    return std * (z * norm.cdf(z) + norm.pdf(z))
