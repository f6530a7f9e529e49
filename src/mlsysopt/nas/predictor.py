"""Performance predictor: an ensemble of small MLPs on ``space.encode(arch)``, trained online to *rank* candidates.

A search only needs the order of the candidates it is about to evaluate, so the loss is MSE on standardised
targets plus a pairwise logistic ranking loss (RankNet) over every pair of training points; the members differ only
in their initialisation (a deep ensemble), which gives a spread for optimistic (UCB-style) ranking. The ensemble is
one batched network (weights ``[members, in, hidden]``), trained on one thread (these tensors are too small for
more), so a refit on a hundred points takes tens of milliseconds.
Every ``fit`` restarts from the same seed: the predictor is a pure function of its data, which makes resuming a
search exact without storing weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.nas.knobs import MAX_MEMBERS, MAX_PRED_EPOCHS, MAX_WIDTH, knob
from mlsysopt.nas.online import OnlineData
from mlsysopt.nas.spaces.base import Arch, SearchSpace
from mlsysopt.runtime.threads import torch_threads


@dataclass
class PredictorConfig:
    """The predictor knobs EPNAS and PNAS share (their configs inherit them).

    Args:
        members: Predictor ensemble size, 1 to 64.
        pred_hidden: Predictor hidden width, 1 to 4096.
        pred_epochs: Predictor training epochs per fit, 1 to 100000.
        pred_lr: Predictor Adam learning rate, > 0.
        rank_weight: Weight of the pairwise ranking loss next to the MSE, >= 0.
        refit_growth: Refit the predictor once its data grew by this fraction, >= 0.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    members: int = knob(3, 1, MAX_MEMBERS)  # predictor ensemble size
    pred_hidden: int = knob(32, 1, MAX_WIDTH)
    pred_epochs: int = knob(50, 1, MAX_PRED_EPOCHS)
    pred_lr: float = knob(0.03, 0, lo_open=True)
    rank_weight: float = knob(1.0, 0)  # weight of the pairwise ranking loss next to the MSE
    refit_growth: float = knob(0.1, 0)  # refit the predictor once its data grew by this fraction (at least one point)

    def make_predictor(self, seed: int) -> Predictor:
        """A fresh :class:`Predictor` with these knobs."""
        return Predictor(
            self.members, self.pred_hidden, self.pred_epochs, self.pred_lr, rank_weight=self.rank_weight, seed=seed
        )

    def refit_due(self, n: int, fitted_n: int) -> bool:
        """Whether data of ``n`` points grew enough since the last fit on ``fitted_n`` to refit."""
        return n - fitted_n >= max(1, int(self.refit_growth * fitted_n))


class _Ensemble(nn.Module):
    def __init__(self, members: int, d_in: int, hidden: int) -> None:
        super().__init__()

        def w(*shape: int, fan_in: int) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape) * 2 - 1) / fan_in**0.5)

        self.w1, self.b1 = w(members, d_in, hidden, fan_in=d_in), w(members, 1, hidden, fan_in=d_in)
        self.w2, self.b2 = w(members, hidden, hidden, fan_in=hidden), w(members, 1, hidden, fan_in=hidden)
        self.w3, self.b3 = w(members, hidden, 1, fan_in=hidden), w(members, 1, 1, fan_in=hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.baddbmm(self.b1, x.expand(self.w1.shape[0], -1, -1), self.w1))  # [M, N, H]
        h = torch.relu(torch.baddbmm(self.b2, h, self.w2))
        return torch.baddbmm(self.b3, h, self.w3).squeeze(-1)  # [M, N]


