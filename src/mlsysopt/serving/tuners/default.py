"""ONNX Runtime's out-of-the-box serving configuration: a reference point, not a search."""

from __future__ import annotations

from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space
from mlsysopt.serving.tuners.base import Tuner


class Default(Tuner):
    """Always asks ``space.default(cores)``: one worker, no batching, intra threads = cores, sequential.

    Args:
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner's random generator.
        cores: Intra-op threads of the default configuration (None: the largest intra-op value of the space).
    """

    name = "default"

    def __init__(self, space: Space, objective: Objective, seed: int = 0, cores: int | None = None) -> None:
        super().__init__(space, objective, seed)
        self.config = space.default(cores)

    def ask(self) -> Config:
        """The default configuration, every time."""
        return self.config
