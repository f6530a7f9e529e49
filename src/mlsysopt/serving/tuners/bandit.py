"""The ablation of RRL without regions and without the estimator: a plain Boltzmann bandit over the value table.

Q starts at the middle configuration's score and only the measured configuration's entry changes (to its score).
Since the asks are restricted to configurations not yet measured, whose Q all still hold the initial value, the
Boltzmann draw is uniform over them: without the region update, nothing measured informs the next pick. That is
exactly the point of the ablation.
"""

from __future__ import annotations

import numpy as np

from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners.base import Exploration, Tuner, boltzmann, knobs_from


class Bandit(Tuner):
    """RRL's value table and Boltzmann exploration (and temperature knobs), updated only where it measured.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        **knobs: Temperature knobs of :class:`Exploration` (``tau0``, ``tau_decay``, ``tau_min``, ``tau_retune``).

    Raises:
        MlsysoptError: For an unknown knob or a value out of range.
    """

    name = "bandit"

    def __init__(self, space: Space, objective: Objective, seed: int = 0, **knobs: object) -> None:
        super().__init__(space, objective, seed)
        self.knobs = knobs_from(Exploration, knobs, "bandit")
        self.q: np.ndarray | None = None
        self.steps = 0

    def ask(self) -> Config:
        """The middle configuration first, then Boltzmann over Q among the unmeasured configurations."""
        if self.q is None:
            return self.space.middle()
        todo = self.unmeasured()
        if todo.size == 0:
            return self.best  # type: ignore[return-value]
        return self.space.config(boltzmann(self.q, todo, self.knobs.temperature(self.steps), self.rng))

    def tell(self, config: Config, measurement: Measurement) -> None:
        """Set the measured configuration's Q to its score (Q everywhere to it after the first measurement)."""
        super().tell(config, measurement)
        score = self.objective.capped_score(measurement)
        if self.q is None:
            self.q = np.full(self.space.size, score)
        self.q[self.space.index(config)] = score
        self.steps += 1

    def set_workload(self, workload: Workload) -> None:
        """A new workload starts over: nothing learned under another workload is known to hold."""
        if self.workload is not None and workload != self.workload:
            self.q, self.steps = None, 0
        super().set_workload(workload)
