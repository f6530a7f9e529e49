"""The plain hill climb: GiPH's portfolio start and local search with uniform proposals (no policy).

The ablation that says what GiPH's policy adds: the same portfolio, the same moves (relocations, swaps and chain
moves on the critical path), the same best-of-K batches and restarts (:mod:`mlsysopt.placement.move_search`),
but each step's K moves drawn uniformly among the untried ones.
"""

from __future__ import annotations

from mlsysopt.placement.base import Placer, SearchContext
from mlsysopt.placement.baselines.portfolio import PORTFOLIO, run_portfolio
from mlsysopt.placement.move_search import SearchConfig, local_search


class LocalSearch(Placer):
    """Portfolio start + monotone local search with uniformly drawn moves.

    Args:
        config: The local search's knobs (None: :class:`~mlsysopt.placement.SearchConfig` defaults; its
            ``order_share`` > 0 adds order moves under ``ordered`` execution, off by default).
        portfolio: Names of the portfolio's members, evaluated in order (default
            :data:`~mlsysopt.placement.baselines.portfolio.PORTFOLIO`).
    """

    name = "local_search"

    def __init__(self, config: SearchConfig | None = None, portfolio: tuple[str, ...] = PORTFOLIO) -> None:
        self.config = config or SearchConfig()
        self.portfolio = tuple(portfolio)

    def search(self, ctx: SearchContext) -> None:
        """Evaluate the portfolio (and ``init``), then climb from the best; ``info`` has both."""
        starts = [("init", ctx.init, ctx.evaluate(ctx.init))] if ctx.init is not None else []
        portfolio = run_portfolio(ctx.problem, ctx.evaluate, ctx.seed, self.portfolio)
        ctx.info["portfolio"] = portfolio.to_dict()
        trace = local_search(ctx.problem, ctx.evaluate, starts + portfolio.starts, None, ctx.rng, self.config)
        ctx.info["search"] = trace.to_dict()
