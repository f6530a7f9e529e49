"""Classic placement baselines: HEFT, random search, simulated annealing and randomized EFT greedy."""

from __future__ import annotations

from mlsysopt.errors import MlsysoptError
from mlsysopt.placement.base import Placer
from mlsysopt.placement.baselines.annealing import Annealing
from mlsysopt.placement.baselines.eft_greedy import EFTGreedy
from mlsysopt.placement.baselines.heft import HEFT, heft_schedule
from mlsysopt.placement.baselines.random_search import RandomSearch

BASELINES: dict[str, type[Placer]] = {
    HEFT.name: HEFT,
    RandomSearch.name: RandomSearch,
    Annealing.name: Annealing,
    EFTGreedy.name: EFTGreedy,
}


def get_baseline(name: str) -> Placer:
    """A fresh baseline placer by name; MlsysoptError listing the known names otherwise."""
    if name not in BASELINES:
        raise MlsysoptError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
    return BASELINES[name]()


__all__ = [
    "BASELINES",
    "HEFT",
    "Annealing",
    "EFTGreedy",
    "RandomSearch",
    "get_baseline",
    "heft_schedule",
]
