"""The two phases around a search that make its answer trustworthy: the machine's noise, and the confirmation.

* :func:`measure_noise` — at the start of a tune, repeated single windows of one configuration (the runtime's
  default): the coefficient of variation of their mean latency, p99 and throughput is how much this machine
  moves a measurement by itself right now.
* :func:`confirm` — at the end, the top candidates of the search and the runtime's default configuration are
  re-measured interleaved (A B C D A B C D ..., ``rounds`` rounds; each a stable measurement on fresh arrivals,
  every round on a fresh server side (:meth:`Backend.restart`) so that the rounds vary as two runs do),
  so drift of the machine hits every candidate alike; each candidate's confirmed value is the median of its
  windows' scores over all rounds, with a distribution-free 95% interval of that median; the pick is the best
  confirmed median (among those that meet the SLO when there is one). The search-time values are kept beside.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlsysopt.io import to_jsonable
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.stats import cv, median_ci
from mlsysopt.serving.windows import merge

NOISE_WINDOW_BASE = 10_000  # window numbers of the noise phase (apart from the search's and the confirmation's)
CONFIRM_WINDOW_BASE = 20_000


def measure_noise(
    backend: Backend, config: Config, workload: Workload, windows: int = 5, on_measure: Callable | None = None
) -> dict[str, Any]:
    """Coefficient of variation of ``windows`` single windows of ``config`` (mean latency, p99, throughput).

    Args:
        backend: Measures the windows (usually a single-window backend).
        config: The configuration measured (the runtime's default).
        workload: The workload served.
        windows: Number of windows to measure.
        on_measure: Called with each measurement as it is made (None: not called).

    Returns:
        dict[str, Any]: JSON-ready ``config``, ``rate``, ``windows``, ``cv_mean_ms``, ``cv_p99_ms``,
        ``cv_throughput`` (inf when undefined) and the per-window ``mean_ms``.
    """
    runs = []
    for k in range(windows):
        runs.append(backend.measure(config, workload, window=NOISE_WINDOW_BASE + k))
        if on_measure is not None:
            on_measure(runs[-1])
    return to_jsonable(
        {
            "config": config.to_dict(),
            "rate": workload.rate,
            "windows": windows,
            "cv_mean_ms": cv([m.mean_ms for m in runs]),
            "cv_p99_ms": cv([m.p99_ms for m in runs]),
            "cv_throughput": cv([m.throughput for m in runs]),
            "mean_ms": [m.mean_ms for m in runs],
        }
    )


@dataclass
class Confirmed:
    """One candidate after confirmation: the median of its windows' scores, that median's interval, and more."""

    config: Config
    value: float  # median score over every window of every round
    interval: tuple[float, float]  # 95% interval of that median (order statistics)
    rounds: list[float]  # the score of each round's measurement
    measurement: Measurement  # every round merged
    search_value: float | None  # the score the search measured (None for the default if the search never did)
    is_default: bool = False
    meets_slo: bool | None = None

    def to_dict(self, objective: Objective) -> dict[str, Any]:
        """A JSON-ready dict, the value also in words (e.g. "SLO missed")."""
        return to_jsonable(
            {
                "config": self.config.to_dict(),
                "label": self.config.label(),
                "confirmed_value": self.value,
                "confirmed_interval": list(self.interval),
                "confirmed": objective.describe(self.value),
                "rounds": self.rounds,
                "search_value": self.search_value,
                "search": None if self.search_value is None else objective.describe(self.search_value),
                "is_default": self.is_default,
                "meets_slo": self.meets_slo,
                "mean_ms": self.measurement.mean_ms,
                "p99_ms": self.measurement.p99_ms,
                "throughput": self.measurement.throughput,
                "windows": self.measurement.windows,
            }
        )


@dataclass
class Confirmation:
    """The confirmation of one rate: every candidate confirmed, and the pick.

    Args:
        workload: The workload confirmed.
        candidates: Every confirmed candidate (the default configuration included).
        pick: The chosen candidate.
        rounds: Number of interleaved rounds.
        measurements: Every measurement, in the order made.
        default: The runtime's default configuration (None if not recorded).
    """

    workload: Workload
    candidates: list[Confirmed]
    pick: Confirmed
    rounds: int
    measurements: list[Measurement] = field(default_factory=list)  # in the order they were made
    default: Config | None = None  # the runtime's default configuration (confirmed among the candidates)

    @property
    def default_candidate(self) -> Confirmed:
        """The confirmed default (the last candidate when ``default`` is not recorded)."""
        return next((c for c in self.candidates if c.config == self.default), self.candidates[-1])

    def to_dict(self, objective: Objective) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "rate": self.workload.rate,
            "rounds": self.rounds,
            "order": "interleaved: every candidate once per round, the same order each round, each round restarted",
            "pick": self.pick.to_dict(objective),
            "candidates": [c.to_dict(objective) for c in self.candidates],
        }


def confirm(
    backend: Backend,
    candidates: Sequence[Config],
    default: Config,
    workload: Workload,
    objective: Objective,
    rounds: int = 3,
    search_scores: dict[Config, float] | None = None,
    on_measure: Callable[[Measurement], None] | None = None,
) -> Confirmation:
    """Re-measure ``candidates`` and ``default`` interleaved for ``rounds`` rounds and pick on confirmed medians.

    Args:
        backend: Measures the candidates; it is restarted before every round.
        candidates: Top configurations of the search.
        default: The runtime's default configuration, confirmed alongside.
        workload: The workload served.
        objective: Scores every window.
        rounds: Number of interleaved rounds.
        search_scores: Score each configuration got during the search, kept for comparison (None: none).
        on_measure: Called with each measurement as it is made (None: not called).

    Returns:
        Confirmation: Every candidate confirmed and the pick (the lowest confirmed median among those meeting the
        SLO; the lowest p99 when none does).
    """
    configs = list(dict.fromkeys([*candidates, default]))
    per: dict[Config, list[Measurement]] = {c: [] for c in configs}
    order: list[Measurement] = []
    for r in range(rounds):
        backend.restart()  # every round on a fresh server side: its spread is what a new `serve` run sees
        for c in configs:
            m = backend.measure(c, workload, window=CONFIRM_WINDOW_BASE + r)
            per[c].append(m)
            order.append(m)
            if on_measure is not None:
                on_measure(m)
    out = []
    for c in configs:
        scores = [s for m in per[c] for s in objective.window_scores(m)]
        merged = merge(per[c])
        meets = None if objective.slo_ms is None else objective.feasible(merged)
        out.append(
            Confirmed(
                config=c, value=float(statistics.median(scores)), interval=median_ci(scores),
                rounds=[objective.score(m) for m in per[c]], measurement=merged,
                search_value=(search_scores or {}).get(c), is_default=c == default and c not in candidates,
                meets_slo=meets,
            )
        )  # fmt: skip
    pool = [c for c in out if c.meets_slo is not False] or out
    if pool is out and objective.slo_ms is not None:  # none meets the SLO: the lowest p99
        pick = min(out, key=lambda c: c.measurement.p99_ms)
    else:
        pick = min(pool, key=lambda c: c.value)
    return Confirmation(workload, out, pick, rounds, order, default)
