"""Everything on the fastest device: each task on the fastest device that can run its type (one evaluation).

The practitioner's first baseline for a model on one machine: no communication at all, one device busy. When the
fastest device runs every type, this is the whole graph on it; otherwise each task goes to its fastest feasible
device (ties: the lowest device id).
"""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext


def fastest_placement(problem: PlacementProblem) -> np.ndarray:
    """Each task on the fastest device that supports its hardware type."""
    speed = np.where(problem.mask, problem.cluster.speed[None, :], -np.inf)
    return np.argmax(speed, axis=1).astype(np.int64)


class FastestDevice(Placer):
    """All tasks on the fastest feasible device; one simulator evaluation (``seed`` and ``init`` are ignored)."""

    name = "fastest_device"

    def search(self, ctx: SearchContext) -> None:
        """Evaluate the all-on-the-fastest-device placement."""
        ctx.evaluate(fastest_placement(ctx.problem))
