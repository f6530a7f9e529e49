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
from mlsysopt.nas.prior import TransferPrior
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


class ZeroShot(Searcher[ZeroShotConfig]):
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

    def setup(self) -> None:
        """Rank the candidates once by the prior's mean score over its source tasks (none yet without a prior:
        :meth:`check_ready` says so, after a ``--warm-start`` could have given one)."""
        self.warm_prior: dict[str, Any] | None = None
        self.ranked: list[Arch] = []
        self.next = 0
        prior = self.resolve_prior("auto")
        if prior is not None:
            self._rank(prior)

    def check_ready(self) -> None:
        """Refuse to search without a prior (given, the space's own, or from ``--warm-start``)."""
        if self.prior is None:
            raise self.missing_prior("epnas")

    def warm_start(self, histories: list[dict[str, Any]]) -> int:
        """``--warm-start``: rank by a prior trained on earlier runs' records and the space's own sources."""
        prior = self.prior_from_histories(histories)
        self._rank(prior)
        self.warm_prior = prior.state_dict()
        return sum(1 for h in histories for r in h.get("records") or () if r.get("ok", True) and r.get("decoded"))

    def _rank(self, prior: Any) -> None:
        self.prior = prior
        self.ranked = self.rank_by_prior(prior, self.cfg.pool)
        self.next = 0

    def ask(self, n: int) -> list[Arch]:
        """The next ``n`` admissible architectures in the prior's order."""
        self.check_ready()
        out: list[Arch] = []
        while self.next < len(self.ranked) and len(out) < n:
            arch = self.ranked[self.next]
            self.next += 1
            if self.admissible(arch) and all(self.key(arch) != self.key(a) for a in out):
                out.append(arch)
        self.mark(out)
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """Zero-shot transfer learns nothing from the target."""

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the position in the ranking (and a warm-started prior)."""
        return {**super().state_dict(), "next": self.next, "warm_prior": self.warm_prior}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        if d.get("warm_prior") is not None:
            self._rank(TransferPrior.from_state_dict(d["warm_prior"]))
            self.warm_prior = d["warm_prior"]
        super().load_state_dict(d)
        self.next = int(d["next"])
