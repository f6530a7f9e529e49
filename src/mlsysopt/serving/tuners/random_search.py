"""Random search: configurations drawn uniformly without replacement."""

from __future__ import annotations

from mlsysopt.serving.space import Config
from mlsysopt.serving.tuners.base import Tuner


class RandomSearch(Tuner):
    """Draws a configuration not yet measured under this workload uniformly at random.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
    """

    name = "random"

    def ask(self) -> Config:
        """A uniformly random unmeasured configuration (the best once all are measured)."""
        todo = self.unmeasured()
        return self.space.config(int(self.rng.choice(todo))) if todo.size else self.best  # type: ignore[return-value]
