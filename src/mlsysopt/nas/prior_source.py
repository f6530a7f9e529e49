"""Where a NAS method's transfer prior comes from: the one given, the space's own, or earlier runs' records."""

from __future__ import annotations

from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.spaces.base import SearchSpace


class PriorSource:
    """Mixin of :class:`~mlsysopt.nas.searcher.Searcher` for the methods that read a prior (``uses_prior``)."""

    space: SearchSpace
    prior: Any

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
