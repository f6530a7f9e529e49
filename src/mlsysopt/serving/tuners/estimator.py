"""RRL's estimators: what it learns from each measurement and how it scores configurations it has not measured.

* :class:`LatencyEstimator` — the paper's: an MLP (workload features + normalized configuration) -> (log of the
  objective's quantity, log p99), refit on every sample after every measurement. Knows nothing before the first.
* :class:`PriorEstimator` — RRL that learns across models: a :class:`~mlsysopt.serving.prior.TaskPrior` (pretrained
  on other models' histories) as its base, plus a residual MLP fitted on this task's measurements (its last layer
  starts at zero, so before the first measurement the estimate *is* the prior; each sample then corrects it where
  the new model differs). Scores for every objective come from corrected latency predictions
  (:func:`~mlsysopt.serving.prior.objective_scores`).

Both take ``add(config, measurement, weight)``, ``fit()`` and ``scores(idx, workload)``; targets are logs, clipped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import SCORE_CAP, Objective
from mlsysopt.serving.prior import STATS, objective_scores
from mlsysopt.serving.space import Config, Space, Workload

if TYPE_CHECKING:
    from mlsysopt.serving.prior import TaskPrior


class RRLConfig(Protocol):
    """The knobs of :class:`~mlsysopt.serving.tuners.rrl.RRLConfig` an estimator reads (RRL builds estimators)."""

    hidden: tuple[int, ...]
    steps_per_tell: int
    lr: float
    huber_delta: float


LOG_MS = (math.log(1e-3), math.log(1e6))  # estimator targets are clipped to 1 us .. 1000 s


class _MLP:
    """A small MLP refit by a few full-batch Adam steps after every sample (weights carried over)."""

    def __init__(self, n_in: int, n_workload: int, cfg: RRLConfig, seed: int, zero_out: bool = False) -> None:
        import torch  # deferred: torch loads only when the estimator is built

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers: list[torch.nn.Module] = []
            width = n_in
            for h in cfg.hidden:
                layers += [torch.nn.Linear(width, h), torch.nn.SiLU()]
                width = h
            layers.append(torch.nn.Linear(width, 2))
            self.net = torch.nn.Sequential(*layers)
            # Zero weights on the workload inputs: an unseen workload is first predicted like the seen ones rather
            # than by a random extrapolation; they learn as soon as two workloads have been measured.
            torch.nn.init.zeros_(self.net[0].weight[:, :n_workload])
            if zero_out:  # a residual: predicts no correction until it has learned one
                torch.nn.init.zeros_(self.net[-1].weight)
                torch.nn.init.zeros_(self.net[-1].bias)
        try:  # the fused kernel is ~3x faster on these tiny tensors (torch >= 2.4 on CPU)
            self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, fused=True)
        except (RuntimeError, TypeError):
            self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.loss = torch.nn.HuberLoss(delta=cfg.huber_delta, reduction="none")
        self.steps = cfg.steps_per_tell
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        self.w: list[float] = []

    def add(self, x: np.ndarray, y: np.ndarray, weight: float) -> None:
        self.x.append(np.asarray(x, dtype=np.float32))
        self.y.append(np.asarray(y, dtype=np.float32))
        self.w.append(float(weight))

    def fit(self) -> None:
        import torch  # deferred: torch loads only when the estimator is built

        with torch_threads(1):
            x = torch.from_numpy(np.stack(self.x))
            y = torch.from_numpy(np.stack(self.y))
            w = torch.tensor(self.w, dtype=torch.float32)
            w = (w / w.mean()).unsqueeze(1)
            for _ in range(self.steps):
                self.opt.zero_grad()
                (self.loss(self.net(x), y) * w).mean().backward()
                self.opt.step()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        import torch  # deferred: torch loads only when the estimator is built

        with torch_threads(1), torch.no_grad():
            return self.net(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy().astype(np.float64)


def _log_targets(a: float, b: float) -> np.ndarray:
    y = np.log(np.maximum(np.nan_to_num([a, b], nan=np.inf), 1e-300))
    return np.clip(y, *LOG_MS)


class LatencyEstimator:
    """The paper's estimator: (workload features + normalized config) -> (log objective quantity, log p99)."""

    def __init__(self, space: Space, objective: Objective, cfg: RRLConfig, seed: int) -> None:
        self.space, self.objective = space, objective
        self.n_workload = len(Workload(1.0).features())
        self.mlp = _MLP(self.n_workload + space.coords.shape[1], self.n_workload, cfg, seed)
        self._config_inputs = 2.0 * space.coords - 1.0
        self._workload_ref: np.ndarray | None = None  # features of the first workload, to centre the inputs
        self.y_ref: np.ndarray | None = None  # the first sample's targets: the net predicts the offset from them

    @property
    def trained(self) -> bool:
        """Whether it has seen at least one sample."""
        return bool(self.mlp.x)

    @property
    def n_samples(self) -> int:
        """Samples it has learned from."""
        return len(self.mlp.x)

    def inputs(self, workload: Workload, idx: np.ndarray) -> np.ndarray:
        """Network inputs of configurations ``idx`` under ``workload``."""
        feats = workload.features()
        if self._workload_ref is None:
            self._workload_ref = feats
        w = np.broadcast_to(feats - self._workload_ref, (len(idx), feats.size))
        return np.hstack([w, self._config_inputs[idx]])

    def add(self, config: Config, m: Measurement, weight: float = 1.0) -> None:
        """Record one sample: the objective's quantity and p99 of ``m`` (clipped logs), with a weight."""
        y = _log_targets(self.objective.primary(m), m.p99_ms)
        if self.y_ref is None:
            self.y_ref = y
        self.mlp.add(self.inputs(m.workload, np.array([self.space.index(config)]))[0], y - self.y_ref, weight)

    def fit(self) -> None:
        """A few full-batch Adam steps on every sample so far."""
        self.mlp.fit()

    def predict_ms(self, x: np.ndarray) -> np.ndarray:
        """(n, 2) predicted (objective quantity, p99 ms) for network inputs ``x``."""
        return np.exp(np.clip(self.mlp(x) + self.y_ref, *LOG_MS))

    def scores(self, idx: np.ndarray, workload: Workload) -> np.ndarray:
        """Estimated scores of configurations ``idx`` under ``workload``."""
        pred = self.predict_ms(self.inputs(workload, idx))
        scores = [
            self.objective.score_from(self.space.config(int(i)), s, p) for i, (s, p) in zip(idx, pred, strict=True)
        ]
        return np.minimum(np.array(scores, dtype=np.float64), SCORE_CAP)


