"""What a tuner minimizes: one number per measurement, the scoring rule every tuner and report shares.

``latency``: the chosen latency statistic (mean, p50, p95 or p99). ``cost``: the cores a configuration keeps busy
when its p99 meets the SLO, otherwise 1000 + p99/SLO, so that every configuration that meets the SLO beats every
one that does not. Tuners that keep a value table use :meth:`Objective.capped_score`, which stays finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import STATS, Measurement
from mlsysopt.serving.space import Config

OBJECTIVES = ("latency", "cost")
SCORE_CAP = 1e9  # a saturated or failed measurement's score is capped so that value tables stay finite


@dataclass(frozen=True)
class Objective:
    """What a tuner minimizes: a latency statistic, or cost (cores in use) with p99 <= SLO."""

    kind: str = "latency"
    slo_ms: float | None = None
    stat: str = "mean"

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise InvalidSpace(f"unknown objective '{self.kind}' (choose from: {', '.join(OBJECTIVES)})")
        if self.stat not in STATS:
            raise InvalidSpace(f"unknown latency statistic '{self.stat}' (choose from: {', '.join(STATS)})")
        if self.slo_ms is not None and not (math.isfinite(self.slo_ms) and self.slo_ms > 0):
            raise InvalidSpace(f"SLO {self.slo_ms} ms must be a positive number of milliseconds")
        if self.kind == "cost" and self.slo_ms is None:
            raise InvalidSpace("the cost objective needs an SLO (--slo-ms)")

    def meets_slo(self, p99_ms: float) -> bool:
        """Whether a p99 latency meets the SLO (always true without one)."""
        return self.slo_ms is None or p99_ms <= self.slo_ms

    def score_from(self, config: Config, stat_ms: float, p99_ms: float) -> float:
        """The score of ``config`` given (measured or predicted) latency statistic and p99, lower is better.

        ``cost``: cores in use when the SLO is met; otherwise 1000 + p99/SLO, so every configuration that
        meets the SLO beats every one that does not, and among violators the closer one wins.
        """
        if self.kind == "latency":
            return float(stat_ms)
        if p99_ms <= self.slo_ms:  # type: ignore[operator]
            return float(config.threads)
        return 1000.0 + float(p99_ms) / float(self.slo_ms)  # type: ignore[arg-type]

    def score(self, m: Measurement) -> float:
        """The score of a measurement (a saturated one keeps its, typically huge, latency)."""
        return self.score_from(m.config, m.stat(self.stat), m.p99_ms)

    def capped_score(self, m: Measurement) -> float:
        """The score capped at :data:`SCORE_CAP` (a saturated run can report an infinite latency)."""
        s = self.score(m)
        return SCORE_CAP if not math.isfinite(s) else min(s, SCORE_CAP)

    def feasible(self, m: Measurement) -> bool:
        """Whether a measurement meets the SLO and did not saturate."""
        return self.meets_slo(m.p99_ms) and not m.saturated

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"kind": self.kind, "slo_ms": self.slo_ms, "stat": self.stat}
