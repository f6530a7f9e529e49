"""Simulated annealing over placements: single-task relocations, Metropolis acceptance, geometric cooling."""

from __future__ import annotations

import math

import numpy as np

from mlsysopt.placement.base import Placer, SearchContext

#: T0 = T0_FRACTION · start makespan: a move that worsens the makespan by 10% is accepted with prob. 1/e at first.
T0_FRACTION = 0.1
#: The temperature falls geometrically to FINAL_FRACTION · T0 at the last step of the budget.
FINAL_FRACTION = 0.01


class Annealing(Placer):
    """Relocate one random task to another feasible device per step; accept by Metropolis; keep the best.

    Starts from ``init`` (or a random feasible placement); one evaluation to start, one per step.

    Args:
        t0_fraction: Start temperature as a fraction of the start makespan.
        final_fraction: Temperature at the last step of the budget, as a fraction of the start temperature
            (geometric cooling in between).
    """

    name = "annealing"

    def __init__(self, t0_fraction: float = T0_FRACTION, final_fraction: float = FINAL_FRACTION) -> None:
        self.t0_fraction = float(t0_fraction)
        self.final_fraction = float(final_fraction)

    def search(self, ctx: SearchContext) -> None:
        """Anneal from ``init`` (or a random feasible placement); 1 evaluation to start, 1 per step."""
        mask, evaluate, rng = ctx.problem.mask, ctx.evaluate, ctx.rng
        current = ctx.problem.random_placement(rng) if ctx.init is None else ctx.init
        current_ms = evaluate(current)
        steps = evaluate.remaining
        movable = np.flatnonzero(mask.sum(axis=1) > 1)
        if steps == 0 or movable.size == 0:
            return
        t0 = self.t0_fraction * current_ms
        cooling = self.final_fraction ** (1.0 / max(steps - 1, 1))
        for step in range(steps):
            temperature = t0 * cooling**step
            i = int(movable[rng.integers(movable.size)])
            others = np.flatnonzero(mask[i])
            others = others[others != current[i]]
            old = current[i]
            current[i] = others[rng.integers(others.size)]
            ms = evaluate(current)
            delta = ms - current_ms
            # draw the uniform every step so the random stream does not depend on the acceptance branch
            u = rng.random()
            if delta <= 0 or (temperature > 0 and u < math.exp(-delta / temperature)):
                current_ms = ms
            else:
                current[i] = old