class PriorEstimator:
    """A prior from other models, corrected by a residual MLP fitted on this task's measurements."""

    def __init__(self, prior: TaskPrior, space: Space, objective: Objective, cfg: RRLConfig, seed: int) -> None:

        self.prior, self.space, self.objective = prior, space, objective
        self.stat = STATS.index(objective.stat)
        self.n_workload = len(Workload(1.0).features())
        self.mlp = _MLP(self.n_workload + space.coords.shape[1], self.n_workload, cfg, seed, zero_out=True)
        self._config_inputs = 2.0 * space.coords - 1.0
        self._workload_ref: np.ndarray | None = None
        self._base: dict[Workload, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def trained(self) -> bool:
        """Always: the prior knows every configuration before the first measurement."""
        return True

    @property
    def n_samples(self) -> int:
        """Samples of this task the residual has learned from."""
        return len(self.mlp.x)

    def _inputs(self, workload: Workload, idx: np.ndarray) -> np.ndarray:
        feats = workload.features()
        if self._workload_ref is None:
            self._workload_ref = feats
        w = np.broadcast_to(feats - self._workload_ref, (len(idx), feats.size))
        return np.hstack([w, self._config_inputs[idx]])

    def base(self, workload: Workload) -> tuple[np.ndarray, np.ndarray]:
        """The prior's (n, 4) latencies and (n,) saturation probabilities of every configuration (cached)."""
        if workload not in self._base:
            if len(self._base) > 64:
                self._base.clear()
            self._base[workload] = self.prior.predict(self.space.configs(), workload)
        return self._base[workload]

    def _corrected(self, idx: np.ndarray, workload: Workload) -> tuple[np.ndarray, np.ndarray]:
        lat, sat = self.base(workload)
        lat, sat = lat[idx].copy(), sat[idx]
        delta = self.mlp(self._inputs(workload, idx))
        lat[:, self.stat] *= np.exp(np.clip(delta[:, 0], -20, 20))
        lat[:, 3] = lat[:, 3] * np.exp(np.clip(delta[:, 1], -20, 20)) if self.stat != 3 else lat[:, 3]
        return lat, sat

    def add(self, config: Config, m: Measurement, weight: float = 1.0) -> None:
        """Record one sample: how far the measured latency (at the rate it was measured at) is from the prior's."""
        rate = m.extra.get("at_rate", m.workload.rate) if isinstance(m.extra, dict) else m.workload.rate
        at = Workload(float(rate), m.workload.request_size)
        i = self.space.index(config)
        lat, _ = self.base(at)
        measured = _log_targets(m.stat(self.objective.stat), m.p99_ms)
        predicted = np.log(np.maximum([lat[i, self.stat], lat[i, 3]], 1e-300))
        self.mlp.add(self._inputs(at, np.array([i]))[0], measured - predicted, weight)

    def fit(self) -> None:
        """A few full-batch Adam steps of the residual on every sample so far."""
        self.mlp.fit()

    def scores(self, idx: np.ndarray, workload: Workload) -> np.ndarray:
        """Estimated scores of configurations ``idx`` under ``workload`` (the prior, corrected)."""

        configs = [self.space.config(int(i)) for i in idx]
        index = {c: k for k, c in zip(idx, configs, strict=True)}

        def predict(cfgs: Any, w: Workload) -> tuple[np.ndarray, np.ndarray]:
            return self._corrected(np.array([index[c] for c in cfgs], dtype=np.int64), w)

        return np.minimum(objective_scores(predict, configs, workload, self.objective), SCORE_CAP)
