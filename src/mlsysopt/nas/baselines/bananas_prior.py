"""BANANAS with a transfer initial design: the prior picks the first architectures, the target's evidence the rest.

A prior that fades by construction: the first ``prior_init`` evaluations are the architectures a transfer prior ranks
best on the *other* tasks (as :class:`~mlsysopt.nas.baselines.zero_shot.ZeroShot` would evaluate them), the rest of
BANANAS' ``init`` are uniform samples, and from then on the search is plain BANANAS
(:class:`~mlsysopt.nas.baselines.bananas.Bananas`): its ensemble is trained on the target's evaluations only and
mutates the best of them. This is the meta-learned initial design of Feurer, Springenberg & Hutter, "Initializing
Bayesian Hyperparameter Optimization via Meta-Learning" (AAAI 2015), on BANANAS: the prior chooses where the search
starts and has no say once there is evidence, where EPNAS's prior keeps shaping the predictor until its handover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.errors import InvalidOption
from mlsysopt.nas.baselines.bananas import Bananas, BananasConfig
from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.prior_source import PriorRanking
from mlsysopt.nas.searcher import SearcherConfig
from mlsysopt.nas.spaces.base import Arch


@dataclass
class BananasPriorConfig(BananasConfig):
    """BANANAS' knobs plus how many of its ``init`` starts the prior picks.

    Args:
        tries, init, members, pred_hidden, pred_epochs, parents, candidates, acquisition, refit_every: as
            :class:`~mlsysopt.nas.baselines.bananas.BananasConfig`.
        prior_init: Of the first ``init`` architectures, how many are the prior's best (the rest uniform), 0 to
            ``init`` (0: plain BANANAS).
        pool: Random candidates the prior ranks when the space cannot list its architectures, >= 1.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range, or ``prior_init`` exceeds ``init``.
    """

    prior_init: int = knob(6, 0, MAX_POOL)  # chosen on the tuning tables (benchmarks/nas.py --tune, issue #34)
    pool: int = knob(5000, 1, MAX_POOL)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prior_init > self.init:
            raise InvalidOption(
                f"knob prior_init={self.prior_init} must be at most init={self.init} (the prior picks that many of "
                "BANANAS' random starts)"
            )


class BananasPrior(PriorRanking, Bananas):
    """BANANAS whose first ``prior_init`` architectures are the transfer prior's best.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`BananasPriorConfig` (None: its defaults).
        prior: A transfer prior (:class:`~mlsysopt.nas.prior.TransferPrior`); None: the space's own (if any).

    Raises:
        MlsysoptError: Also, from :meth:`check_ready` and ``ask``, if neither ``prior``, the space nor a warm start
            gives a transfer prior.
    """

    name = "bananas_prior"
    Config: ClassVar[type[SearcherConfig]] = BananasPriorConfig
    uses_prior = True

    instead = "bananas"

    def setup(self) -> None:
        """BANANAS' state, and the prior's ranking of the space (:class:`PriorRanking`; its top ``prior_init`` are
        the first asked)."""
        super().setup()
        self.setup_ranking(self.cfg.pool)

    def ask(self, n: int) -> list[Arch]:
        """The prior's next best admissible architectures while fewer than ``prior_init`` were asked; then BANANAS."""
        out = self.take_ranked(min(n, max(self.cfg.prior_init - self.taken, 0)))
        if len(out) < n and (self.taken >= self.cfg.prior_init or self.next >= len(self.ranked)):
            out += super().ask(n - len(out))
        return out

    def state_dict(self) -> dict[str, Any]:
        """BANANAS' state plus the position in the ranking (and a warm-started prior)."""
        return {**super().state_dict(), **self.ranking_state()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        self.load_ranking_state(d)
