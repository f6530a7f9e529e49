"""Baseline NAS methods behind the same ask/tell ``Searcher`` interface as EPNAS."""

from __future__ import annotations

from mlsysopt.nas.baselines.evolution import RegularizedEvolution
from mlsysopt.nas.baselines.optuna_tpe import OptunaTPE
from mlsysopt.nas.baselines.pnas import PNAS
from mlsysopt.nas.baselines.random_search import RandomSearch
from mlsysopt.nas.baselines.reinforce import ReinforceSearch

BASELINES = {
    "random": RandomSearch,
    "evolution": RegularizedEvolution,
    "reinforce": ReinforceSearch,
    "pnas": PNAS,
    "tpe": OptunaTPE,
}

__all__ = ["BASELINES", "PNAS", "OptunaTPE", "RandomSearch", "RegularizedEvolution", "ReinforceSearch"]
