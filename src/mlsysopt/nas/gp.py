"""EPNAS's online predictor: a Gaussian process on the architecture encoding, with the transfer prior as its mean.

For a target task with ``n`` evaluations so far (targets standardised), the model is

    y(x) = c + β · p̄(x) + g(x) + ε,    g ~ GP(0, τ² · P(x)·P(x') / T  +  s² · exp(−d(x, x') / ℓ)),

where ``P(x)`` are the transfer prior's ``T`` per-task scores of ``x`` (:class:`~mlsysopt.nas.prior.TransferPrior`),
``p̄`` their mean, and ``d`` the number of decisions two architectures differ in (a Hamming distance on
``space.encode``). The linear kernel over ``P`` is Bayesian linear regression on the source tasks' scores with its
prior mean at "every task alike": with few evaluations the prediction is the prior's average, and as evaluations
come in the tasks that explain them get more weight -- the pretrained predictor is *fine-tuned* on the target. The
Hamming kernel learns what no source task knew (the residual), locally around what was evaluated.
``c`` and ``β >= 0`` are fitted by generalised least squares, and ``τ², s², ℓ`` and the noise ``σ²`` by marginal
likelihood over a small grid, at every fit. Without a prior the model is the plain GP (``τ = β = 0``): cold EPNAS.
A fit on 100 evaluations and a prediction for 1,000 candidates take a few milliseconds (numpy, no torch).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlsysopt.nas.online import OnlineData

PRIOR_VARS = (0.3, 1.0)  # τ²: weight-variance of the per-task linear kernel
RESIDUAL_VARS = (0.3, 1.0)  # s²: variance of the Hamming-kernel residual
LENGTHS = (0.2, 0.4, 0.8)  # ℓ as a fraction of the number of decisions
NOISES = (0.05, 0.2, 0.5)  # σ²


@dataclass
class _Fit:
    """One fitted model: hyperparameters, mean coefficients and the Cholesky factor of the training kernel."""

    tau2: float
    s2: float
    ell: float
    coef: np.ndarray  # [c, β]
    chol: np.ndarray
    alpha: np.ndarray
    loglik: float


class TransferGP:
    """``fit(X, P, y)`` and ``predict_dist(X, P)``: X = encodings ``[n, d]``, P = prior scores ``[n, T]`` or None.

    Args:
        n_decisions: Number of decisions of an architecture; scales the kernel's distance (at least 1 is used).

    Shapes:
        X: (num_archs, num_features) float64 one-hot encodings
        P: (num_archs, num_tasks) float64 prior scores per source task, or None (cold)
        y: (num_archs,) float64 performances, higher is better (non-finite ones are dropped)
    """

    def __init__(self, n_decisions: int) -> None:
        self.n_decisions = max(int(n_decisions), 1)
        self._X: np.ndarray | None = None
        self._P: np.ndarray | None = None
        self._fit: _Fit | None = None
        self._mu, self._sd = 0.0, 1.0

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has seen at least two evaluations."""
        return self._fit is not None

    def _kernel(self, Xa: np.ndarray, Xb: np.ndarray, Pa: np.ndarray | None, Pb: np.ndarray | None,
                tau2: float, s2: float, ell: float) -> np.ndarray:  # fmt: skip
        na, nb = Xa.sum(1), Xb.sum(1)
        d = np.maximum((na[:, None] + nb[None, :]) / 2 - Xa @ Xb.T, 0.0)
        k = s2 * np.exp(-d / (ell * self.n_decisions))
        if Pa is not None and Pb is not None and tau2:
            k = k + tau2 * (Pa @ Pb.T) / Pa.shape[1]
        return k

    def fit(self, X: np.ndarray, P: np.ndarray | None, y: np.ndarray) -> TransferGP:
        """Fit on encodings ``X``, prior scores ``P`` (None: cold) and performances ``y`` (higher is better)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        keep = np.isfinite(y)
        X, y = X[keep], y[keep]
        P = None if P is None else np.asarray(P, dtype=np.float64)[keep]
        if len(y) < 2:
            self._fit = None
            return self
        self._mu, self._sd = float(y.mean()), float(y.std()) or 1.0
        ys = (y - self._mu) / self._sd
        H = np.column_stack([np.ones(len(ys)), P.mean(1) if P is not None else np.zeros(len(ys))])
        taus = PRIOR_VARS if P is not None else (0.0,)
        best: _Fit | None = None
        for tau2, s2, ell, noise in itertools.product(taus, RESIDUAL_VARS, LENGTHS, NOISES):
            K = self._kernel(X, X, P, P, tau2, s2, ell) + (noise + 1e-8) * np.eye(len(ys))
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                continue
            Ki_H = _solve(L, H)
            Ki_y = _solve(L, ys)
            A = H.T @ Ki_H + 1e-6 * np.eye(2)
            coef = np.linalg.solve(A, H.T @ Ki_y)
            coef[1] = max(coef[1], 0.0) if P is not None else 0.0
            r = ys - H @ coef
            alpha = _solve(L, r)
            loglik = float(-0.5 * r @ alpha - np.log(np.diag(L)).sum())
            if best is None or loglik > best.loglik:
                best = _Fit(tau2, s2, ell, coef, L, alpha, loglik)
        self._X, self._P, self._fit = X, P, best
        return self

    def predict_dist(self, X: np.ndarray, P: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation per row, in the targets' units (zeros before a fit)."""
        X = np.asarray(X, dtype=np.float64)
        f = self._fit
        if f is None or self._X is None:
            base = np.zeros(len(X)) if P is None else np.asarray(P, dtype=np.float64).mean(1)
            return base, np.ones(len(X))
        Pn = None if P is None or self._P is None else np.asarray(P, dtype=np.float64)
        Ks = self._kernel(X, self._X, Pn, self._P, f.tau2, f.s2, f.ell)
        prior_mean = f.coef[0] + f.coef[1] * (Pn.mean(1) if Pn is not None else 0.0)
        mean = prior_mean + Ks @ f.alpha
        v = np.linalg.solve(f.chol, Ks.T)
        kss = f.s2 + (f.tau2 * (Pn * Pn).sum(1) / Pn.shape[1] if Pn is not None and f.tau2 else 0.0)
        var = np.maximum(kss - (v * v).sum(0), 1e-12)
        return mean * self._sd + self._mu, np.sqrt(var) * self._sd


