"""The tuner interface (``ask`` a configuration, ``tell`` its measurement) and what several tuners share.

Every tuner is built as ``Tuner(space, objective, seed=0, **knobs)``. The driver
(:func:`mlsysopt.serving.tuning.tune`) calls ``ask`` then ``tell`` once per measurement, and ``set_workload`` when
the workload changes; a tuner that learns across workloads keeps what it learned, the others start over.

Shared by RRL and its bandit ablation: Boltzmann exploration over a value table (:func:`boltzmann`) with a
temperature that decays per measurement (:class:`Exploration`), and knobs given as keywords (:func:`knobs_from`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.windows import merge

K = TypeVar("K", bound="Exploration")


class Tuner(ABC):
    """Ask/tell search over a :class:`Space` for the configuration that minimizes an :class:`Objective`.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
    """

    name = "tuner"

    def __init__(self, space: Space, objective: Objective, seed: int = 0) -> None:
        self.space = space
        self.objective = objective
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.workload: Workload | None = None
        # measurements under the current workload, by configuration: every one, and all of them merged
        self.history: dict[Config, list[Measurement]] = {}
        self.measured: dict[Config, Measurement] = {}

    @abstractmethod
    def ask(self) -> Config:
        """The next configuration to measure."""

    def tell(self, config: Config, measurement: Measurement) -> None:
        """Record the measurement of ``config``; a re-measured one is merged with the earlier ones (windows pooled)."""

        self.history.setdefault(config, []).append(measurement)
        self.measured[config] = merge(self.history[config])

    def set_workload(self, workload: Workload) -> None:
        """The workload changed (or is set for the first time): forget measurements made under another one."""
        if self.workload is not None and workload != self.workload:
            self.measured, self.history = {}, {}
        self.workload = workload

    @property
    def best(self) -> Config | None:
        """The measured configuration with the lowest score under the current workload (None before any)."""
        if not self.measured:
            return None
        return min(self.measured, key=lambda c: self.objective.score(self.measured[c]))  # ties: the first measured

    def unmeasured(self) -> np.ndarray:
        """Indices of configurations not yet measured under the current workload."""
        mask = np.ones(self.space.size, dtype=bool)
        for c in self.measured:
            mask[self.space.index(c)] = False
        return np.flatnonzero(mask)


@dataclass(frozen=True)
class Exploration:
    """The Boltzmann temperature schedule: geometric decay per measurement to a floor, restarted on re-tuning.

    The defaults (RRL's, see :mod:`mlsysopt.serving.tuners.rrl`): 0.5 at first (configurations estimated 50%
    worse than the best are e times rarer), x0.7 per measurement, floor 0.01; 0.1 after a workload change.

    Args:
        tau0: Initial Boltzmann temperature (relative to the best estimate), > 0.
        tau_decay: Temperature multiplier per measurement, in (0, 1].
        tau_min: Temperature floor, > 0.
        tau_retune: Initial temperature after a workload change, > 0.

    Raises:
        MlsysoptError: If a knob is out of range.
    """

    tau0: float = 0.5  # initial Boltzmann temperature (relative to the best estimate)
    tau_decay: float = 0.7  # temperature multiplier per measurement under the current workload
    tau_min: float = 0.01  # temperature floor: with 0.01 a config 1% worse than the best estimate is e times rarer
    tau_retune: float = 0.1  # initial temperature after a workload change (Q then starts from the estimator)

    def __post_init__(self) -> None:
        bad = self.invalid()
        if bad:
            raise MlsysoptError(f"invalid knob value(s) {', '.join(bad)}")

    def invalid(self) -> list[str]:
        """The knobs out of range, as ``name=value`` (subclasses add theirs)."""
        bad = [f"{k}={getattr(self, k)}" for k in ("tau0", "tau_min", "tau_retune") if not getattr(self, k) > 0]
        if not 0 < self.tau_decay <= 1:
            bad.append(f"tau_decay={self.tau_decay} (need 0 < tau_decay <= 1)")
        return bad

    def temperature(self, step: int, retuning: bool = False) -> float:
        """Boltzmann temperature after ``step`` measurements under the current workload: geometric decay to a floor."""
        start = self.tau_retune if retuning else self.tau0
        return max(self.tau_min, start * self.tau_decay**step)


def knobs_from(cls: type[K], knobs: dict[str, Any], where: str) -> K:
    """``cls(**knobs)``; an unknown knob or a bad value is one :class:`MlsysoptError` naming ``where``."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(knobs) - names)
    if unknown:
        raise MlsysoptError(f"{where}: unknown knob(s) {', '.join(unknown)} (knobs: {', '.join(sorted(names))})")
    try:
        return cls(**knobs)
    except MlsysoptError as exc:
        raise MlsysoptError(f"{where}: {exc}") from None


def boltzmann(q: np.ndarray, candidates: np.ndarray, tau: float, rng: np.random.Generator) -> int:
    """Sample an index from ``candidates`` with probability proportional to ``exp(-(Q - min Q) / (tau * |min Q|))``.

    Scaling the energy by the best estimate makes ``tau`` a relative tolerance that means the same for a latency in
    ms and a cost in cores, and keeps saturated configurations (huge Q) from flattening the distribution.
    """
    qc = q[candidates]
    best = float(qc.min())
    logits = -(qc - best) / (tau * max(abs(best), 1e-12))
    p = np.exp(logits - logits.max())
    return int(candidates[rng.choice(len(candidates), p=p / p.sum())])
