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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import SCORE_CAP, Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners.base import Exploration, Tuner, boltzmann, knobs_from

LOG_MS = (math.log(1e-3), math.log(1e6))  # estimator targets are clipped to 1 us .. 1000 s


@dataclass(frozen=True)
class RRLConfig(Exploration):
    """RRL's knobs: the temperature schedule of :class:`Exploration` and these (the defaults and why: module doc)."""

    radius: float = 1.0  # region radius in normalized space (the paper: distance 3 on a 0..10 grid, i.e. 0.3)
    alpha: float = 0.3  # step of Q toward the estimate inside the region (the paper's 0.3)
    hidden: tuple[int, ...] = (64, 32)  # estimator hidden layers (the paper: 256, 64)
    steps_per_tell: int = 40  # Adam steps on all samples after each measurement (warm-started)
    lr: float = 0.01  # Adam learning rate
    huber_delta: float = 0.5  # Huber loss threshold in log-ms
    remeasure: int = 2  # times one configuration may be re-measured because a newcomer's lead was within the noise
    weight_floor: float = 0.02  # relative interval half-width below which samples weigh the same

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        super().__post_init__()

    def invalid(self) -> list[str]:
        """The knobs out of range, as ``name=value``."""
        positive = ("radius", "lr", "huber_delta", "steps_per_tell", "weight_floor")
        bad = [*super().invalid(), *(f"{k}={getattr(self, k)}" for k in positive if not getattr(self, k) > 0)]
        if self.remeasure < 0:
            bad.append(f"remeasure={self.remeasure} (need >= 0)")
        if not 0 < self.alpha <= 1:
            bad.append(f"alpha={self.alpha} (need 0 < alpha <= 1)")
        if not self.hidden or min(self.hidden) < 1:
            bad.append(f"hidden={self.hidden}")
        return bad


