"""The SimPy engine model: light and heavy load, batching, determinism, contention, overload, M/D/1."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Backend
from mlsysopt.serving.loadgen import poisson_arrivals
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Workload

SYN = ServiceProfile.synthetic(cores=8)


def test_is_a_backend_on_the_profile_machine() -> None:
    engine = SimulatedEngine(SYN)
    assert isinstance(engine, Backend)
    assert engine.cores == 8


def test_light_load_completes_everything_at_the_service_time_of_one_row() -> None:
    engine = SimulatedEngine(SYN, n_requests=300, slo_ms=50.0)
    cfg = Config(instances=1, max_batch=8, batch_timeout_ms=0.0, intra_threads=2, inter_threads=1)
    m = engine.measure(cfg, Workload(rate=20.0))
    s = SYN.service_ms(1, 2, 1)
    assert (m.completed, m.dropped, m.saturated, m.n_requests) == (300, 0, False, 300)
    assert m.p50_ms == pytest.approx(s)
    assert s - 1e-9 <= m.mean_ms <= s * 1.1  # a rare arrival during a batch waits a little
    assert m.extra["mean_batch"] < 1.05
    assert m.violation_rate == 0.0
    assert m.wall_s == pytest.approx(300 / 20.0, rel=0.15)
    assert m.throughput == pytest.approx(20.0, rel=0.15)


def test_timeout_adds_waiting_at_light_load() -> None:
    engine = SimulatedEngine(SYN, n_requests=200)
    m = engine.measure(Config(1, 8, 5.0, 1, 1), Workload(rate=10.0))
    assert m.p50_ms == pytest.approx(5.0 + SYN.service_ms(1, 1, 1), rel=0.01)


def test_request_size_sets_rows_per_batch() -> None:
    engine = SimulatedEngine(SYN, n_requests=100)
    m = engine.measure(Config(1, 8, 0.0, 1, 1), Workload(rate=5.0, request_size=4))
    assert m.p50_ms == pytest.approx(SYN.service_ms(4, 1, 1), rel=0.01)


def scripted(arrivals_s: list[float], **kwargs: object) -> SimulatedEngine:
    """An engine on a flat profile (0.9 ms + 0.1 ms per row, no thread effects) with a fixed arrival schedule."""
    flat = ServiceProfile(0.9, 0.1, 0.0, 0.0, 0.0, 0.0, cores=4)
    engine = SimulatedEngine(flat, n_requests=len(arrivals_s), **kwargs)
    engine.arrivals = lambda _w, _window=0: np.array(arrivals_s)  # type: ignore[method-assign]
    return engine


def test_idle_workers_form_batches_one_at_a_time() -> None:
    # r0 waits for r1 (batch full, done 1.6 ms); the idle second worker then heads the line: r2 waits out its
    # 1 ms timeout alone (done 2.6 ms); r3 likewise. Latencies 1.6, 1.1, 2.0, 2.0 ms.
    m = scripted([0.0, 0.0005, 0.0006, 0.010]).measure(Config(2, 2, 1.0, 1, 1), Workload(rate=100.0))
    assert m.mean_ms == pytest.approx((1.6 + 1.1 + 2.0 + 2.0) / 4)
    assert m.p50_ms == pytest.approx(1.8)
    assert (m.extra["batches"], m.completed) == (3, 4)
    assert m.extra["mean_batch"] == pytest.approx(4 / 3)


def test_a_late_first_request_takes_only_what_is_queued() -> None:
    # one worker: [r0, r1] at r0's timeout (1 ms), done 2.1 ms; r2 and r3 arrive meanwhile and r2's timeout has
    # passed when the worker frees, so [r2, r3] starts at once (done 3.2 ms); r4 waits out its timeout alone.
    m = scripted([0.0, 0.0005, 0.00105, 0.0011, 0.005]).measure(Config(1, 4, 1.0, 1, 1), Workload(rate=100.0))
    assert m.mean_ms == pytest.approx((2.1 + 1.6 + 2.15 + 2.1 + 2.0) / 5)
    assert m.extra["batches"] == 3
    assert m.max_queue == 1  # r3 found r2 waiting
    assert m.wall_s == pytest.approx(0.007)


def test_batching_under_heavy_load_raises_batch_size_and_throughput() -> None:
    engine = SimulatedEngine(SYN, n_requests=400)
    work = Workload(rate=1000.0)  # 1.6 ms per unbatched request: one worker serves at most 625/s
    single = engine.measure(Config(1, 1, 0.0, 1, 1), work)
    batched = engine.measure(Config(1, 16, 2.0, 1, 1), work)
    assert single.extra["mean_batch"] == 1.0
    assert batched.extra["mean_batch"] > 2.0
    assert batched.throughput > 1.3 * single.throughput
    assert batched.mean_ms < single.mean_ms
    assert single.saturated and not batched.saturated


def test_same_config_and_workload_give_identical_measurements() -> None:
    engine = SimulatedEngine(SYN, n_requests=300)
    cfg, work = Config(2, 8, 2.0, 2, 1), Workload(rate=800.0)
    assert engine.measure(cfg, work) == engine.measure(cfg, work)
    assert SimulatedEngine(SYN, n_requests=300).measure(cfg, work) == engine.measure(cfg, work)
    other_seed = SimulatedEngine(SYN, n_requests=300, seed=1).measure(cfg, work)
    assert other_seed.mean_ms != engine.measure(cfg, work).mean_ms


def test_every_config_sees_the_same_arrivals() -> None:
    flat = ServiceProfile(1.0, 0.5, 0.9, 0.0, 0.0, 0.0, cores=8)  # inter threads change nothing
    engine = SimulatedEngine(flat, n_requests=300)
    work = Workload(rate=600.0)
    a = engine.measure(Config(2, 4, 1.0, 2, 1), work)
    b = engine.measure(Config(2, 4, 1.0, 2, 2), work)  # one more thread, same service: same run
    assert (a.mean_ms, a.p99_ms, a.mean_queue, a.extra) == (b.mean_ms, b.p99_ms, b.mean_queue, b.extra)
    np.testing.assert_array_equal(engine.arrivals(work), engine.arrivals(work))
    engine_schedule = poisson_arrivals(work.rate, 300, np.random.default_rng([0, 600_000, 1]))  # as the engine's
    np.testing.assert_array_equal(engine.arrivals(work), engine_schedule)
    assert not np.array_equal(engine.arrivals(work), engine.arrivals(Workload(rate=601.0)))


def test_noise_is_reproducible_per_config() -> None:
    cfg, work = Config(1, 4, 1.0, 1, 1), Workload(rate=300.0)
    quiet = SimulatedEngine(SYN, n_requests=200).measure(cfg, work)
    noisy = SimulatedEngine(SYN, n_requests=200, noise=0.2)
    m1, m2 = noisy.measure(cfg, work), noisy.measure(cfg, work)
    assert m1 == m2
    assert m1.mean_ms != quiet.mean_ms
    assert m1.extra["mean_service_ms"] != quiet.extra["mean_service_ms"]


@pytest.mark.parametrize(("cores", "workers"), [(2, 2), (4, 4)])
def test_oversubscribed_threads_stretch_each_batch(cores: int, workers: int) -> None:
    engine = SimulatedEngine(ServiceProfile.synthetic(cores=cores), n_requests=300)
    work = Workload(rate=2000.0)
    alone = engine.measure(Config(1, 1, 0.0, 2, 1), work)
    crowded = engine.measure(Config(workers, 1, 0.0, 2, 1), work)  # 2*workers threads on `cores` cores
    s = ServiceProfile.synthetic(cores).service_ms(1, 2, 1)
    assert alone.extra["mean_service_ms"] == pytest.approx(s)
    assert crowded.extra["mean_service_ms"] > 1.5 * s


def test_overload_terminates_saturated_with_drops() -> None:
    engine = SimulatedEngine(SYN, n_requests=400, queue_cap=64, slo_ms=20.0)
    start = time.perf_counter()
    m = engine.measure(Config(1, 1, 0.0, 1, 1), Workload(rate=20000.0))
    assert time.perf_counter() - start < 1.0
    assert m.saturated and m.dropped > 0
    assert m.max_queue == 64
    assert m.dropped + m.completed == m.n_requests == 400
    assert m.violation_rate > 0.5


def test_window_closes_after_max_seconds_of_simulated_time() -> None:
    engine = SimulatedEngine(SYN, n_requests=400, max_seconds=2.0)
    m = engine.measure(Config(), Workload(rate=20.0))
    assert m.wall_s == pytest.approx(2.0)
    assert m.n_requests < 60  # only the requests that arrived in the window were offered
    engine = SimulatedEngine(ServiceProfile(100.0, 1.0, 0.0, 0.0, 0.0, 0.0, cores=1), n_requests=50, max_seconds=1.0)
    slow = engine.measure(Config(), Workload(rate=1000.0))  # 10 req/s capacity; unfinished count with their age
    assert slow.wall_s == pytest.approx(1.0)
    assert slow.p99_ms > 500.0
    assert slow.extra["finished"] == 9  # 101 ms a batch of one
    assert m.extra["finished"] == m.completed


def test_knob_above_the_machine_is_rejected() -> None:
    engine = SimulatedEngine(ServiceProfile.synthetic(cores=4))
    with pytest.raises(InvalidSpace, match="intra_threads=8"):
        engine.measure(Config(1, 1, 0.0, 8, 1), Workload(rate=10.0))
    with pytest.raises(InvalidSpace, match="instances=5"):
        engine.measure(Config(5, 1, 0.0, 1, 1), Workload(rate=10.0))


@pytest.mark.parametrize(
    "kwargs", [{"n_requests": 0}, {"max_seconds": 0.0}, {"slo_ms": -1.0}, {"queue_cap": 0}, {"noise": -0.1}]
)
def test_bad_engine_settings_are_rejected(kwargs: dict) -> None:
    with pytest.raises(InvalidSpace):
        SimulatedEngine(SYN, **kwargs)


def test_md1_mean_latency_matches_pollaczek_khinchine() -> None:
    s_ms = 2.0
    constant = ServiceProfile(1.9, 0.1, 0.0, 0.0, 0.0, 0.0, cores=1)
    rate = 250.0  # rho = 0.5
    rho = rate * s_ms / 1000.0
    expected = s_ms + rho * s_ms / (2 * (1 - rho))
    engine = SimulatedEngine(constant, n_requests=20000, max_seconds=1e4)
    m = engine.measure(Config(1, 1, 0.0, 1, 1), Workload(rate=rate))
    assert m.completed == 20000
    assert m.mean_ms == pytest.approx(expected, rel=0.1)


def test_a_measurement_is_fast() -> None:
    engine = SimulatedEngine(ServiceProfile.synthetic(cores=32), n_requests=400)
    cfg, work = Config(4, 8, 2.0, 2, 1), Workload(rate=2000.0)
    engine.measure(cfg, work)
    start = time.perf_counter()
    for _ in range(5):
        engine.measure(cfg, work)
    assert (time.perf_counter() - start) / 5 < 0.1  # ~5 ms here; generous for a loaded CI machine


def test_handoff_delays_every_request_and_wake_only_batches_after_idling() -> None:
    from dataclasses import replace

    base = ServiceProfile(0.5, 0.5, 0.0, 0.0, 0.0, 0.0, cores=1)  # 1 ms per single-row batch
    cfg = Config(1, 1, 0.0, 1, 1)
    light = Workload(rate=10.0)  # every request finds the worker idle
    plain = SimulatedEngine(base, n_requests=200).measure(cfg, light)
    slow = SimulatedEngine(replace(base, handoff_ms=0.3, wake_ms=0.2), n_requests=200).measure(cfg, light)
    assert plain.p50_ms == pytest.approx(1.0) and slow.p50_ms == pytest.approx(1.5)  # 0.3 hand-off + 0.2 wake
    # back to back (a burst queued at once): only the first batch of the burst wakes its worker
    burst = SimulatedEngine(replace(base, wake_ms=0.2), n_requests=5)
    burst.arrivals = lambda workload, window=0: np.full(5, 1e-3)  # type: ignore[method-assign]
    m = burst.measure(cfg, light)
    assert m.extra["mean_service_ms"] == pytest.approx((5 * 1.0 + 0.2) / 5)
