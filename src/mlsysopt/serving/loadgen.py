"""Open-loop Poisson load: arrival schedules, and a load generator that paces them from its own process.

Open loop: an arrival never waits for an earlier request to finish, so a slow server faces a growing queue
rather than a politely slowed client. Latency is measured from the *scheduled* arrival time, so a pacer that
falls behind (a late wake-up) adds to the latency instead of hiding it (no coordinated omission).

:class:`LoadGenerator` runs the pacer in a separate process, as perf_analyzer or Locust run apart from the server:
the server's worker threads and the pacer do not share a GIL, so a busy server cannot delay the arrivals it is
measured on. The pacer sends one small message per request over a pipe; the server's receiving thread hands each
to the server. Both processes read the same clock (``time.perf_counter`` is ``CLOCK_MONOTONIC`` on Linux, one
clock for the whole machine), so the server stamps latencies against the schedule the pacer followed.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import struct
import time
from collections.abc import Callable

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import Workload

_MSG = struct.Struct("<qd")  # (request index, time the pacer sent it), or one of the control messages below
_END, _START, _READY = -1, -2, -3  # a window ended (value: worst lateness, s); it starts at value; the pacer is up
_START_LEAD_S = 0.005  # between the pacer reading a schedule and the window's start


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times (seconds from the start) of a Poisson process: cumulative exponential gaps of mean 1/rate.

    Args:
        rate: Arrival rate in requests/s, > 0.
        n: Number of arrivals, >= 0.
        rng: The random generator to draw the gaps from.

    Returns:
        np.ndarray: Increasing arrival times in seconds.

    Shapes:
        output: (n,) float64

    Raises:
        InvalidSpace: If ``rate`` is not positive and finite or ``n`` is negative.
    """
    if not (np.isfinite(rate) and rate > 0):
        raise InvalidSpace(f"arrival rate {rate} must be a positive number of requests per second")
    if n < 0:
        raise InvalidSpace(f"number of arrivals {n} must be >= 0")
    return np.cumsum(rng.exponential(1.0 / rate, size=int(n)))


def window_requests(rate: float, n_max: int, window_s: float | None) -> int:
    """Requests in one window: ``n_max``, or the arrivals of ``window_s`` seconds at ``rate`` if that is fewer.

    A window so lasts about ``window_s`` seconds or ``n_max`` requests, whichever comes first (at least one request).

    Args:
        rate: Arrival rate in requests/s, > 0.
        n_max: Most requests per window, >= 1.
        window_s: Seconds of arrivals per window (None: always ``n_max``).

    Returns:
        int: The number of requests of a window.
    """
    if window_s is None:
        return int(n_max)
    return int(max(1, min(int(n_max), math.ceil(rate * window_s))))


def workload_arrivals(workload: Workload, n: int, seed: int = 0, window: int = 0) -> np.ndarray:
    """The arrival schedule a backend serves in window ``window`` of ``workload``: fixed by (seed, workload, window).

    Args:
        workload: The workload (its rate and request size seed the schedule too).
        n: Number of arrivals, >= 0.
        seed: Base seed.
        window: Window number; each window gets a different schedule.

    Returns:
        np.ndarray: Arrival times in seconds from the window's start.

    Shapes:
        output: (n,) float64

    Raises:
        InvalidSpace: If ``n`` is negative.
    """
    key = [int(seed), round(workload.rate * 1000), int(workload.request_size), int(window)]
    return poisson_arrivals(workload.rate, n, np.random.default_rng(key))


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


def _pacer_main(conn: object) -> None:
    """The load generator process: for each window, send every request at its scheduled time."""
    conn.send_bytes(_MSG.pack(_READY, 0.0))  # type: ignore[attr-defined]
    while True:
        try:
            job = conn.recv()  # type: ignore[attr-defined]
        except (EOFError, OSError):  # the server went away
            return
        if job is None:
            return
        arrivals, deadline_s = job
        start = time.perf_counter() + _START_LEAD_S
        deadline = start + deadline_s
        worst = 0.0

        def send(i: int, at: float) -> None:
            nonlocal worst
            now = time.perf_counter()
            worst = max(worst, now - at)
            conn.send_bytes(_MSG.pack(i, now))  # type: ignore[attr-defined]

        try:
            conn.send_bytes(_MSG.pack(_START, start))  # type: ignore[attr-defined]
            open_loop(arrivals, send, start, deadline)
            conn.send_bytes(_MSG.pack(_END, worst))  # type: ignore[attr-defined]
        except (BrokenPipeError, OSError):
            return


class LoadGenerator:
    """An open-loop Poisson pacer in its own (spawned) process; :meth:`run` serves one window's arrivals.

    The constructor takes no arguments; it spawns the pacer process and waits up to 60 s for it.

    Raises:
        InvalidSpace: If the pacer process does not start within 60 s.
    """

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_pacer_main, args=(child,), name="mlsysopt-loadgen", daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(60) or _MSG.unpack(self._conn.recv_bytes())[0] != _READY:
            self.close()
            raise InvalidSpace("the load generator process did not start within 60 s")

    @property
    def pid(self) -> int | None:
        """The load generator's process id."""
        return self._proc.pid

    def run(
        self, arrivals: np.ndarray, submit: Callable[[int, float, float], object], deadline_s: float
    ) -> tuple[float, int, float]:
        """Pace ``arrivals`` (s from the start) from the other process; ``submit(i, scheduled, received)`` each.

        The window starts when the pacer has read the schedule (it says when) and ends ``deadline_s`` after its
        start: arrivals scheduled later are not sent. Returns (start time, requests sent, worst pacer lateness, ms).
        """
        self._conn.send((np.asarray(arrivals, dtype=np.float64), float(deadline_s)))
        sent, start = 0, 0.0
        while True:
            i, value = _MSG.unpack(self._conn.recv_bytes())
            if i == _START:
                start = value
            elif i == _END:
                return start, sent, value * 1000.0
            else:
                submit(i, start + float(arrivals[i]), time.perf_counter())
                sent += 1

    def close(self) -> None:
        """Stop the load generator process."""
        if self._proc.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self._conn.send(None)
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join()
        self._conn.close()
