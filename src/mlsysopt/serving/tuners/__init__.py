"""Tuners of the serving configuration, one per file, all with the ask/tell interface of :class:`Tuner`.

Each tuner's module is imported when the tuner is first used, so RRL alone never loads Optuna.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from mlsysopt.errors import MlsysoptError
from mlsysopt.lazy import lazy_exports

if TYPE_CHECKING:
    from mlsysopt.serving.objective import Objective
    from mlsysopt.serving.space import Space
    from mlsysopt.serving.tuners.bandit import Bandit
    from mlsysopt.serving.tuners.base import Exploration, Tuner
    from mlsysopt.serving.tuners.default import Default
    from mlsysopt.serving.tuners.exhaustive import Exhaustive
    from mlsysopt.serving.tuners.hill_climb import HillClimb
    from mlsysopt.serving.tuners.optuna_gp import OptunaGP
    from mlsysopt.serving.tuners.optuna_tpe import OptunaTPE
    from mlsysopt.serving.tuners.random_search import RandomSearch
    from mlsysopt.serving.tuners.rrl import RRL, RRLConfig

#: tuner name -> (module, class), in the order tables and plots list them
_TUNERS = {
    "rrl": ("mlsysopt.serving.tuners.rrl", "RRL"),
    "default": ("mlsysopt.serving.tuners.default", "Default"),
    "exhaustive": ("mlsysopt.serving.tuners.exhaustive", "Exhaustive"),
    "random": ("mlsysopt.serving.tuners.random_search", "RandomSearch"),
    "tpe": ("mlsysopt.serving.tuners.optuna_tpe", "OptunaTPE"),
    "gp": ("mlsysopt.serving.tuners.optuna_gp", "OptunaGP"),
    "bandit": ("mlsysopt.serving.tuners.bandit", "Bandit"),
    "hill_climb": ("mlsysopt.serving.tuners.hill_climb", "HillClimb"),
}


class _Registry(Mapping[str, "type[Tuner]"]):
    """Tuner classes by name, each imported on first look-up."""

    def __getitem__(self, name: str) -> type[Tuner]:
        module, cls = _TUNERS[name]
        return getattr(importlib.import_module(module), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(_TUNERS)

    def __len__(self) -> int:
        return len(_TUNERS)


TUNERS: Mapping[str, type[Tuner]] = _Registry()


def get_tuner(name: str, space: Space, objective: Objective, seed: int = 0, **knobs: object) -> Tuner:
    """Build the tuner called ``name``; an unknown name or knob is a :class:`MlsysoptError` naming the choices."""
    if name not in _TUNERS:
        raise MlsysoptError(f"unknown tuner '{name}' (choose from: {', '.join(_TUNERS)})")
    try:
        return TUNERS[name](space, objective, seed=seed, **knobs)
    except TypeError as exc:  # an unknown keyword knob
        raise MlsysoptError(f"tuner '{name}': {exc}") from None


_EXPORTS = {cls: module for module, cls in _TUNERS.values()} | {
    "RRLConfig": "mlsysopt.serving.tuners.rrl",
    "Tuner": "mlsysopt.serving.tuners.base",
    "Exploration": "mlsysopt.serving.tuners.base",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "TUNERS", "get_tuner"])
