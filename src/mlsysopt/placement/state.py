"""One placement under GiPH: its schedule and its gpNet, and the relocation step training and search share.

:meth:`PlacementState.relocate` is GiPH's move-evaluate-rebuild step: move the task of one gpNet node to that
node's device, simulate the new placement, and (on first use) build the new gpNet. The environment
(:mod:`mlsysopt.placement.env`) takes every step; the search (:mod:`mlsysopt.placement.giph`) keeps a step only
if it is accepted, so a rejected candidate's gpNet is never built.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from mlsysopt.graph.simulator import Schedule
from mlsysopt.placement.gpnet import GpNet, GpNetBuilder


class PlacementState:
    """A placement, its simulated schedule, and its gpNet (built on first access, once).

    Args:
        builder: The gpNet builder of the problem.
        placement: Device id of every task.
        schedule: The simulated schedule of ``placement``.

    Shapes:
        placement: (num_tasks,) int64 device index per task
    """

    def __init__(self, builder: GpNetBuilder, placement: np.ndarray, schedule: Schedule) -> None:
        self.builder = builder
        self.placement = placement
        self.schedule = schedule

    @property
    def makespan(self) -> float:
        """Makespan of the placement."""
        return self.schedule.makespan

    @cached_property
    def gpnet(self) -> GpNet:
        """The gpNet the policy scores for this placement."""
        return self.builder.build(self.placement, self.schedule)

    def relocate(self, action: int, simulate: Callable[[np.ndarray], Schedule]) -> tuple[int, PlacementState]:
        """(task moved, new state) after moving the task of gpNet node ``action`` to its device.

        ``simulate`` evaluates the new placement (the simulator, or a budgeted evaluator's ``schedule``).
        """
        task, device = self.builder.move(action)
        placement = self.placement.copy()
        placement[task] = device
        return task, PlacementState(self.builder, placement, simulate(placement))
