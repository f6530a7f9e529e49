"""What a measurement of a served model reports and what a backend does.

A :class:`Backend` (the real ONNX Runtime engine or its SimPy model) serves ``workload`` with ``config`` for one
*window* and returns a :class:`Measurement`; :class:`mlsysopt.serving.windows.StableBackend` repeats windows until
they agree and reports their average with 95% confidence intervals. :class:`mlsysopt.serving.objective.Objective`
turns a measurement into the one number a tuner minimizes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import Config, Workload
from mlsysopt.text import plural

STATS = ("mean", "p50", "p95", "p99")
_LATENCIES = tuple(f"{s}_ms" for s in STATS)
#: the quantities every window reports and a stable measurement averages (with intervals)
WINDOW_VALUES = (*_LATENCIES, "throughput")
SATURATION_RATIO = 0.95  # throughput below this fraction of the offered rate counts as saturation


@dataclass
class Measurement:
    """Latency statistics (ms) and health of one configuration under one workload (one window or several).

    Args:
        config: The configuration measured.
        workload: The workload served.
        mean_ms: Mean request latency (ms).
        p50_ms: Median latency (ms).
        p95_ms: 95th-percentile latency (ms).
        p99_ms: 99th-percentile latency (ms); inf when no request completed.
        throughput: Completed requests per second.
        violation_rate: Fraction of offered requests slower than the SLO or dropped, in [0, 1] (None without an SLO).
        mean_queue: Mean number of queued requests, sampled at arrivals.
        max_queue: Largest sampled queue length.
        n_requests: Requests offered.
        completed: Requests that finished.
        dropped: Requests rejected because the queue was full.
        saturated: Whether the server fell behind (drops, a growing queue, or throughput < 95% of offered).
        wall_s: Seconds the measurement took (simulated seconds for the simulator).
        offered_rps: Arrival rate over the window in req/s (NaN if unknown).
        windows: Number of windows averaged.
        stable: Whether the last windows agreed (None: a single window, not checked).
        ci: 95% interval ``[lo, hi]`` per value of ``WINDOW_VALUES`` (several windows only).
        samples: Per-window values of ``WINDOW_VALUES`` (several windows only).
        extra: Backend-specific details (e.g. ``at_rate`` from a capacity search).
    """

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
    offered_rps: float = math.nan  # arrival rate over the window (see :func:`summarize`)
    windows: int = 1  # windows averaged
    stable: bool | None = None  # the last windows agreed (None: a single window, not checked)
    ci: dict = field(default_factory=dict)  # 95% interval [lo, hi] per value in WINDOW_VALUES (several windows)
    samples: dict = field(default_factory=dict)  # per-window values of WINDOW_VALUES (several windows)
    extra: dict = field(default_factory=dict)

    def stat(self, name: str) -> float:
        """The latency statistic ``name`` (mean, p50, p95 or p99) in ms."""
        if name not in STATS:
            raise InvalidSpace(f"unknown latency statistic '{name}' (choose from: {', '.join(STATS)})")
        return float(getattr(self, f"{name}_ms"))

    def interval(self, key: str) -> tuple[float, float] | None:
        """The 95% interval of ``key`` (e.g. ``mean_ms``), or None for a single window."""
        ci = self.ci.get(key)
        return None if ci is None else (float(ci[0]), float(ci[1]))

    def window_values(self, key: str) -> list[float]:
        """The per-window values of ``key`` (the measurement's own value for a single window)."""
        return [float(v) for v in self.samples.get(key, [getattr(self, key)])]

    def to_dict(self) -> dict:
        """A JSON-ready dict (config and workload nested)."""
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["workload"] = self.workload.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        """Inverse of :meth:`to_dict` after a strict JSON round trip (a latency written as null was infinite)."""
        d = dict(data)
        d["config"] = Config.from_dict(d["config"])
        d["workload"] = Workload(**d["workload"])
        for name in _LATENCIES:
            if d.get(name) is None:
                d[name] = math.inf
        if d.get("offered_rps") is None:
            d["offered_rps"] = math.nan
        d["ci"] = {k: [math.inf if x is None else x for x in v] for k, v in (d.get("ci") or {}).items()}
        d["samples"] = {k: [math.inf if x is None else x for x in v] for k, v in (d.get("samples") or {}).items()}
        return cls(**d)


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
    arrival_span_s: float | None = None,
) -> Measurement:
    """Build a :class:`Measurement` from per-request latencies (unfinished requests already given their age).

    Percentiles cover the requests in ``latencies_ms``; dropped requests are counted apart, as SLO violations.
    ``offered_rps`` is the arrivals over ``arrival_span_s`` (first to last arrival) plus the median latency, so
    that draining the last requests of a finite window does not look like a shortfall; ``saturated`` is set when
    any request was dropped, the queue kept growing, or the throughput fell below 95% of the offered rate.
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
    throughput = done / duration_s if duration_s > 0 else 0.0
    offered = math.nan
    if arrival_span_s is not None and n_requests > 1:
        span = arrival_span_s + (float(pct[0]) / 1000.0 if done and math.isfinite(pct[0]) else 0.0)
        offered = n_requests / span if span > 0 else math.nan
    short = math.isfinite(offered) and throughput < SATURATION_RATIO * offered
    return Measurement(
        config=config,
        workload=workload,
        mean_ms=float(lat.mean()),
        p50_ms=float(pct[0]),
        p95_ms=float(pct[1]),
        p99_ms=float(pct[2]),
        throughput=throughput,
        violation_rate=violations,
        mean_queue=float(q.mean()) if q.size else 0.0,
        max_queue=int(q.max()) if q.size else 0,
        n_requests=n_requests,
        completed=done,
        dropped=dropped,
        saturated=bool(dropped > 0 or growing or short),
        wall_s=wall_s,
        offered_rps=offered,
    )


class Backend(ABC):
    """Serves a workload with a configuration for one measurement window and measures it.

    Subclasses set ``cores`` (int: cores of the machine they serve on, or model) and implement :meth:`measure`.

    The base class takes no constructor arguments; subclasses define their own.
    """

    cores: int  # cores of the machine it serves on (or models)

    @abstractmethod
    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """Serve ``workload`` with ``config`` for one window and report what happened.

        ``window`` numbers repeated windows: window k serves the k-th arrival schedule of the seed, the same for
        every configuration (common random numbers), different from window to window.
        """

    def describe(self) -> str:
        """One line saying what serves and what the numbers are (real measurements or a model)."""
        return f"{type(self).__name__} on {plural(self.cores, 'core')}"

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release threads, sessions and processes (no-op by default)."""

    def restart(self) -> None:  # noqa: B027 (optional hook)
        """Serve the next measurement from a fresh start, as a new server would (no-op by default)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BackendWrapper(Backend):
    """Measures through ``backend``: its cores, description, ``close`` and ``restart`` are the wrapped one's."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.cores = backend.cores

    def describe(self) -> str:
        """The wrapped backend's description."""
        return self.backend.describe()

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()

    def restart(self) -> None:
        """Restart the wrapped backend."""
        self.backend.restart()