def _solve(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``K⁻¹ b`` from the Cholesky factor ``L`` of ``K``."""
    return np.linalg.solve(L.T, np.linalg.solve(L, b))


class OnlineGP(OnlineData):
    """:class:`TransferGP` refit on a search's growing ``(architecture, reward)`` data (the interface of
    :class:`~mlsysopt.nas.predictor.OnlinePredictor`, so EPNAS ranks with either).

    Before two evaluations (or below ``warmup``) it is not fitted; with a prior it still ranks, by the prior's mean
    score (``ranks_unfitted``). It is a pure function of its data (and the prior), so its state is the data.

    Args:
        space: encodes the architectures (``space.encode``).
        scorer: the prior's scores (:class:`~mlsysopt.nas.prior.PriorScorer`), or None for a cold GP.
        warmup: fewer data points than this never trigger a fit.
    """

    def __init__(self, space: Any, scorer: Any = None, warmup: int = 2) -> None:
        super().__init__()
        self.space, self.scorer, self.warmup = space, scorer, max(int(warmup), 2)
        self.gp = TransferGP(len(space.decisions(space.max_blocks)))
        self._enc: dict[Any, np.ndarray] = {}

    @property
    def fitted(self) -> bool:
        """Whether the GP has been fit."""
        return self.gp.fitted

    @property
    def ranks_unfitted(self) -> bool:
        """Whether it can rank before any fit (it has a prior)."""
        return self.scorer is not None

    def refit(self) -> None:
        """Refit on all the data once there is ``warmup`` of it (a fit costs milliseconds: every time)."""
        if len(self.data) >= self.warmup:
            self._fit(len(self.data))

    def _fit(self, n: int) -> None:
        if n >= 2:
            archs = [a for a, _ in self.data[:n]]
            self.gp.fit(self._encode(archs), self._prior(archs), np.array([r for _, r in self.data[:n]]))
            self.fitted_n = n

    def _encode(self, archs: list[Any]) -> np.ndarray:
        for a in archs:
            if a not in self._enc:
                self._enc[a] = self.space.encode(a).astype(np.float64)
        return np.stack([self._enc[a] for a in archs]) if archs else np.zeros((0, self.space.encode_length()))

    def _prior(self, archs: list[Any]) -> np.ndarray | None:
        return None if self.scorer is None else self.scorer.features(archs)

    def predict_dist(self, archs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Predicted mean and standard deviation of each architecture."""
        archs = list(archs)
        return self.gp.predict_dist(self._encode(archs), self._prior(archs))

    def predict(self, archs: Any) -> np.ndarray:
        """Predicted performance of each architecture."""
        return self.predict_dist(archs)[0]
