"""What a tuner minimizes: one number per measurement, the scoring rule every tuner and report shares.

* ``latency``: the chosen latency statistic (mean, p50, p95 or p99), in ms.
* ``cost``: the cores a configuration keeps busy, when its p99 meets the SLO.
* ``throughput``: the most requests/s a configuration serves with its p99 within the SLO (Triton Model
  Analyzer's usual objective); measured by a rate search (:mod:`mlsysopt.serving.capacity`), scored as
  ms per request (1000 / throughput) so that lower is better like the others.

For ``cost`` and ``throughput`` a measurement that misses the SLO (or saturates) scores :data:`PENALTY` +
p99/SLO, so that every configuration that meets the SLO beats every one that does not; reports print it as
"SLO missed", never as a number. Tuners that keep a value table use :meth:`Objective.capped_score`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import STATS, Measurement
from mlsysopt.serving.space import Config

OBJECTIVES = ("latency", "cost", "throughput")
SCORE_CAP = 1e9  # a saturated or failed measurement's score is capped so that value tables stay finite
PENALTY = 1e6  # scores at or above this missed the SLO (cost and throughput objectives)
SLO_MISSED = "SLO missed"
UNITS = {"latency": "ms", "cost": "cores", "throughput": "req/s"}


@dataclass(frozen=True)
class Objective:
    """What a tuner minimizes: a latency statistic, cost (cores) with p99 <= SLO, or throughput under the SLO.

    Args:
        kind: ``"latency"``, ``"cost"`` (cores in use) or ``"throughput"`` (req/s within the SLO).
        slo_ms: p99 latency SLO in ms, > 0; required for ``cost`` and ``throughput`` (None: no SLO).
        stat: Latency statistic for ``latency``: ``"mean"``, ``"p50"``, ``"p95"`` or ``"p99"``.

    Raises:
        InvalidSpace: For an unknown ``kind`` or ``stat``, a non-positive ``slo_ms``, or ``cost``/``throughput``
            without an SLO.
    """

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
        if self.kind in ("cost", "throughput") and self.slo_ms is None:
            raise InvalidSpace(f"the {self.kind} objective needs an SLO (--slo-ms)")

    @property
    def unit(self) -> str:
        """The unit of :meth:`value` (ms, cores or req/s)."""
        return UNITS[self.kind]

    @property
    def label(self) -> str:
        """What the objective's value is, with its unit, for plots and tables."""
        if self.kind == "latency":
            return f"{self.stat} latency (ms)"
        return "cores in use" if self.kind == "cost" else "throughput within the SLO (req/s)"

    def meets_slo(self, p99_ms: float) -> bool:
        """Whether a p99 latency meets the SLO (always true without one)."""
        return self.slo_ms is None or p99_ms <= self.slo_ms

    def primary(self, m: Measurement) -> float:
        """The measured quantity the objective is about (what an estimator learns): latency stat or throughput."""
        return float(m.throughput) if self.kind == "throughput" else m.stat(self.stat)

    def score_from(self, config: Config, primary: float, p99_ms: float, saturated: bool = False) -> float:
        """The score of ``config`` given (measured or predicted) primary quantity and p99, lower is better."""
        if self.kind == "latency":
            return float(primary)
        if saturated or not p99_ms <= self.slo_ms:  # type: ignore[operator]
            ratio = float(p99_ms) / float(self.slo_ms) if math.isfinite(p99_ms) else SCORE_CAP  # type: ignore[arg-type]
            return PENALTY + min(ratio, SCORE_CAP)
        if self.kind == "cost":
            return float(config.threads)
        return 1000.0 / float(primary) if primary > 0 else PENALTY

    def score(self, m: Measurement) -> float:
        """The score of a measurement (a saturated one keeps its, typically huge, latency)."""
        return self.score_from(m.config, self.primary(m), m.p99_ms, m.saturated and self.kind != "latency")

    def window_scores(self, m: Measurement) -> list[float]:
        """The score of every window of ``m`` (its own score for a single window)."""
        prim = m.window_values("throughput" if self.kind == "throughput" else f"{self.stat}_ms")
        p99 = m.window_values("p99_ms")
        sat = m.saturated and self.kind != "latency"
        return [self.score_from(m.config, a, b, sat) for a, b in zip(prim, p99, strict=True)]

    def score_interval(self, m: Measurement) -> tuple[float, float] | None:
        """The 95% interval of the score from the measurement's intervals (None for a single window)."""
        p = m.interval("throughput" if self.kind == "throughput" else f"{self.stat}_ms")
        q = m.interval("p99_ms")
        if p is None or q is None:
            return None
        sat = m.saturated and self.kind != "latency"
        if self.kind == "latency":
            return p
        ends = [self.score_from(m.config, a, b, sat) for a in p for b in q]
        return (min(ends), max(ends))

    def capped_score(self, m: Measurement) -> float:
        """The score capped at :data:`SCORE_CAP` (a saturated run can report an infinite latency)."""
        s = self.score(m)
        return SCORE_CAP if not math.isfinite(s) else min(s, SCORE_CAP)

    def missed(self, score: float) -> bool:
        """Whether a score of the cost or throughput objective stands for a missed SLO."""
        return self.kind != "latency" and not score < PENALTY

    def value(self, score: float) -> float | None:
        """A score in the objective's unit (ms, cores, req/s); None where the SLO was missed."""
        if not math.isfinite(score) or self.missed(score):
            return None
        return 1000.0 / score if self.kind == "throughput" else float(score)

    def describe(self, score: float) -> str:
        """A score in words: e.g. ``4.21 ms``, ``8 cores``, ``950 req/s`` or ``SLO missed``."""
        v = self.value(score)
        if v is None:
            return SLO_MISSED if self.kind != "latency" else "inf ms"
        return f"{v:.4g} {self.unit}"

    def feasible(self, m: Measurement) -> bool:
        """Whether a measurement meets the SLO and did not saturate."""
        return self.meets_slo(m.p99_ms) and not m.saturated

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"kind": self.kind, "slo_ms": self.slo_ms, "stat": self.stat, "unit": self.unit}
