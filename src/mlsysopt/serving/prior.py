"""A prior across models: a latency model pretrained on the measurement histories of other models and workloads.

Morphling (SoCC'21) meta-learns a performance model offline across models and adapts it online; Feurer et al.
warm-start Bayesian optimization from earlier tasks. :class:`Prior` is that offline model for serving: one MLP
from (model features, workload features, configuration features; :mod:`mlsysopt.serving.features`) to the log of
the mean, p50, p95 and p99 latency in units of the model's own single-row time (so that a 0.2 ms MLP and a 30 ms
ResNet share one scale), plus the probability that the configuration saturates. It is fitted on
:class:`~mlsysopt.serving.history.History` records (earlier run folders, or the study store), never on the task
it is then used for.

Bound to a new task's profile (:meth:`Prior.bind`), it predicts every configuration of the task's space and
scores them for any objective: latency directly; ``cost`` as the cores of a configuration whose predicted p99
meets the SLO; ``throughput`` as the highest of a ladder of rates (x sqrt 2 steps up to 128x the workload's) at
which the predicted p99 meets the SLO without saturating. RRL starts from the prior's best and keeps it as its
estimator's base (:mod:`mlsysopt.serving.tuners.estimator`); the Optuna baselines are warm-started with the prior's
top configurations enqueued (:mod:`mlsysopt.serving.tuners._optuna`), the same prior for both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import load_torch, save_torch_atomic
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.features import N_INPUTS, inputs, ref_ms
from mlsysopt.serving.history import History, histories_from_store
from mlsysopt.serving.objective import PENALTY, SCORE_CAP, Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Config, Space, Workload

STATS = ("mean", "p50", "p95", "p99")
LOG_RANGE = (math.log(0.05), math.log(1e4))  # latency targets in units of the model's single-row time
RATE_LADDER = tuple(2.0 ** (j / 2) for j in range(15))  # throughput: rates tried, x1 .. x128 the workload's


@dataclass(frozen=True)
class PriorConfig:
    """The prior's knobs (defaults chosen on the tuning profiles only; see BENCHMARKS.md)."""

    hidden: tuple[int, ...] = (128, 128)
    steps: int = 3000  # Adam steps (minibatches of ``batch``)
    batch: int = 2048
    lr: float = 3e-3
    weight_decay: float = 1e-5
    huber_delta: float = 0.5  # in log units
    saturation_weight: float = 0.3  # weight of the saturation (logistic) loss beside the latency loss
    members: int = 1  # ensemble members (different seeds); predictions average their logs
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [k for k in ("steps", "batch", "members") if getattr(self, k) < 1]
        bad += [k for k in ("lr", "huber_delta") if not getattr(self, k) > 0]
        bad += [k for k in ("weight_decay", "saturation_weight") if not getattr(self, k) >= 0]
        if not self.hidden or min(self.hidden) < 1:
            bad.append("hidden")
        if bad:
            raise MlsysoptError(f"prior: invalid knob value(s) {', '.join(bad)}")


