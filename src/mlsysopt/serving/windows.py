"""Measurements you can trust: windows repeated until stable (perf_analyzer's rule), reported with 95% intervals.

:class:`StableBackend` wraps any backend. It measures window after window of the same configuration and workload
until the last ``count`` windows agree within ``tolerance`` on mean latency, p99 latency and throughput, or
``max_windows`` have run. The measurement it returns averages the windows used (the last ``count`` when stable,
all of them otherwise), records their values (``samples``), the 95% Student-t interval of each (``ci``), how many
windows ran (``windows``) and whether they agreed (``stable``).

Window ``k`` of every configuration serves the same arrival schedule (common random numbers), and ``measure``'s
``window`` argument picks a fresh block of schedules (round ``r`` of a confirmation uses windows
``r * max_windows ...``), so re-measuring is not a replay of the same arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import WINDOW_VALUES, Backend, BackendWrapper, Measurement
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.stats import mean_ci, stable

#: the quantities whose agreement makes a measurement stable (perf_analyzer watches latency and throughput)
WATCHED = ("mean_ms", "p99_ms", "throughput")


def _mean(values: list[float]) -> float:
    """The mean; exactly the value when all are equal (so ties between configurations stay ties); inf if any is."""
    if not all(math.isfinite(x) for x in values):
        return math.inf
    return values[0] if min(values) == max(values) else float(np.mean(values))


def _pooled(
    parts: Sequence[Measurement],
    samples: dict[str, list[float]],
    windows: int,
    is_stable: bool | None,
    saturated: bool,
    extra: dict[str, Any],
) -> Measurement:
    """One measurement of ``parts`` (one configuration and workload) from their pooled window ``samples``."""
    first = parts[0]
    avg = {k: _mean(v) for k, v in samples.items()}
    viol = [m.violation_rate for m in parts]
    offered = [m.offered_rps for m in parts if math.isfinite(m.offered_rps)]
    return Measurement(
        config=first.config,
        workload=first.workload,
        mean_ms=avg["mean_ms"],
        p50_ms=avg["p50_ms"],
        p95_ms=avg["p95_ms"],
        p99_ms=avg["p99_ms"],
        throughput=avg["throughput"],
        violation_rate=None if viol[0] is None else float(np.mean(viol)),
        mean_queue=float(np.mean([m.mean_queue for m in parts])),
        max_queue=max(m.max_queue for m in parts),
        n_requests=sum(m.n_requests for m in parts),
        completed=sum(m.completed for m in parts),
        dropped=sum(m.dropped for m in parts),
        saturated=saturated,
        wall_s=sum(m.wall_s for m in parts),
        offered_rps=float(np.mean(offered)) if offered else math.nan,
        windows=windows,
        stable=is_stable,
        ci={k: list(mean_ci(v)) for k, v in samples.items()},
        samples=samples,
        extra=extra,
    )


def _majority_saturated(parts: Sequence[Measurement]) -> bool:
    """Saturated when more than half of ``parts`` were: one window of a loaded machine's stall is not saturation.

    The windows a measurement pools and the measurements a confirmation merges use this one rule (the windows had
    used "any", so a tune's verdict could call saturated what its own confirmation did not).
    """
    return sum(bool(m.saturated) for m in parts) * 2 > len(parts)


def combine(windows: Sequence[Measurement], all_windows: int, is_stable: bool) -> Measurement:
    """One measurement averaging ``windows`` (of one configuration and workload), with intervals and samples.

    It is saturated when more than half of the windows were; ``extra["saturated_windows"]`` counts them when any was.
    """
    samples = {k: [float(getattr(w, k)) for w in windows] for k in WINDOW_VALUES}
    extra = dict(windows[-1].extra)
    if n := sum(bool(w.saturated) for w in windows):
        extra["saturated_windows"] = n
    return _pooled(windows, samples, all_windows, is_stable, _majority_saturated(windows), extra)


class StableBackend(BackendWrapper):
    """Repeats windows of ``backend`` until the last ``count`` agree within ``tolerance`` (at most ``max_windows``).

    Args:
        backend: The backend whose windows are repeated.
        count: Number of trailing windows that must agree, >= 1.
        tolerance: Largest relative deviation from their mean, > 0 (0.10 = 10%).
        max_windows: Most windows per measurement, >= ``count``.
        decided: Called with the windows so far once there are ``count`` or more; True ends the measurement there
            (not stable: every window is combined). For a caller that needs only a verdict, e.g. a rate search's
            pass or fail (None: windows run until stable or ``max_windows``).

    Raises:
        InvalidSpace: If ``count < 1``, ``max_windows < count`` or ``tolerance`` is not a positive finite number.
    """

    def __init__(
        self,
        backend: Backend,
        count: int = 3,
        tolerance: float = 0.10,
        max_windows: int = 6,
        decided: Callable[[Sequence[Measurement]], bool] | None = None,
    ) -> None:
        if count < 1 or max_windows < count:
            raise InvalidSpace(f"stability: need 1 <= count ({count}) <= max_windows ({max_windows})")
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise InvalidSpace(f"stability tolerance {tolerance} must be a positive fraction (0.10 = 10%)")
        super().__init__(backend)
        self.count = int(count)
        self.tolerance = float(tolerance)
        self.max_windows = int(max_windows)
        self.decided = decided

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """Windows ``window * max_windows + 0, 1, ...`` until stable; their combined measurement."""
        runs: list[Measurement] = []
        base = int(window) * self.max_windows
        while len(runs) < self.max_windows:
            runs.append(self.backend.measure(config, workload, window=base + len(runs)))
            series = [[getattr(m, k) for m in runs] for k in WATCHED]
            if stable(series, self.count, self.tolerance):
                return combine(runs[-self.count :], len(runs), True)
            if self.count == 1 or (self.decided is not None and len(runs) >= self.count and self.decided(runs)):
                break
        return combine(runs, len(runs), self.count == 1)

    def describe(self) -> str:
        """The wrapped backend, and the stability rule."""
        return (
            f"{self.backend.describe()}; windows until the last {self.count} agree within "
            f"{self.tolerance:.0%} (at most {self.max_windows})"
        )

    def settings(self) -> dict[str, float]:
        """The stability rule, for result.json."""
        return {"count": self.count, "tolerance": self.tolerance, "max_windows": self.max_windows}


def merge(measurements: Sequence[Measurement]) -> Measurement:
    """Several measurements of one configuration and workload as one: every window pooled, intervals recomputed.

    Args:
        measurements: Non-empty measurements of the same configuration and workload.

    Returns:
        Measurement: The pooled measurement (the single one itself when only one is given); it is saturated when
        more than half of the parts were.
    """
    if len(measurements) == 1:
        return measurements[0]
    first, last = measurements[0], measurements[-1]
    samples = {k: [v for m in measurements for v in m.window_values(k)] for k in WINDOW_VALUES}
    windows = sum(m.windows for m in measurements)
    all_stable = all(bool(m.stable) for m in measurements) if first.stable is not None else None
    extra = {**last.extra, "measurements": len(measurements)}
    return _pooled(measurements, samples, windows, all_stable, _majority_saturated(measurements), extra)
