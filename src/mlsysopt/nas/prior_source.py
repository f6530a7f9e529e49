"""Where a NAS method's transfer prior comes from: the one given, the space's own, or earlier runs' records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.spaces.base import Arch, SearchSpace


class PriorSource:
    """Mixin of :class:`~mlsysopt.nas.searcher.Searcher` for the methods that read a prior (``uses_prior``)."""

    space: SearchSpace
    prior: Any
    seed: int
    name: str  # (the method's, on the searcher)
    valid: Callable[[Arch], bool]  # (Candidates.valid, on the searcher)

    def rank_by_prior(self, prior: Any, pool: int) -> list[Arch]:
        """The space's architectures, best first by ``prior``'s mean score over its source tasks.

        Args:
            prior: a :class:`~mlsysopt.nas.prior.TransferPrior`.
            pool: how many uniform samples (drawn from the method's seed) stand in for the space when it cannot
                list its architectures (``space.iter_archs``).

        Returns:
            list: the valid candidates, the prior's best first (ties in the order listed).
        """
        from mlsysopt.nas.prior import PriorScorer  # deferred: mlsysopt.nas.prior imports torch

        rng = np.random.default_rng(self.seed)  # the same candidates whichever prior ranks them
        lister = getattr(self.space, "iter_archs", None)
        cands = list(lister()) if callable(lister) else [self.space.sample(rng) for _ in range(pool)]
        cands = [a for a in cands if self.valid(a)]
        score = PriorScorer(prior, self.space).score(cands)
        return [cands[i] for i in np.argsort(-score, kind="stable")]

    def missing_prior(self, instead: str) -> MlsysoptError:
        """The error of a method that cannot run without a prior and was given none (``instead``: what to run)."""
        return MlsysoptError(
            f"method '{self.name}' needs a transfer prior: {self.space.name} has none of its own, so give one "
            f"(history records of earlier runs: --warm-start) or use {instead}"
        )

    def resolve_prior(self, setting: str) -> Any:
        """The prior a method with knob ``prior=setting`` uses: None for ``"none"``; for ``"auto"`` the one given
        to the constructor, else the space's own (``space.default_prior()``), else None (nothing to transfer)."""
        if setting == "none":
            return None
        if self.prior is not None:
            return self.prior
        default = getattr(self.space, "default_prior", None)
        return default() if callable(default) else None

    def prior_from_histories(self, histories: list[dict[str, Any]], with_space: bool = True) -> Any:
        """A transfer prior trained on earlier runs' history records (the study store's ``--warm-start``), together
        with the space's own source tasks (``space.prior_tasks()``, when ``with_space``); MlsysoptError when no
        record holds a usable evaluation."""
        from mlsysopt.nas.prior import TransferPrior, history_tasks  # deferred: mlsysopt.nas.prior imports torch

        tasks = history_tasks(histories)
        if not sum(len(t.perf) for t in tasks):
            raise MlsysoptError("--warm-start: the earlier runs hold no usable evaluation to learn a prior from")
        base = getattr(self.space, "prior_tasks", None)
        sources = list(base()) if with_space and callable(base) else []
        return TransferPrior().fit(sources + tasks)


class PriorRanking:
    """Mixin of the methods that evaluate a transfer prior's ranking of the space, best first (zero-shot transfer,
    BANANAS' prior starts): the ranking, its position, a ``--warm-start`` prior and the refusal without any prior.

    Put it before :class:`~mlsysopt.nas.searcher.Searcher` in the bases (its :meth:`check_ready` replaces the
    searcher's); the method calls :meth:`setup_ranking` from its ``setup``.
    """

    #: What to run instead, named in the error when there is no prior.
    instead: str = "another method"
    prior: Any
    warm_prior: dict[str, Any] | None
    ranked: list[Arch]
    next: int  # position in the ranking
    taken: int  # architectures asked from the ranking

    def setup_ranking(self, pool: int) -> None:
        """Rank the space by the prior (the given one or the space's own); none yet without a prior: :meth:`check_ready`
        says so, after a ``--warm-start`` could have given one. ``pool``: as :meth:`PriorSource.rank_by_prior`."""
        self.pool, self.warm_prior = pool, None
        self.ranked, self.next, self.taken = [], 0, 0
        prior = self.resolve_prior("auto")  # type: ignore[attr-defined]
        if prior is not None:
            self._rank(prior)

    def _rank(self, prior: Any) -> None:
        self.prior = prior
        self.ranked = self.rank_by_prior(prior, self.pool)  # type: ignore[attr-defined]
        self.next = self.taken = 0

    def check_ready(self) -> None:
        """Refuse to search without a prior (given, the space's own, or from ``--warm-start``)."""
        if self.prior is None:
            raise self.missing_prior(self.instead)  # type: ignore[attr-defined]

    def warm_start(self, histories: list[dict[str, Any]]) -> int:
        """``--warm-start``: rank by a prior trained on earlier runs' records and the space's own sources."""
        prior = self.prior_from_histories(histories)  # type: ignore[attr-defined]
        self._rank(prior)
        self.warm_prior = prior.state_dict()
        return sum(1 for h in histories for r in h.get("records") or () if r.get("ok", True) and r.get("decoded"))

    def take_ranked(self, n: int) -> list[Arch]:
        """Up to ``n`` next admissible architectures of the ranking, marked as proposed."""
        self.check_ready()
        out: list[Arch] = []
        while self.next < len(self.ranked) and len(out) < n:
            arch = self.ranked[self.next]
            self.next += 1
            if self.admissible(arch) and all(self.key(arch) != self.key(a) for a in out):  # type: ignore[attr-defined]
                out.append(arch)
        self.taken += len(out)
        self.mark(out)  # type: ignore[attr-defined]
        return out

    def ranking_state(self) -> dict[str, Any]:
        """The position in the ranking and a warm-started prior (for the method's ``state_dict``)."""
        return {"next": self.next, "taken": self.taken, "warm_prior": self.warm_prior}

    def load_ranking_state(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`ranking_state` (a warm-started prior ranks again)."""
        if d.get("warm_prior") is not None:
            from mlsysopt.nas.prior import TransferPrior  # deferred: mlsysopt.nas.prior imports torch

            self._rank(TransferPrior.from_state_dict(d["warm_prior"]))
            self.warm_prior = d["warm_prior"]
        self.next, self.taken = int(d["next"]), int(d.get("taken", 0))