class Predictor:
    """Ensemble MLP regressor with a ranking-aware loss: ``fit(X, y)``, ``predict(X)``, ``predict_dist(X)``.

    Args:
        members: Ensemble size (independently initialized MLPs), >= 1.
        hidden: Width of both hidden layers.
        epochs: Full-batch Adam steps per :meth:`fit`.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        rank_weight: Weight of the pairwise ranking loss next to the MSE (0: MSE only).
        seed: Seed of the weight initialization.

    Shapes:
        X: (num_archs, num_features) float32 encodings (``fit`` and ``predict``)
        y: (num_archs,) float64 targets, higher is better (non-finite ones are dropped)
    """

    def __init__(
        self,
        members: int = 3,
        hidden: int = 32,
        epochs: int = 50,
        lr: float = 0.03,
        weight_decay: float = 1e-4,
        rank_weight: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.members, self.hidden, self.epochs = members, hidden, epochs
        self.lr, self.weight_decay, self.rank_weight, self.seed = lr, weight_decay, rank_weight, seed
        self._net: _Ensemble | None = None
        self._mu, self._sd = 0.0, 1.0

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has been called on at least two points."""
        return self._net is not None

    def fit(self, X: np.ndarray, y: np.ndarray) -> Predictor:
        """Train from scratch on ``X [N, d]`` and targets ``y [N]`` (higher is better); needs N >= 2."""
        with torch_threads(1):
            return self._fit(X, y)

    def _fit(self, X: np.ndarray, y: np.ndarray) -> Predictor:
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float64)
        keep = np.isfinite(y)
        X, y = X[keep], y[keep]
        if len(y) < 2:
            self._net = None
            return self
        self._mu, self._sd = float(y.mean()), float(y.std()) or 1.0
        xt = torch.from_numpy(X)
        yt = torch.from_numpy(((y - self._mu) / self._sd).astype(np.float32))
        better = (yt[:, None] > yt[None, :]).float()  # pair (i, j) where i should rank above j
        n_pairs = float(better.sum()) or 1.0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = _Ensemble(self.members, X.shape[1], self.hidden)
        # fused: one kernel for every parameter; with these tiny tensors the per-step overhead is the fit's cost
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay, fused=True)
        for _ in range(self.epochs):
            pred = net(xt)  # [M, N]
            loss = ((pred - yt) ** 2).mean()
            if self.rank_weight:
                diff = pred[:, :, None] - pred[:, None, :]
                loss = loss + self.rank_weight * (nn.functional.softplus(-diff) * better).sum() / (
                    n_pairs * self.members
                )
            opt.zero_grad()
            loss.backward()
            opt.step()
        self._net = net.eval()
        return self

    def predict_dist(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ensemble mean and standard deviation per row, in the targets' units (zeros before any fit)."""
        X = np.asarray(X, dtype=np.float32)
        if self._net is None:
            return np.zeros(len(X)), np.zeros(len(X))
        with torch.no_grad(), torch_threads(1):
            p = self._net(torch.from_numpy(X)).double().numpy() * self._sd + self._mu
        return p.mean(0), p.std(0)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted performance per row (ensemble mean)."""
        return self.predict_dist(X)[0]

    def config(self) -> dict[str, Any]:
        """The constructor arguments."""
        return {
            "members": self.members,
            "hidden": self.hidden,
            "epochs": self.epochs,
            "lr": self.lr,
            "weight_decay": self.weight_decay,
            "rank_weight": self.rank_weight,
            "seed": self.seed,
        }


class OnlinePredictor(OnlineData):
    """A :class:`Predictor` refit on a search's growing ``(architecture, reward)`` data: how EPNAS and PNAS rank.

    The predictor is a pure function of its data, so its state is the data and the number of points it was last
    fit on; :meth:`load_state_dict` refits on exactly those points.

    Args:
        space: encodes the architectures (``space.encode``).
        cfg: the predictor knobs (``refit_growth`` says when to refit).
        seed: the predictor's seed.
        warmup: fewer data points than this (and than 2) never trigger a refit.
    """

    def __init__(self, space: SearchSpace, cfg: PredictorConfig, seed: int, warmup: int = 2) -> None:
        super().__init__()
        self.space, self.cfg, self.warmup = space, cfg, max(warmup, 2)
        self.model = cfg.make_predictor(seed)

    @property
    def fitted(self) -> bool:
        """Whether the model has been fit."""
        return self.model.fitted

    @property
    def ranks_unfitted(self) -> bool:
        """Whether it can rank before a fit (no: it has no prior)."""
        return False

    def refit(self) -> None:
        """Refit on all the data once there is ``warmup`` of it and it grew by ``refit_growth`` since the last fit."""
        n = len(self.data)
        if n >= self.warmup and self.cfg.refit_due(n, self.fitted_n):
            self._fit(n)

    def fit_first(self, n: int) -> None:
        """Fit now on the first ``n`` points (fewer than 2: nothing), whatever ``refit_growth`` says (a method with
        its own schedule, e.g. BANANAS' every k points)."""
        self._fit(n)

    def _fit(self, n: int) -> None:
        if n >= 2:
            X = np.stack([self.space.encode(a) for a, _ in self.data[:n]])
            self.model.fit(X, np.array([r for _, r in self.data[:n]]))
            self.fitted_n = n

    def predict_dist(self, archs: Sequence[Arch]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted mean and ensemble spread of each architecture."""
        return self.model.predict_dist(np.stack([self.space.encode(a) for a in archs]))

    def predict(self, archs: Sequence[Arch]) -> np.ndarray:
        """Predicted performance of each architecture (ensemble mean)."""
        return self.predict_dist(archs)[0]
