"""EPNAS started cold: the same search as :mod:`mlsysopt.nas.epnas` without a transfer prior (``epnas_cold``).

The predictor learns from the target's evaluations alone; only the defaults that concern the prior differ. It is
the default of ``nas search`` from 60 evaluations on (:mod:`mlsysopt.nas.defaults`), where the prior costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlsysopt.nas.epnas import EPNAS, PRIORS, EPNASConfig
from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.searcher import SearcherConfig


@dataclass
class EPNASColdConfig(EPNASConfig):
    """EPNAS without transfer: the same knobs, ``prior="none"`` by default (its own defaults; see the module doc).

    Args:
        knobs: Every knob of :class:`EPNASConfig`; the defaults that differ: ``prior="none"``,
            ``predicted_update=0.0``, ``prior_steps=0``, ``handover=0``.
    """

    prior: str = knob("none", choices=PRIORS)
    predicted_update: float = knob(0.0, 0)  # cold, the predictor knows little of the pool: no step on its scores
    prior_steps: int = knob(0, 0, MAX_POOL)  # (no prior to take steps on)
    handover: int = knob(0, 0, MAX_POOL)  # (no prior to hand over from)


class EPNASCold(EPNAS):
    """EPNAS started cold: no prior, the predictor learns from the target's evaluations alone.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`EPNASColdConfig` (None: its defaults).
        prior: Ignored unless ``config.prior`` is ``"auto"`` (cold by default).
    """

    name = "epnas_cold"
    Config: ClassVar[type[SearcherConfig]] = EPNASColdConfig
    uses_prior = False
