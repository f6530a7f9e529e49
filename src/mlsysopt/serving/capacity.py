"""Throughput within a p99 SLO, measured: a rate search per configuration (what the throughput objective uses).

Open-loop load fixes the offered rate, so a configuration's throughput under the SLO is found by searching the
rate, as perf_analyzer sweeps load: start at the workload's rate, double while the p99 meets the SLO and the
server keeps up (no saturation) — or, when the starting rate already misses, halve until it is met — then bisect
between the last rate that met it and the first that did not. The answer is the measurement at the highest rate
that met the SLO (its ``extra["at_rate"]`` says which), labelled with the workload the tuner asked about; when no
rate down to 1/2^doublings of the start meets it, the starting measurement (scored "SLO missed").
"""

from __future__ import annotations

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Backend, BackendWrapper, Measurement
from mlsysopt.serving.space import MAX_RATE, Config, Workload


class CapacityBackend(BackendWrapper):
    """Measures each configuration's highest rate with p99 <= ``slo_ms`` and no saturation (doubling, bisection).

    Args:
        backend: The backend that measures each tried rate.
        slo_ms: p99 latency SLO in ms that a rate must meet.
        doublings: Most doublings (or halvings, when the starting rate misses) of the rate, >= 0.
        bisections: Bisection steps between the last good and first bad rate, >= 0.

    Raises:
        InvalidSpace: If ``doublings`` or ``bisections`` is negative.
    """

    def __init__(self, backend: Backend, slo_ms: float, doublings: int = 6, bisections: int = 2) -> None:
        if doublings < 0 or bisections < 0:
            raise InvalidSpace(f"capacity search: doublings {doublings} and bisections {bisections} must be >= 0")
        super().__init__(backend)
        self.slo_ms = float(slo_ms)
        self.doublings = int(doublings)
        self.bisections = int(bisections)

    def _ok(self, m: Measurement) -> bool:
        return m.p99_ms <= self.slo_ms and not m.saturated

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """The measurement at the highest rate found that meets the SLO (see the module docstring)."""
        tried: list[tuple[float, bool]] = []

        def at(rate: float) -> Measurement:
            m = self.backend.measure(config, Workload(rate, workload.request_size), window)
            tried.append((rate, self._ok(m)))
            return m

        best = first = at(workload.rate)
        good, bad = (workload.rate, None) if self._ok(first) else (None, workload.rate)
        if good is None:  # the starting rate is already too much: halve until the SLO is met
            for _ in range(self.doublings):
                m = at(bad / 2)
                if self._ok(m):
                    good, best = bad / 2, m
                    break
                bad = bad / 2
        else:
            for _ in range(self.doublings):
                rate = min(2 * good, MAX_RATE)
                if rate <= good:
                    break
                m = at(rate)
                if not self._ok(m):
                    bad = rate
                    break
                good, best = rate, m
        if good is not None and bad is not None:
            for _ in range(self.bisections):
                mid = (good + bad) / 2
                m = at(mid)
                if self._ok(m):
                    good, best = mid, m
                else:
                    bad = mid
        out = best
        out.extra = {**out.extra, "at_rate": out.workload.rate, "rates_tried": [list(t) for t in tried]}
        out.workload = workload
        return out

    def describe(self) -> str:
        """The wrapped backend, and the rate search."""
        return f"{self.backend.describe()}; throughput within p99 <= {self.slo_ms:g} ms by a rate search"
