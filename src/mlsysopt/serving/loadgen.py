"""Open-loop Poisson load: arrival schedules and a pacer that submits requests at their scheduled times.

Open loop: an arrival never waits for an earlier request to finish, so a slow server faces a growing queue
rather than a politely slowed client. Latency is measured from the *scheduled* arrival time, so a pacer that
falls behind (a late wake-up) adds to the latency instead of hiding it (no coordinated omission).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import Workload


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times (seconds from the start) of a Poisson process: cumulative exponential gaps of mean 1/rate."""
    if not (np.isfinite(rate) and rate > 0):
        raise InvalidSpace(f"arrival rate {rate} must be a positive number of requests per second")
    if n < 0:
        raise InvalidSpace(f"number of arrivals {n} must be >= 0")
    return np.cumsum(rng.exponential(1.0 / rate, size=int(n)))


def workload_arrivals(workload: Workload, n: int, seed: int = 0) -> np.ndarray:
    """The arrival schedule a backend serves for ``workload``: fixed by (seed, rate, request size)."""
    rng = np.random.default_rng([int(seed), round(workload.rate * 1000), int(workload.request_size)])
    return poisson_arrivals(workload.rate, n, rng)


def sleep_until(t: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``t`` (returns at once if it already has)."""
    delay = t - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def open_loop(
    arrivals: np.ndarray,
    submit: Callable[[int, float], object],
    start: float,
    deadline: float | None = None,
) -> int:
    """Call ``submit(i, start + arrivals[i])`` at each scheduled time (perf_counter clock), in order.

    A late pacer submits the overdue requests at once, each still stamped with its scheduled time. Stops
    before the first arrival scheduled after ``deadline``; returns how many requests were submitted.
    """
    for i, offset in enumerate(arrivals):
        at = start + float(offset)
        if deadline is not None and at > deadline:
            return i
        sleep_until(at)
        submit(i, at)
    return len(arrivals)


def lateness_ms(scheduled: np.ndarray, submitted: np.ndarray) -> np.ndarray:
    """How late (ms, >= 0) each request was handed to the server relative to its schedule."""
    return np.maximum(np.asarray(submitted, dtype=np.float64) - np.asarray(scheduled, dtype=np.float64), 0.0) * 1000.0