def _samples(history: History) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, saturated) of one history: inputs, log latency ratios (clipped), saturation flags."""
    prof = history.profile
    ref = ref_ms(prof)
    by_workload: dict[Workload, list[Any]] = {}
    for m, rate in history.samples():
        by_workload.setdefault(Workload(rate, m.workload.request_size), []).append(m)
    xs, ys, ss = [], [], []
    for w, ms in by_workload.items():
        xs.append(inputs([m.config for m in ms], w, prof))
        lat = np.array([[m.stat(s) for s in STATS] for m in ms], dtype=np.float64)
        lat = np.nan_to_num(lat, nan=np.inf, posinf=np.inf)
        ys.append(np.clip(np.log(np.maximum(lat / ref, 1e-12)), *LOG_RANGE))
        ss.append(np.array([float(m.saturated) for m in ms]))
    if not xs:
        return np.zeros((0, N_INPUTS)), np.zeros((0, len(STATS))), np.zeros(0)
    return np.vstack(xs), np.vstack(ys), np.concatenate(ss)


class Prior:
    """An MLP ensemble over (model, workload, configuration) features -> latency statistics and saturation.

    Args:
        config: the knobs (:class:`PriorConfig`).
    """

    def __init__(self, config: PriorConfig | None = None) -> None:
        self.config = config or PriorConfig()
        self.nets: list[Any] = []
        self.mean = np.zeros(N_INPUTS)
        self.std = np.ones(N_INPUTS)
        self.meta: dict[str, Any] = {}

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load`) has given it weights."""
        return bool(self.nets)

    def _net(self) -> Any:
        import torch  # deferred: torch loads only when the prior is trained or used

        layers: list[torch.nn.Module] = []
        width = N_INPUTS
        for h in self.config.hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.SiLU()]
            width = h
        layers.append(torch.nn.Linear(width, len(STATS) + 1))
        return torch.nn.Sequential(*layers)

    def fit(self, histories: Sequence[History]) -> Prior:
        """Train on every measurement of ``histories`` (other models' and workloads'); returns ``self``."""
        import torch  # deferred: torch loads only when the prior is trained

        if not histories:
            raise MlsysoptError("a prior needs at least one earlier tuning run (--prior RUN_DIR)")
        parts = [_samples(h) for h in histories]
        x = np.vstack([p[0] for p in parts])
        y = np.vstack([p[1] for p in parts])
        sat = np.concatenate([p[2] for p in parts])
        if len(x) < 1:
            raise MlsysoptError("a prior needs at least one measurement in its histories, got none")
        self.mean = x.mean(axis=0)
        self.std = np.where(x.std(axis=0) > 1e-6, x.std(axis=0), 1.0)
        cfg = self.config
        xt = torch.from_numpy(((x - self.mean) / self.std).astype(np.float32))
        yt = torch.from_numpy(y.astype(np.float32))
        st = torch.from_numpy(sat.astype(np.float32))
        huber = torch.nn.HuberLoss(delta=cfg.huber_delta)
        bce = torch.nn.BCEWithLogitsLoss()
        self.nets, losses = [], []
        with torch_threads(1), torch.random.fork_rng(devices=[]):
            for member in range(cfg.members):
                torch.manual_seed(cfg.seed + 7919 * member)
                gen = torch.Generator().manual_seed(cfg.seed + member)
                net = self._net()
                opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
                sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps)
                for _ in range(cfg.steps):
                    idx = torch.randint(0, len(xt), (min(cfg.batch, len(xt)),), generator=gen)
                    out = net(xt[idx])
                    loss = huber(out[:, : len(STATS)], yt[idx]) + cfg.saturation_weight * bce(out[:, -1], st[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    sched.step()
                net.eval()
                self.nets.append(net)
                with torch.no_grad():
                    losses.append(float(torch.abs(net(xt)[:, 0] - yt[:, 0]).median()))
        self.meta = {
            "tasks": sorted({h.task for h in histories}),
            "histories": len(histories),
            "samples": len(x),
            "train_median_abs_log_error_mean": float(np.mean(losses)),
            "sources": [h.source for h in histories][:50],
        }
        return self

    def predict(
        self, profile: ServiceProfile, workload: Workload, configs: Sequence[Config]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (n, 4) mean/p50/p95/p99 latencies (ms) and (n,) saturation probabilities."""
        import torch  # deferred: torch loads only when the prior predicts

        if not self.fitted:
            raise MlsysoptError("the prior has not been fitted (Prior.fit) or loaded (Prior.load)")
        x = (inputs(configs, workload, profile) - self.mean) / self.std
        with torch_threads(1), torch.no_grad():
            xt = torch.from_numpy(x.astype(np.float32))
            outs = np.stack([net(xt).numpy().astype(np.float64) for net in self.nets])
        log_ratio = np.clip(outs[:, :, : len(STATS)].mean(axis=0), *LOG_RANGE)
        p_sat = 0.5 * (1.0 + np.tanh(0.5 * outs[:, :, -1].mean(axis=0)))  # the logistic, without exp's overflow
        return np.exp(log_ratio) * ref_ms(profile), p_sat

    def bind(self, profile: ServiceProfile) -> TaskPrior:
        """This prior for one task (its model and machine as ``profile`` describes them)."""
        return TaskPrior(self, profile)

    def describe(self) -> dict[str, Any]:
        """What it was fitted on and how well (JSON-ready)."""
        return {"config": asdict(self.config), **self.meta}

    def save(self, path: str | Path) -> Path:
        """Write the prior (weights, input scaling, knobs, what it was fitted on) atomically."""

        state = {
            "format": "mlsysopt-serving-prior-1",
            "config": asdict(self.config),
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "nets": [net.state_dict() for net in self.nets],
            "meta": self.meta,
        }
        return save_torch_atomic(path, state)

    @classmethod
    def load(cls, path: str | Path) -> Prior:
        """Read a prior written by :meth:`save`; one :class:`MlsysoptError` naming the file if it is not one."""

        state = load_torch(path, MlsysoptError)
        if not isinstance(state, dict) or state.get("format") != "mlsysopt-serving-prior-1":
            raise MlsysoptError(f"{path}: not a serving prior written by mlsysopt (Prior.save)")
        try:
            cfg = dict(state["config"])
            cfg["hidden"] = tuple(cfg["hidden"])
            prior = cls(PriorConfig(**cfg))
            prior.mean, prior.std = np.array(state["mean"]), np.array(state["std"])
            if prior.mean.shape != (N_INPUTS,):
                raise ValueError(f"{prior.mean.shape[0]} input features, this version uses {N_INPUTS}")
            for sd in state["nets"]:
                net = prior._net()
                net.load_state_dict(sd)
                net.eval()
                prior.nets.append(net)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise MlsysoptError(f"{path}: not a usable serving prior ({type(exc).__name__}: {exc})") from None
        prior.meta = dict(state.get("meta", {}))
        return prior


@dataclass
class TaskPrior:
    """A :class:`Prior` bound to one task: predictions and objective scores over a space, cached per workload."""

    prior: Prior
    profile: ServiceProfile
    _cache: dict[tuple[int, Workload, Objective], np.ndarray] = field(default_factory=dict, repr=False)

    def predict(self, configs: Sequence[Config], workload: Workload) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (n, 4) latencies (ms) and (n,) saturation probabilities of ``configs`` at ``workload``."""
        return self.prior.predict(self.profile, workload, configs)

    def scores(self, space: Space, workload: Workload, objective: Objective) -> np.ndarray:
        """The predicted score of every configuration of ``space`` (lower is better, capped like measured ones)."""
        key = (id(space), workload, objective)
        if key not in self._cache:
            self._cache[key] = objective_scores(self.predict, space.configs(), workload, objective)
        return self._cache[key]

    def ranked(self, space: Space, workload: Workload, objective: Objective, k: int | None = None) -> list[Config]:
        """The configurations of ``space`` by predicted score, best first (the first ``k``)."""
        order = np.argsort(self.scores(space, workload, objective), kind="stable")
        return [space.config(int(i)) for i in order[: k if k is not None else len(order)]]


def objective_scores(predict: Any, configs: Sequence[Config], workload: Workload, objective: Objective) -> np.ndarray:
    """Scores of ``configs`` from a latency predictor ``predict(configs, workload) -> (ms (n, 4), p_sat (n,))``."""
    stat = STATS.index(objective.stat)
    lat, p_sat = predict(configs, workload)
    if objective.kind == "latency":
        return np.minimum(lat[:, stat], SCORE_CAP)
    slo = float(objective.slo_ms)  # type: ignore[arg-type]
    base = PENALTY + np.minimum(lat[:, 3] / slo, SCORE_CAP)
    if objective.kind == "cost":
        ok = (lat[:, 3] <= slo) & (p_sat < 0.5)
        return np.where(ok, np.array([c.threads for c in configs], dtype=np.float64), base)
    best = np.zeros(len(configs))
    still = np.ones(len(configs), dtype=bool)  # met the SLO at every rate so far (as the rate search climbs)
    for mult in RATE_LADDER:
        rate = min(workload.rate * mult, 1e6)
        lat_r, sat_r = predict(configs, Workload(rate, workload.request_size))
        still &= (lat_r[:, 3] <= slo) & (sat_r < 0.5)
        best = np.where(still, rate, best)
    return np.where(best > 0, 1000.0 / np.maximum(best, 1e-12), base)


def prior_from_store(histories: list[dict]) -> tuple[Prior | None, int]:
    """A prior fitted on the study store's history records (``--warm-start``) and the measurements it used.

    ``None`` when the records hold no usable measurement; an error when every named run measured the real engine,
    whose model profile the store does not keep.
    """
    usable, skipped = histories_from_store(histories)
    if skipped and not usable:
        raise MlsysoptError(
            f"--warm-start: the {skipped} run(s) it names measured the real engine, and the store keeps no model "
            "profile of them; give their run folders with --prior instead (result.json keeps it)"
        )
    used = sum(len(h.measurements) for h in usable)
    return (Prior().fit(usable) if used else None), used


@lru_cache(maxsize=1)
def preset_prior() -> Prior:
    """The shipped prior: fitted on histories of the *tuning* profiles only (never on a held-out one)."""
    path = resources.files("mlsysopt.serving") / "profiles" / "prior.pt"
    if not path.is_file():
        raise InvalidSpace(f"the shipped prior is missing ({path}); benchmarks/serving_profiles.py --prior builds it")
    return Prior.load(str(path))
