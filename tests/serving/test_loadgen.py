"""Open-loop Poisson load: arrival statistics, determinism, and pacing that never shifts the schedule."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.loadgen import open_loop, poisson_arrivals, workload_arrivals
from mlsysopt.serving.space import Workload

pytestmark = pytest.mark.realtime  # arrivals against the clock: make test runs them at normal priority


def test_mean_gap_is_one_over_rate() -> None:
    rate, n = 500.0, 20_000
    gaps = np.diff(poisson_arrivals(rate, n, np.random.default_rng(3)), prepend=0.0)
    # The mean of n exponential gaps has relative standard deviation 1/sqrt(n) (0.7% here): 5% is > 7 sigma.
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: coefficient of variation 1


def test_arrivals_are_increasing_and_start_after_zero() -> None:
    t = poisson_arrivals(1000.0, 2000, np.random.default_rng(0))
    assert t.shape == (2000,)
    assert t[0] > 0
    assert np.all(np.diff(t) > 0)


def test_arrivals_are_deterministic_by_rng() -> None:
    a = poisson_arrivals(100.0, 50, np.random.default_rng(7))
    np.testing.assert_array_equal(a, poisson_arrivals(100.0, 50, np.random.default_rng(7)))
    assert not np.array_equal(a, poisson_arrivals(100.0, 50, np.random.default_rng(8)))


def test_workload_arrivals_are_fixed_by_seed_rate_and_size() -> None:
    w = Workload(rate=300.0, request_size=2)
    np.testing.assert_array_equal(workload_arrivals(w, 40, seed=1), workload_arrivals(w, 40, seed=1))
    assert not np.array_equal(workload_arrivals(w, 40, seed=1), workload_arrivals(w, 40, seed=2))
    assert not np.array_equal(workload_arrivals(w, 40, 1), workload_arrivals(Workload(300.0, 1), 40, 1))


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_rate(rate: float) -> None:
    with pytest.raises(InvalidSpace, match="rate"):
        poisson_arrivals(rate, 10, np.random.default_rng(0))


def test_open_loop_keeps_the_schedule_when_the_server_is_slow() -> None:
    arrivals = np.arange(1, 11) * 0.001  # one request per ms
    seen: list[tuple[int, float, float]] = []

    def slow_submit(i: int, scheduled: float) -> None:
        seen.append((i, scheduled, time.perf_counter()))
        time.sleep(0.003)  # slower than the arrival rate: a closed loop would drift

    start = time.perf_counter() + 0.001
    assert open_loop(arrivals, slow_submit, start) == 10
    assert [i for i, _, _ in seen] == list(range(10))
    np.testing.assert_allclose([s for _, s, _ in seen], start + arrivals)
    assert all(now >= s for _, s, now in seen)  # never early


def test_open_loop_stops_at_the_deadline() -> None:
    arrivals = np.array([0.001, 0.002, 0.5, 0.6])
    start = time.perf_counter()
    got: list[int] = []
    assert open_loop(arrivals, lambda i, _s: got.append(i), start, deadline=start + 0.1) == 2
    assert got == [0, 1]
    assert time.perf_counter() - start < 0.3
