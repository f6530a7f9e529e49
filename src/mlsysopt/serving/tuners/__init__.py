"""Tuners of the serving configuration, one per file, all with the ask/tell interface of :class:`Tuner`.

Each tuner's module is imported when the tuner is first used, so RRL alone never loads Optuna.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.errors import MlsysoptError
from mlsysopt.lazy import lazy_exports
from mlsysopt.registry import Registry, lazy_attribute_map

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

#: Every tuner by name, in the order tables and plots list them (each module imported on first use).
TUNERS: Registry[type[Tuner]] = Registry(
    "tuner",
    {
        "rrl": "mlsysopt.serving.tuners.rrl:RRL",
        "default": "mlsysopt.serving.tuners.default:Default",
        "exhaustive": "mlsysopt.serving.tuners.exhaustive:Exhaustive",
        "random": "mlsysopt.serving.tuners.random_search:RandomSearch",
        "tpe": "mlsysopt.serving.tuners.optuna_tpe:OptunaTPE",
        "gp": "mlsysopt.serving.tuners.optuna_gp:OptunaGP",
        "bandit": "mlsysopt.serving.tuners.bandit:Bandit",
        "hill_climb": "mlsysopt.serving.tuners.hill_climb:HillClimb",
    },
)


def get_tuner(name: str, space: Space, objective: Objective, seed: int = 0, **knobs: object) -> Tuner:
    """Build the tuner called ``name``; an unknown name or knob is a :class:`MlsysoptError` naming the choices.

    Args:
        name: Tuner name: ``rrl``, ``default``, ``exhaustive``, ``random``, ``tpe``, ``gp``, ``bandit`` or
            ``hill_climb``.
        space: The configurations to search.
        objective: What to minimize.
        seed: Seed of the tuner.
        **knobs: Tuner-specific keyword knobs (e.g. RRL's :class:`RRLConfig` fields).

    Returns:
        Tuner: The tuner, ready to ``ask``.

    Raises:
        MlsysoptError: For an unknown tuner name, an unknown knob or a knob value out of range.
    """
    cls = TUNERS.load(name)
    try:
        return cls(space, objective, seed=seed, **knobs)
    except TypeError as exc:  # an unknown keyword knob
        raise MlsysoptError(f"tuner '{name}': {exc}") from None


_EXPORTS = lazy_attribute_map(TUNERS) | {
    "RRLConfig": "mlsysopt.serving.tuners.rrl",
    "Tuner": "mlsysopt.serving.tuners.base",
    "Exploration": "mlsysopt.serving.tuners.base",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "TUNERS", "get_tuner"])
