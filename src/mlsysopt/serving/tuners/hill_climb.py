"""Hill climbing like Triton Model Analyzer's quick search: steepest descent over one-knob moves, random restarts."""

from __future__ import annotations

from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners.base import Tuner


class HillClimb(Tuner):
    """From ONNX Runtime's default, measure every neighbour, move to the best if it improves, else restart randomly.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        cores: Intra-op threads of the starting (default) configuration (None: the largest intra-op value).
    """

    name = "hill_climb"

    def __init__(self, space: Space, objective: Objective, seed: int = 0, cores: int | None = None) -> None:
        super().__init__(space, objective, seed)
        self.start = space.default(cores)
        self.current = self.start

    def _score(self, config: Config) -> float:
        return self.objective.score(self.measured[config])

    def ask(self) -> Config:
        """The current point, else its next unmeasured neighbour, else a move or a random restart."""
        while True:
            if self.current not in self.measured:
                return self.current
            neighbors = self.space.neighbors(self.current)
            todo = [n for n in neighbors if n not in self.measured]
            if todo:
                return todo[0]
            best = min(neighbors, key=self._score, default=self.current)
            if self._score(best) < self._score(self.current):
                self.current = best  # already measured: look at its neighbours next
                continue
            unmeasured = self.unmeasured()
            if unmeasured.size == 0:
                return self.best  # type: ignore[return-value]
            self.current = self.space.config(int(self.rng.choice(unmeasured)))
            return self.current

    def set_workload(self, workload: Workload) -> None:
        """A new workload starts over from the default configuration."""
        if self.workload is not None and workload != self.workload:
            self.current = self.start
        super().set_workload(workload)
