"""What a measurement of a served model reports, what a backend does, and what a tuner minimizes.

A :class:`Backend` (the real ONNX Runtime engine or its SimPy model) serves ``workload`` with ``config`` for a
while and returns a :class:`Measurement`. An :class:`Objective` turns a measurement into the one number a tuner
minimizes: the latency statistic (``latency``), or the cores in use subject to p99 <= SLO (``cost``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import Config, Workload

STATS = ("mean", "p50", "p95", "p99")
OBJECTIVES = ("latency", "cost")


@dataclass
class Measurement:
    """Latency statistics (ms) and health of one configuration under one workload."""

    config: Config
    workload: Workload
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput: float  # completed requests per second
    violation_rate: float | None  # fraction of requests slower than the SLO (None without an SLO)
    mean_queue: float  # mean number of requests waiting, sampled at arrivals
    max_queue: int
    n_requests: int  # requests offered
    completed: int
    dropped: int  # rejected because the queue was full (saturation)
    saturated: bool
    wall_s: float  # time the measurement took (simulated seconds for the simulator)
    extra: dict = field(default_factory=dict)

    def stat(self, name: str) -> float:
        """The latency statistic ``name`` (mean, p50, p95 or p99) in ms."""
        if name not in STATS:
            raise InvalidSpace(f"unknown latency statistic '{name}' (choose from: {', '.join(STATS)})")
        return float(getattr(self, f"{name}_ms"))

    def to_dict(self) -> dict:
        """A JSON-ready dict (config and workload nested)."""
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["workload"] = self.workload.to_dict()
        return d


def summarize(
    config: Config,
    workload: Workload,
    latencies_ms: np.ndarray,
    *,
    n_requests: int,
    dropped: int,
    queue_samples: np.ndarray,
    duration_s: float,
    slo_ms: float | None,
    wall_s: float,
) -> Measurement:
    """Build a :class:`Measurement` from per-request latencies (unfinished requests already given their age).

    Percentiles cover the requests in ``latencies_ms``; dropped requests are counted apart, as SLO violations.
    ``saturated`` is set when any request was dropped or the queue kept growing over the window.
    """
    lat = np.asarray(latencies_ms, dtype=np.float64)
    done = lat.size
    if done == 0:
        lat = np.array([math.inf])
    pct = np.percentile(lat, [50, 95, 99]) if done else np.full(3, math.inf)
    q = np.asarray(queue_samples, dtype=np.float64)
    growing = q.size >= 8 and q[-(q.size // 4) :].mean() > 4 * max(q[: q.size // 4].mean(), 1.0)
    violations = None
    if slo_ms is not None:
        violations = (float((lat > slo_ms).sum()) + dropped) / max(n_requests, 1) if done else 1.0
    return Measurement(
        config=config,
        workload=workload,
        mean_ms=float(lat.mean()),
        p50_ms=float(pct[0]),
        p95_ms=float(pct[1]),
        p99_ms=float(pct[2]),
        throughput=done / duration_s if duration_s > 0 else 0.0,
        violation_rate=violations,
        mean_queue=float(q.mean()) if q.size else 0.0,
        max_queue=int(q.max()) if q.size else 0,
        n_requests=n_requests,
        completed=done,
        dropped=dropped,
        saturated=bool(dropped > 0 or growing),
        wall_s=wall_s,
    )


class Backend(ABC):
    """Serves a workload with a configuration and measures it."""

    cores: int  # cores of the machine it serves on (or models)

    @abstractmethod
    def measure(self, config: Config, workload: Workload) -> Measurement:
        """Serve ``workload`` with ``config`` for one measurement window and report what happened."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release threads and sessions (no-op by default)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

    def feasible(self, m: Measurement) -> bool:
        """Whether a measurement meets the SLO and did not saturate."""
        return self.meets_slo(m.p99_ms) and not m.saturated

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"kind": self.kind, "slo_ms": self.slo_ms, "stat": self.stat}
