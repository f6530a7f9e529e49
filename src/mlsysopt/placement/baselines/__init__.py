"""Placement baselines: HEFT, all on the fastest device, random search, simulated annealing, randomized EFT
greedy, the plain hill climb, and the field's schedulers from saga (one placer each) with ``saga_best``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from mlsysopt.placement.base import Placer
from mlsysopt.placement.baselines.annealing import Annealing
from mlsysopt.placement.baselines.eft_greedy import EFTGreedy
from mlsysopt.placement.baselines.fastest_device import FastestDevice, fastest_placement
from mlsysopt.placement.baselines.heft import HEFT, heft_schedule
from mlsysopt.placement.baselines.hill_climb import LocalSearch
from mlsysopt.placement.baselines.random_search import RandomSearch
from mlsysopt.placement.baselines.saga_schedulers import (
    SAGA_SCHEDULERS,
    SagaBest,
    SagaFailed,
    SagaScheduler,
    SagaSkipped,
)
from mlsysopt.registry import Registry

#: Every baseline by method name: a callable that makes a fresh placer.
BASELINES: Registry[Callable[[], Placer]] = Registry(
    "baseline",
    {
        HEFT.name: HEFT,
        FastestDevice.name: FastestDevice,
        RandomSearch.name: RandomSearch,
        Annealing.name: Annealing,
        EFTGreedy.name: EFTGreedy,
        LocalSearch.name: LocalSearch,
        **{f"saga_{key}": partial(SagaScheduler, key) for key in SAGA_SCHEDULERS},
        SagaBest.name: SagaBest,
    },
)


def get_baseline(name: str) -> Placer:
    """A fresh baseline placer by name; MlsysoptError listing the known names otherwise.

    Args:
        name: A key of :data:`BASELINES` (``heft``, ``random``, ``annealing``, ``saga_cpop``, ...).

    Returns:
        A new placer with default settings.

    Raises:
        MlsysoptError: If ``name`` is not a registered baseline.
    """
    return BASELINES.load(name)()


__all__ = [
    "BASELINES",
    "HEFT",
    "SAGA_SCHEDULERS",
    "Annealing",
    "EFTGreedy",
    "FastestDevice",
    "LocalSearch",
    "RandomSearch",
    "SagaBest",
    "SagaFailed",
    "SagaScheduler",
    "SagaSkipped",
    "fastest_placement",
    "get_baseline",
    "heft_schedule",
]
