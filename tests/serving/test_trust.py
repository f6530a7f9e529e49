"""Measurements you can trust: intervals, perf_analyzer's stability rule, merging, the throughput rate search,
equivalent configurations, the calibrated profile and the deployable outputs (no engine needed: simulator)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.capacity import CapacityBackend
from mlsysopt.serving.confirmation import confirm, measure_noise
from mlsysopt.serving.deploy import parse_triton_config, triton_config
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile, ServiceSample
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.stats import mean_ci, median_ci, stable
from mlsysopt.serving.windows import StableBackend, merge

SYN = ServiceProfile.synthetic(cores=4)


def test_intervals_and_the_stability_rule() -> None:
    lo, hi = mean_ci([10.0, 11.0, 12.0])
    assert lo < 11.0 < hi and hi - lo == pytest.approx(2 * 4.303 * 1.0 / math.sqrt(3), rel=1e-3)
    assert mean_ci([5.0]) == (5.0, 5.0) and mean_ci([1.0, math.inf]) == (math.inf, math.inf)
    assert median_ci(list(range(1, 10))) == (2.0, 8.0)  # n = 9: the 2nd and 8th order statistics (96%)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert stable([[100, 104, 96], [10, 10.5, 9.8]], 3, 0.10)
    assert not stable([[100, 120, 96]], 3, 0.10)  # 120 is 14% above the mean of the three
    assert not stable([[100, 101]], 3, 0.10)


def test_stable_backend_repeats_windows_until_they_agree_and_reports_intervals() -> None:
    sim = SimulatedEngine(SYN, n_requests=200, seed=0)
    m = StableBackend(sim, count=3, tolerance=0.10, max_windows=6).measure(Config(2, 4, 1.0, 1, 1), Workload(800.0))
    assert 3 <= m.windows <= 6 and m.stable is not None
    assert len(m.samples["mean_ms"]) == (3 if m.stable else m.windows)
    lo, hi = m.ci["mean_ms"]
    assert lo <= m.mean_ms <= hi
    # window k is the same schedule for every configuration, a different one from window to window
    assert (sim.arrivals(Workload(800.0), 0) != sim.arrivals(Workload(800.0), 1)).any()
    strict = StableBackend(sim, count=3, tolerance=1e-9, max_windows=4).measure(Config(), Workload(300.0))
    assert strict.windows == 4 and strict.stable is False and len(strict.samples["mean_ms"]) == 4
    both = merge([m, m])
    assert both.windows == 2 * m.windows and both.mean_ms == pytest.approx(m.mean_ms)


def test_a_decided_verdict_ends_the_windows_after_count_of_them() -> None:
    sim = SimulatedEngine(SYN, n_requests=100, seed=0)
    seen: list[int] = []

    def decided(windows) -> bool:
        seen.append(len(windows))
        return True

    m = StableBackend(sim, count=3, tolerance=1e-9, max_windows=6, decided=decided).measure(Config(), Workload(300.0))
    assert seen == [3] and m.windows == 3 and m.stable is False and len(m.samples["mean_ms"]) == 3
    never = StableBackend(sim, count=3, tolerance=1e-9, max_windows=5, decided=lambda w: False)
    assert never.measure(Config(), Workload(300.0)).windows == 5


def test_a_measurement_is_saturated_when_most_of_its_windows_were_as_a_merge_is() -> None:
    sim = SimulatedEngine(SYN, n_requests=100, seed=0)

    class Stalls(SimulatedEngine):
        """The simulator, with the windows named in ``stalled`` marked saturated (a loaded machine's stall)."""

        stalled: set[int]

        def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
            return replace(super().measure(config, workload, window), saturated=window in self.stalled)

    flaky = Stalls(SYN, n_requests=100, seed=0)
    for stalled, expect in (({1}, False), ({0, 2}, True), (set(), False)):
        flaky.stalled = stalled
        m = StableBackend(flaky, count=3, tolerance=10.0, max_windows=3).measure(Config(), Workload(300.0))
        assert m.windows == 3 and m.saturated is expect, stalled
        assert m.extra.get("saturated_windows", 0) == len(stalled)
        # merging measurements follows the same rule
        assert merge([m, m, replace(m, saturated=not expect)]).saturated is expect
    assert not sim.measure(Config(), Workload(300.0)).saturated


def test_noise_and_interleaved_confirmation_pick_on_the_confirmed_median() -> None:
    sim = SimulatedEngine(SYN, n_requests=100, seed=1, noise=0.2)
    backend = StableBackend(sim, max_windows=4)
    obj, w = Objective(), Workload(600.0)
    noise = measure_noise(sim, Config(), w, windows=4)
    assert noise["windows"] == 4 and noise["cv_mean_ms"] > 0
    order: list[Config] = []
    good, bad, default = Config(2, 4, 1.0, 1, 1), Config(1, 1, 0.0, 1, 1), Config(1, 1, 0.0, 4, 1)
    restarts: list[int] = []
    sim.restart = lambda: restarts.append(len(order))  # type: ignore[method-assign]
    conf = confirm(backend, [bad, good], default, w, obj, rounds=3, on_measure=lambda m: order.append(m.config))
    assert order == [bad, good, default] * 3  # A B C A B C A B C
    assert restarts == [0, 3, 6]  # a fresh server side before every round, through the stability wrapper
    assert conf.pick.config == min(conf.candidates, key=lambda c: c.value).config
    for c in conf.candidates:
        assert c.interval[0] <= c.value <= c.interval[1] and len(c.rounds) == 3
    assert [c.is_default for c in conf.candidates] == [False, False, True]


def test_throughput_is_the_highest_rate_meeting_the_slo() -> None:
    sim = SimulatedEngine(ServiceProfile(1.0, 1.0, 0.0, 0.0, 0.0, 0.0, cores=1), n_requests=200, seed=0)
    cap = CapacityBackend(sim, slo_ms=20.0, doublings=6, bisections=2)
    m = cap.measure(Config(), Workload(50.0))  # 2 ms per request: capacity 500 req/s
    assert m.workload == Workload(50.0) and m.p99_ms <= 20.0 and not m.saturated
    assert 200.0 <= m.extra["at_rate"] <= 500.0
    rates = [r for r, _ in m.extra["rates_tried"]]
    assert rates[:3] == [50.0, 100.0, 200.0] and not all(ok for _, ok in m.extra["rates_tried"])
    down = cap.measure(Config(), Workload(5000.0))  # the default saturates at the asked rate: the search halves
    assert [r for r, _ in down.extra["rates_tried"]][:3] == [5000.0, 2500.0, 1250.0]
    assert 200.0 <= down.extra["at_rate"] <= 500.0 and not down.saturated
    missed = CapacityBackend(sim, slo_ms=20.0, doublings=2, bisections=2).measure(Config(), Workload(5000.0))
    assert Objective("throughput", slo_ms=20.0).describe(Objective("throughput", 20.0).score(missed)) == "SLO missed"


def test_equivalent_configurations_are_one() -> None:
    space = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0.0, 2.0), intra_threads=(1,),
                  inter_threads=(1, 2), execution_mode=(0, 1))  # fmt: skip
    assert space.raw_size == 32 and space.size == 12  # per instances: b1 {seq, par2}, b4 x t {seq, par2}
    assert space.canonical(Config(1, 1, 2.0, 1, 2, 0)) == Config(1, 1, 0.0, 1, 1, 0)
    assert space.canonical(Config(1, 4, 2.0, 1, 1, 1)) == Config(1, 4, 2.0, 1, 1, 0)  # parallel with 1 = sequential
    assert space.index(Config(1, 1, 2.0, 1, 2, 0)) == space.index(Config(1, 1, 0.0, 1, 1, 0))
    assert space.reduction["removed_fraction"] == pytest.approx(1 - 12 / 32)
    with pytest.raises(InvalidSpace, match="whole number, got 1.5"):
        Config.from_dict({"max_batch": 1.5})
    with pytest.raises(InvalidSpace, match="whole number, got True"):
        Config.from_dict({"instances": True})
    with pytest.raises(InvalidSpace, match="1,000,000 req/s"):
        Workload(1e308)


