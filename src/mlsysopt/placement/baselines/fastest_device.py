"""Everything on the fastest device: each task on the fastest device that can run its type (one evaluation).

The practitioner's first baseline for a model on one machine: no communication at all, one device busy. The whole
graph goes to the fastest device that runs every hardware type it uses; when no device runs them all, each task
goes to its fastest feasible device (ties: the lowest device id).
"""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext


def fastest_placement(problem: PlacementProblem) -> np.ndarray:
    """Every task on the fastest device that runs all of them, else each on its fastest feasible device."""
    speed = problem.cluster.speed
    covers = problem.mask.all(axis=0)
    if covers.any():
        return np.full(problem.num_tasks, int(np.argmax(np.where(covers, speed, -np.inf))), np.int64)
    return np.argmax(np.where(problem.mask, speed[None, :], -np.inf), axis=1).astype(np.int64)


class FastestDevice(Placer):
    """All tasks on the fastest feasible device; one simulator evaluation (``seed`` and ``init`` are ignored).

    It takes no arguments.
    """

    name = "fastest_device"

    def search(self, ctx: SearchContext) -> None:
        """Evaluate the all-on-the-fastest-device placement."""
        ctx.evaluate(fastest_placement(ctx.problem))
