"""Random search: uniform architectures of ``max_blocks`` blocks; in hard mode infeasible ones are never proposed."""

from __future__ import annotations

from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


class RandomSearch(Searcher[SearcherConfig]):
    """Uniformly random, never-repeated architectures (rejecting infeasible ones on cheap resources in hard mode).

    Args:
        space: The search space.
        constraints: Resource constraints (None: every architecture is feasible).
        budget: Evaluations the driver spends, >= 1.
        seed: Seed of every random choice of the method.
        config: The method's knobs, a :class:`SearcherConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).

    Raises:
        MlsysoptError: If ``budget`` < 1 or ``config`` is not a :class:`SearcherConfig`.
        InvalidConstraint: If a constraint reads a resource the space does not report.
    """

    name = "random"

    def ask(self, n: int) -> list[Arch]:
        """``n`` new uniform samples."""
        return self.draw(lambda: self.space.sample(self.rng), n)

    def tell(self, evals: list[Evaluation]) -> None:
        """Random search learns nothing."""
