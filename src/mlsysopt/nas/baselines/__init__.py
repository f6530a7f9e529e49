"""Baseline NAS methods behind the same ask/tell ``Searcher`` interface as EPNAS, one per file (imported lazily)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    "RandomSearch": "mlsysopt.nas.baselines.random_search",
    "RegularizedEvolution": "mlsysopt.nas.baselines.evolution",
    "EvolutionConfig": "mlsysopt.nas.baselines.evolution",
    "ReinforceSearch": "mlsysopt.nas.baselines.reinforce",
    "ReinforceConfig": "mlsysopt.nas.baselines.reinforce",
    "PNAS": "mlsysopt.nas.baselines.pnas",
    "PNASConfig": "mlsysopt.nas.baselines.pnas",
    "OptunaTPE": "mlsysopt.nas.baselines.optuna_tpe",
    "TPEConfig": "mlsysopt.nas.baselines.optuna_tpe",
}

if TYPE_CHECKING:
    from mlsysopt.nas.baselines.evolution import EvolutionConfig, RegularizedEvolution
    from mlsysopt.nas.baselines.optuna_tpe import OptunaTPE, TPEConfig
    from mlsysopt.nas.baselines.pnas import PNAS, PNASConfig
    from mlsysopt.nas.baselines.random_search import RandomSearch
    from mlsysopt.nas.baselines.reinforce import ReinforceConfig, ReinforceSearch

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