def test_the_calibrated_profile_uses_its_table_where_it_covers_and_warns_when_doubtful(tmp_path: Path) -> None:
    base = ServiceProfile(0.0, 1.0, 0.0, 0.0, 0.0, 0.0, cores=32, source="extrapolated")
    prof = base.with_table([ServiceSample(1, 1, 1, 3.0), ServiceSample(4, 1, 1, 9.0)], dispatch_ms=0.5)
    assert prof.service_ms(1, 1, 1) == 3.0 and prof.service_ms(2, 1, 1) == pytest.approx(5.0)  # interpolated
    assert prof.service_ms(8, 1, 1) == prof.model_ms(8, 1, 1) == 8.0  # beyond the table: the model
    assert prof.batch_ms(1, 1, 1) == 3.5
    assert not prof.covers(1, 2, 1)
    assert any("extrapolation" in w for w in prof.warnings()) and any("a_ms" in w for w in prof.warnings())
    again = ServiceProfile.load(prof.save(tmp_path / "p.json"))
    assert again == prof and again.service_ms(2, 1, 1) == pytest.approx(5.0)
    sim = SimulatedEngine(prof, n_requests=50)
    slow = sim.measure(Config(), Workload(5.0))
    assert slow.mean_ms == pytest.approx(3.5, rel=0.01)  # table + dispatch, no queueing at 5 req/s


def test_the_triton_fragment_parses_and_a_typo_does_not() -> None:
    text = triton_config(Config(2, 8, 2.5, 1, 2, 1), "resnet")
    cfg = parse_triton_config(text)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2500 and cfg.backend == "onnxruntime"
    assert cfg.parameters["execution_mode"].string_value == "1"
    assert "dynamic_batching" not in triton_config(Config(), "m")  # max batch 1: nothing to wait for
    with pytest.raises(InvalidSpace, match="config.pbtxt"):
        parse_triton_config(text.replace("max_batch_size", "max_batchsize"))