class LatencyEstimator:
    """An MLP (workload features + normalized config) -> (log stat_ms, log p99_ms), refit after every sample."""

    def __init__(self, n_workload: int, n_config: int, cfg: RRLConfig, seed: int) -> None:
        import torch

        self.n_workload = n_workload
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers: list[torch.nn.Module] = []
            width = n_workload + n_config
            for h in cfg.hidden:
                layers += [torch.nn.Linear(width, h), torch.nn.SiLU()]
                width = h
            layers.append(torch.nn.Linear(width, 2))
            self.net = torch.nn.Sequential(*layers)
            # Zero weights on the workload inputs: an unseen workload is first predicted like the seen ones rather
            # than by a random extrapolation; they learn as soon as two workloads have been measured.
            torch.nn.init.zeros_(self.net[0].weight[:, :n_workload])
        try:  # the fused kernel is ~3x faster on these tiny tensors (torch >= 2.4 on CPU)
            self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, fused=True)
        except (RuntimeError, TypeError):
            self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.loss = torch.nn.HuberLoss(delta=cfg.huber_delta, reduction="none")
        self.steps = cfg.steps_per_tell
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        self.w: list[float] = []
        self.y_ref: np.ndarray | None = None  # the first sample's targets: the net predicts the offset from them

    @property
    def trained(self) -> bool:
        """Whether it has seen at least one sample."""
        return bool(self.x)

    def add(self, x: np.ndarray, stat_ms: float, p99_ms: float, weight: float = 1.0) -> None:
        """Record one sample (targets are clipped logs) with a weight (its inverse squared relative interval)."""
        y = np.log(np.maximum(np.nan_to_num([stat_ms, p99_ms], nan=np.inf), 1e-300))
        y = np.clip(y, *LOG_MS)
        if self.y_ref is None:
            self.y_ref = y
        self.x.append(np.asarray(x, dtype=np.float32))
        self.y.append((y - self.y_ref).astype(np.float32))
        self.w.append(float(weight))

    def fit(self) -> None:
        """A few full-batch Adam steps on every sample so far, continuing from the previous weights."""
        import torch

        with torch_threads(1):
            x = torch.from_numpy(np.stack(self.x))
            y = torch.from_numpy(np.stack(self.y))
            w = torch.tensor(self.w, dtype=torch.float32)
            w = (w / w.mean()).unsqueeze(1)
            for _ in range(self.steps):
                self.opt.zero_grad()
                (self.loss(self.net(x), y) * w).mean().backward()
                self.opt.step()

    def predict_ms(self, x: np.ndarray) -> np.ndarray:
        """(n, 2) predicted (stat_ms, p99_ms) for the (n, features) inputs ``x``."""
        import torch

        with torch_threads(1), torch.no_grad():
            out = self.net(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy().astype(np.float64)
        return np.exp(np.clip(out + self.y_ref, *LOG_MS))


class RRL(Tuner):
    """Region-based RL: a value table over every configuration, pulled toward a learned estimate region by region."""

    name = "rrl"

    def __init__(self, space: Space, objective: Objective, seed: int = 0, **knobs: object) -> None:
        super().__init__(space, objective, seed)
        self.knobs = knobs_from(RRLConfig, knobs, "rrl")
        self.q: np.ndarray | None = None  # estimated score per configuration (None before the first measurement)
        self.steps = 0  # measurements under the current workload (drives the temperature)
        self.retuning = False  # whether Q started from the estimator (after a workload change)
        self.estimator = LatencyEstimator(len(Workload(1.0).features()), space.coords.shape[1], self.knobs, seed)
        self._workload_ref: np.ndarray | None = None  # features of the first workload, to centre the inputs
        self._config_inputs = 2.0 * space.coords - 1.0
        self._recheck: Config | None = None  # an incumbent to re-measure next (a newcomer's lead within the noise)
        self._remeasured: dict[Config, int] = {}

    # ------------------------------------------------------------------ estimator inputs and estimates
    def _inputs(self, workload: Workload, idx: np.ndarray) -> np.ndarray:
        feats = workload.features()
        if self._workload_ref is None:
            self._workload_ref = feats
        w = np.broadcast_to(feats - self._workload_ref, (len(idx), feats.size))
        return np.hstack([w, self._config_inputs[idx]])

    def estimate(self, idx: np.ndarray) -> np.ndarray:
        """The estimator's scores of configurations ``idx`` under the current workload."""
        pred = self.estimator.predict_ms(self._inputs(self.workload, idx))  # (objective quantity, p99 ms)
        scores = [
            self.objective.score_from(self.space.config(int(i)), s, p) for i, (s, p) in zip(idx, pred, strict=True)
        ]
        return np.minimum(np.array(scores, dtype=np.float64), SCORE_CAP)

    # ------------------------------------------------------------------ ask / tell
    def temperature(self) -> float:
        """The current Boltzmann temperature."""
        return self.knobs.temperature(self.steps, self.retuning)

    def ask(self) -> Config:
        """The middle configuration first; an incumbent whose lead is within the noise; else Boltzmann over Q."""
        if self.q is None:
            return self.space.middle()
        if self._recheck is not None:
            config, self._recheck = self._recheck, None
            self._remeasured[config] = self._remeasured.get(config, 0) + 1
            return config
        candidates = self.unmeasured()
        if candidates.size == 0:
            return self.best  # type: ignore[return-value]
        return self.space.config(boltzmann(self.q, candidates, self.temperature(), self.rng))

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
        i = self.space.index(config)
        score = self.objective.capped_score(self.measured[config])
        self.estimator.add(
            self._inputs(measurement.workload, np.array([i]))[0],
            self.objective.primary(measurement),
            measurement.p99_ms,
            self._weight(measurement),
        )
        self.estimator.fit()
        if (
            incumbent is not None
            and incumbent != config
            and self._remeasured.get(incumbent, 0) < self.knobs.remeasure
            and self._lead_within_noise(config, incumbent)
        ):
            self._recheck = incumbent
        if self.q is None:
            self.q = np.full(self.space.size, score)
        region = self.space.region(config, self.knobs.radius)
        self.q[region] = (1.0 - self.knobs.alpha) * self.q[region] + self.knobs.alpha * self.estimate(region)
        self._pin_measured()
        self.steps += 1

    def warm_start(self, histories: list[dict]) -> int:
        """Pretrain the latency estimator on earlier runs' measurements (the store's history records, each
        ``Measurement.to_dict()``) of configurations in this space, under their own workloads; returns how many it
        used. Nothing counts as measured in this run: Q and the exploration start as before, the estimates differ."""
        from mlsysopt.errors import MlsysoptError

        used = 0
        for h in histories:
            for rec in h.get("records", []):
                try:
                    m = Measurement.from_dict(rec)
                    i = self.space.index(m.config)
                except (MlsysoptError, KeyError, TypeError, ValueError):
                    continue  # another space's configuration, or not a measurement
                if not math.isfinite(self.objective.primary(m)):
                    continue
                x = self._inputs(m.workload, np.array([i]))[0]
                self.estimator.add(x, self.objective.primary(m), m.p99_ms, self._weight(m))
                used += 1
        if used:
            self.estimator.fit()
        return used

    def _pin_measured(self) -> None:
        # a measured score (every measurement of it merged) beats any estimate of it
        for c, m in self.measured.items():
            self.q[self.space.index(c)] = self.objective.capped_score(m)  # type: ignore[index]

    def set_workload(self, workload: Workload) -> None:
        """Forget which configurations were measured, keep the estimator, and re-initialise Q from its predictions."""
        changed = self.workload is not None and workload != self.workload
        if changed:
            self._recheck, self._remeasured = None, {}
        super().set_workload(workload)
        if changed and self.estimator.trained:
            self.q = self.estimate(np.arange(self.space.size))
            self.steps, self.retuning = 0, True
