"""Zero-shot transfer: the architectures a transfer prior ranks best on the *other* tasks, evaluated in that order.

The honest reference for any method that transfers: if evaluating the top of what the source tasks liked were as
good as searching, a search would add nothing. The prior is the one given to the method, else the space's own
(NAS-Bench-Graph: pretrained on the other datasets' tables,
:func:`mlsysopt.nas.spaces.nasbench_graph.leave_one_out`). Candidates are every architecture of a table space
(``space.iter_archs``), else ``pool`` uniform samples; with budget 1 the method returns exactly the other tasks'
best. It learns nothing from the target's evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.prior_source import PriorRanking
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class ZeroShotConfig(SearcherConfig):
    """How many random candidates the prior ranks when the space cannot list its architectures.

    Args:
        tries: Random draws per ask before giving up on finding a new admissible candidate, 1 to 1e6.
        pool: Random candidates the prior ranks when the space cannot list its architectures, >= 1.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    pool: int = knob(5000, 1, MAX_POOL)


class ZeroShot(PriorRanking, Searcher[ZeroShotConfig]):
    """The prior's ranking, top first.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`ZeroShotConfig` (None: its defaults).
        prior: A transfer prior (:class:`~mlsysopt.nas.prior.TransferPrior`); None: the space's own (if any).

    Raises:
        MlsysoptError: Also, from :meth:`check_ready` and ``ask``, if neither ``prior``, the space nor a warm start
            gives a transfer prior.
    """

    name = "zero_shot"
    Config: ClassVar[type[SearcherConfig]] = ZeroShotConfig
    uses_prior = True

    instead = "epnas"

    def setup(self) -> None:
        """Rank the candidates once by the prior's mean score over its source tasks (:class:`PriorRanking`)."""
        self.setup_ranking(self.cfg.pool)

    def ask(self, n: int) -> list[Arch]:
        """The next ``n`` admissible architectures in the prior's order."""
        return self.take_ranked(n)

    def tell(self, evals: list[Evaluation]) -> None:
        """Zero-shot transfer learns nothing from the target."""

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the position in the ranking (and a warm-started prior)."""
        return {**super().state_dict(), **self.ranking_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        self.load_ranking_state(d)
