"""Random search: uniformly random feasible placements, keep the best."""

from __future__ import annotations

from mlsysopt.placement.base import Placer, SearchContext


class RandomSearch(Placer):
    """Spend the whole budget on uniformly random feasible placements; return the best one.

    ``init`` is ignored.

    It takes no arguments.
    """

    name = "random"

    def search(self, ctx: SearchContext) -> None:
        """Best of ``budget`` random feasible placements (``init`` is ignored)."""
        while ctx.evaluate.remaining > 0:
            ctx.evaluate(ctx.problem.random_placement(ctx.rng))
