"""Tuners of the serving configuration, one per file, all with the ask/tell interface of :class:`Tuner`."""

from __future__ import annotations

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.backend import Objective
from mlsysopt.serving.space import Space
from mlsysopt.serving.tuners.bandit import Bandit
from mlsysopt.serving.tuners.base import Tuner
from mlsysopt.serving.tuners.default import Default
from mlsysopt.serving.tuners.exhaustive import Exhaustive
from mlsysopt.serving.tuners.hill_climb import HillClimb
from mlsysopt.serving.tuners.optuna_gp import OptunaGP
from mlsysopt.serving.tuners.optuna_tpe import OptunaTPE
from mlsysopt.serving.tuners.random_search import RandomSearch
from mlsysopt.serving.tuners.rrl import RRL, RRLConfig

TUNERS: dict[str, type[Tuner]] = {
    "rrl": RRL,
    "default": Default,
    "exhaustive": Exhaustive,
    "random": RandomSearch,
    "tpe": OptunaTPE,
    "gp": OptunaGP,
    "bandit": Bandit,
    "hill_climb": HillClimb,
}


def get_tuner(name: str, space: Space, objective: Objective, seed: int = 0, **knobs: object) -> Tuner:
    """Build the tuner called ``name``; an unknown name or knob is a :class:`MlsysoptError` naming the choices."""
    if name not in TUNERS:
        raise MlsysoptError(f"unknown tuner '{name}' (choose from: {', '.join(TUNERS)})")
    try:
        return TUNERS[name](space, objective, seed=seed, **knobs)
    except TypeError as exc:  # an unknown keyword knob
        raise MlsysoptError(f"tuner '{name}': {exc}") from None


__all__ = ["RRL", "TUNERS", "RRLConfig", "Tuner", "get_tuner"]
