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
