"""The real ONNX Runtime engine under open-loop Poisson load (a small CNN; runs are short)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import InvalidModel, InvalidSpace
from mlsysopt.serving.engine import Engine
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.space import Config, Workload

pytestmark = pytest.mark.realtime  # windows against the clock: make test runs them at normal priority


@pytest.fixture(scope="module")
def model(cnn_path: Path) -> ServedModel:
    return ServedModel(cnn_path)


@pytest.fixture
def engine(model: ServedModel) -> Iterator[Engine]:
    with Engine(model, n_requests=100, max_seconds=5.0, warmup=4, slo_ms=1000.0) as eng:
        yield eng


def _workers_alive() -> int:
    return sum(t.name.startswith("mlsysopt-worker") and t.is_alive() for t in threading.enumerate())


def test_light_load_is_served_in_full(engine: Engine) -> None:
    cfg = Config(instances=1, max_batch=1, batch_timeout_ms=0.0, intra_threads=1, inter_threads=1)
    m = engine.measure(cfg, Workload(rate=200.0))
    assert m.config == cfg and m.workload == Workload(rate=200.0)
    assert m.n_requests == m.completed == 100
    assert m.dropped == 0 and not m.saturated
    assert 0 < m.p50_ms <= m.p95_ms <= m.p99_ms
    assert m.throughput == pytest.approx(200.0, rel=0.3)
    assert m.violation_rate == 0.0  # a 1 s SLO
    assert m.extra["batches"] == 100 and m.extra["mean_batch"] == 1.0
    assert engine.cores >= 1


def test_requests_are_batched_under_a_high_rate(engine: Engine) -> None:
    m = engine.measure(Config(1, 8, 5.0, 1, 1), Workload(rate=3000.0))
    assert m.completed == 100 and m.dropped == 0
    assert 1 < m.extra["mean_batch"] <= 8
    assert m.extra["batches"] < 100


def test_multi_row_requests_are_batched_whole(engine: Engine) -> None:
    m = engine.measure(Config(1, 8, 2.0, 1, 1), Workload(rate=1000.0, request_size=4))
    assert m.completed == 100 and m.dropped == 0
    assert 4.0 <= m.extra["mean_batch"] <= 8.0  # one or two whole 4-row requests per batch
    assert m.extra["mean_batch"] * m.extra["batches"] == pytest.approx(400)


def test_reconfigures_between_measurements(engine: Engine) -> None:
    first = engine.measure(Config(1, 1, 0.0, 1, 1), Workload(rate=300.0))
    assert _workers_alive() == 1
    second = engine.measure(Config(2, 4, 2.0, 1, 2), Workload(rate=300.0))
    assert _workers_alive() == 2 and engine.config == Config(2, 4, 2.0, 1, 2)
    assert first.completed == second.completed == 100
    assert second.config.instances == 2 and not second.saturated
    engine.close()
    assert _workers_alive() == 0


def test_restart_serves_the_next_window_from_fresh_threads_pacer_and_sessions(engine: Engine) -> None:
    cfg, w = Config(1, 1, 0.0, 1, 1), Workload(rate=300.0)
    first = engine.measure(cfg, w)
    session = engine.model.session(1, 1)
    engine.restart()
    assert _workers_alive() == 0
    second = engine.measure(cfg, w)
    assert _workers_alive() == 1 and second.completed == first.completed == 100
    assert second.extra["loadgen_pid"] != first.extra["loadgen_pid"]
    assert engine.model.session(1, 1) is not session


def test_arrival_schedule_is_fixed_by_seed_and_workload(model: ServedModel) -> None:
    w = Workload(rate=500.0)
    a, b, c = Engine(model, seed=1), Engine(model, seed=1), Engine(model, seed=2)
    np.testing.assert_array_equal(a.arrivals(w), b.arrivals(w))
    assert not np.array_equal(a.arrivals(w), c.arrivals(w))
    assert not np.array_equal(a.arrivals(w), a.arrivals(Workload(rate=600.0)))


def test_overload_saturates_and_drops_in_bounded_time(model: ServedModel) -> None:
    with Engine(model, n_requests=200, max_seconds=2.0, warmup=2, queue_cap=32) as eng:
        eng.start()  # the load generator's process: started once, not part of the window that is bounded
        t = time.perf_counter()
        m = eng.measure(Config(1, 1, 0.0, 1, 1), Workload(rate=20_000.0))
        took = time.perf_counter() - t
    assert m.saturated and m.dropped > 0
    assert m.max_queue <= 32
    assert m.n_requests == 200 and m.completed + m.dropped == 200
    assert took < 2.0 + 1.0


def test_window_ends_after_max_seconds(model: ServedModel) -> None:
    with Engine(model, n_requests=100, max_seconds=0.3, warmup=0) as eng:
        eng.start()  # the load generator's process: started once, not part of any window
        t = time.perf_counter()
        m = eng.measure(Config(), Workload(rate=20.0))  # 100 arrivals would take ~5 s
        took = time.perf_counter() - t
        # a very low rate: the first arrival would come after ~1000 s; the window is bounded from its start
        t = time.perf_counter()
        idle = eng.measure(Config(), Workload(rate=0.001))
        idle_took = time.perf_counter() - t
    assert took < 1.0
    assert 0 < m.n_requests < 100
    assert idle_took < 1.0 and idle.n_requests == 0 and idle.completed == 0


def test_knob_above_the_machine_is_rejected(model: ServedModel) -> None:
    with Engine(model, max_threads=2) as eng:
        for cfg in (Config(instances=3), Config(intra_threads=4), Config(inter_threads=3)):
            with pytest.raises(InvalidSpace, match="exceeds"):
                eng.measure(cfg, Workload(rate=100.0))
        assert _workers_alive() == 0


def test_fixed_batch_model_cannot_batch(tmp_path: Path) -> None:
    from mlsysopt import zoo
    from mlsysopt.graph.importers.onnx import export_onnx

    fixed = ServedModel(export_onnx(*zoo.get("cnn"), tmp_path / "fixed.onnx"))
    with Engine(fixed, n_requests=20, warmup=1) as eng:
        with pytest.raises(InvalidModel, match="max batch 1"):
            eng.measure(Config(max_batch=4), Workload(rate=100.0))
        with pytest.raises(InvalidModel, match="request size 1"):
            eng.measure(Config(), Workload(rate=100.0, request_size=2))
        assert eng.measure(Config(), Workload(rate=500.0)).completed == 20
