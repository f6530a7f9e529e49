"""Random search: uniform architectures of ``max_blocks`` blocks (where the block count is a choice of the space, a
uniform count first); in hard mode infeasible ones are never proposed."""

from __future__ import annotations

from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


class RandomSearch(Searcher[SearcherConfig]):
    """Uniformly random, never-repeated architectures (rejecting infeasible ones on cheap resources in hard mode).

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`SearcherConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "random"

    def ask(self, n: int) -> list[Arch]:
        """``n`` new uniform samples."""
        return self.draw(lambda: self.space.sample(self.rng), n)

    def tell(self, evals: list[Evaluation]) -> None:
        """Random search learns nothing."""
