"""The tuner interface: ``ask`` for a configuration, ``tell`` its measurement; ``best`` is the answer so far.

Every tuner is built as ``Tuner(space, objective, seed=0, **knobs)``. The driver (:func:`mlsysopt.serving.tune.tune`)
calls ``ask`` then ``tell`` once per measurement, and ``set_workload`` when the workload changes; a tuner that
learns across workloads keeps what it learned, the others start over.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from mlsysopt.serving.backend import Measurement, Objective
from mlsysopt.serving.space import Config, Space, Workload


class Tuner(ABC):
    """Ask/tell search over a :class:`Space` for the configuration that minimizes an :class:`Objective`."""

    name = "tuner"

    def __init__(self, space: Space, objective: Objective, seed: int = 0) -> None:
        self.space = space
        self.objective = objective
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.workload: Workload | None = None
        # measurements under the current workload, by configuration (the last one wins)
        self.measured: dict[Config, Measurement] = {}

    @abstractmethod
    def ask(self) -> Config:
        """The next configuration to measure."""

    def tell(self, config: Config, measurement: Measurement) -> None:
        """Record the measurement of ``config`` (subclasses extend this to learn from it)."""
        self.measured[config] = measurement

    def set_workload(self, workload: Workload) -> None:
        """The workload changed (or is set for the first time): forget measurements made under another one."""
        if self.workload is not None and workload != self.workload:
            self.measured = {}
        self.workload = workload

    @property
    def best(self) -> Config | None:
        """The measured configuration with the lowest score under the current workload (None before any)."""
        if not self.measured:
            return None
        return min(self.measured, key=lambda c: (self.objective.score(self.measured[c]), self.space.index(c)))

    def unmeasured(self) -> np.ndarray:
        """Indices of configurations not yet measured under the current workload."""
        mask = np.ones(self.space.size, dtype=bool)
        for c in self.measured:
            mask[self.space.index(c)] = False
        return np.flatnonzero(mask)
