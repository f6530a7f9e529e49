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
from mlsysopt.nas.prior import TransferPrior
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


class BananasPrior(Bananas):
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

    def setup(self) -> None:
        """BANANAS' state, and the prior's ranking of the space (its top ``prior_init`` are the first asked; none yet
        without a prior: :meth:`check_ready` says so, after a ``--warm-start`` could have given one)."""
        super().setup()
        self.warm_prior: dict[str, Any] | None = None
        self.ranked: list[Arch] = []
        self.from_prior = self.next = 0
        prior = self.resolve_prior("auto")
        if prior is not None:
            self._rank(prior)

    def check_ready(self) -> None:
        """Refuse to search without a prior (given, the space's own, or from ``--warm-start``)."""
        if self.prior is None:
            raise self.missing_prior("bananas")

    def _rank(self, prior: Any) -> None:
        self.prior = prior
        self.ranked = self.rank_by_prior(prior, self.cfg.pool)
        self.from_prior = 0  # architectures asked from the ranking so far
        self.next = 0  # position in the ranking

    def warm_start(self, histories: list[dict[str, Any]]) -> int:
        """``--warm-start``: rank by a prior trained on earlier runs' records and the space's own sources."""
        prior = self.prior_from_histories(histories)
        self._rank(prior)
        self.warm_prior = prior.state_dict()
        return sum(1 for h in histories for r in h.get("records") or () if r.get("ok", True) and r.get("decoded"))

    def ask(self, n: int) -> list[Arch]:
        """The prior's next best admissible architectures while fewer than ``prior_init`` were asked; then BANANAS."""
        self.check_ready()
        out: list[Arch] = []
        while self.from_prior < self.cfg.prior_init and self.next < len(self.ranked) and len(out) < n:
            arch = self.ranked[self.next]
            self.next += 1
            if self.admissible(arch) and all(self.key(arch) != self.key(a) for a in out):
                out.append(arch)
                self.from_prior += 1
        self.mark(out)
        if len(out) < n and (self.from_prior >= self.cfg.prior_init or self.next >= len(self.ranked)):
            out += super().ask(n - len(out))
        return out

    def state_dict(self) -> dict[str, Any]:
        """BANANAS' state plus the position in the ranking (and a warm-started prior)."""
        return {**super().state_dict(), "next": self.next, "from_prior": self.from_prior, "warm_prior": self.warm_prior}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        if d.get("warm_prior") is not None:
            self._rank(TransferPrior.from_state_dict(d["warm_prior"]))
            self.warm_prior = d["warm_prior"]
        super().load_state_dict(d)
        self.next, self.from_prior = int(d["next"]), int(d["from_prior"])
