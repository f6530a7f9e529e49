"""Exhaustive search: every configuration in enumeration order (the ground truth the others are judged by)."""

from __future__ import annotations

from mlsysopt.serving.space import Config
from mlsysopt.serving.tuners.base import Tuner


class Exhaustive(Tuner):
    """Measures every configuration in enumeration order, then keeps asking the best one.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
    """

    name = "exhaustive"

    def ask(self) -> Config:
        """The first configuration not yet measured under this workload (the best once all are)."""
        todo = self.unmeasured()
        return self.space.config(int(todo[0])) if todo.size else self.best  # type: ignore[return-value]
