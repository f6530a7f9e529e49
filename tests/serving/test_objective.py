"""The scoring rule every tuner shares: latency statistics, cost under the SLO, the capped score, feasibility."""

from __future__ import annotations

import math

import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import PENALTY, SCORE_CAP, Objective
from mlsysopt.serving.space import Config, Workload

W = Workload(100.0)


def measured(config: Config, mean: float, p99: float, saturated: bool = False) -> Measurement:
    return Measurement(config, W, mean, mean, p99, p99, 100.0, None, 0.0, 0, 100, 100, 0, saturated, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "speed"}, "unknown objective 'speed'"),
        ({"kind": "throughput"}, "throughput objective needs an SLO"),
        ({"stat": "p90"}, "unknown latency statistic 'p90'"),
        ({"slo_ms": 0.0}, "SLO 0.0 ms must be a positive"),
        ({"slo_ms": math.inf}, "SLO inf ms"),
        ({"kind": "cost"}, "cost objective needs an SLO"),
    ],
)
def test_bad_objective_is_one_clear_error(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidSpace, match=match):
        Objective(**kwargs)


def test_latency_scores_the_chosen_statistic() -> None:
    m = measured(Config(), mean=3.0, p99=9.0)
    assert Objective().score(m) == 3.0
    assert Objective(stat="p99").score(m) == 9.0


def test_cost_puts_every_config_meeting_the_slo_before_every_violator() -> None:
    obj = Objective("cost", slo_ms=10.0)
    big_ok = measured(Config(instances=4, intra_threads=2), mean=2.0, p99=9.0)  # 8 cores, meets the SLO
    near = measured(Config(), mean=5.0, p99=12.0)  # 1 core, misses by 20%
    far = measured(Config(), mean=50.0, p99=100.0)
    assert obj.score(big_ok) == 8.0
    assert obj.score(near) == PENALTY + 1.2
    assert obj.describe(obj.score(near)) == "SLO missed" and obj.value(obj.score(near)) is None
    assert obj.describe(obj.score(big_ok)) == "8 cores"
    assert obj.score(big_ok) < obj.score(near) < obj.score(far)


def test_capped_score_stays_finite() -> None:
    obj = Objective()
    assert obj.capped_score(measured(Config(), 4.0, 8.0)) == 4.0
    assert obj.capped_score(measured(Config(), math.inf, math.inf)) == SCORE_CAP
    assert obj.capped_score(measured(Config(), math.nan, math.nan)) == SCORE_CAP
    assert obj.capped_score(measured(Config(), 1e12, 1e12)) == SCORE_CAP


def test_feasible_means_within_the_slo_and_not_saturated() -> None:
    obj = Objective(slo_ms=10.0)
    assert obj.feasible(measured(Config(), 2.0, 9.0))
    assert not obj.feasible(measured(Config(), 2.0, 11.0))
    assert not obj.feasible(measured(Config(), 2.0, 9.0, saturated=True))
    assert Objective().meets_slo(1e9)
    assert Objective("cost", 5.0, "p95").to_dict() == {"kind": "cost", "slo_ms": 5.0, "stat": "p95", "unit": "cores"}


def test_throughput_scores_ms_per_request_within_the_slo_and_says_slo_missed_otherwise() -> None:
    obj = Objective("throughput", slo_ms=10.0)
    fast = Measurement(Config(), W, 2.0, 2.0, 5.0, 8.0, 500.0, None, 0.0, 0, 100, 100, 0, False, 1.0)
    slow = Measurement(Config(), W, 2.0, 2.0, 5.0, 8.0, 100.0, None, 0.0, 0, 100, 100, 0, False, 1.0)
    late = Measurement(Config(), W, 9.0, 9.0, 15.0, 20.0, 900.0, None, 0.0, 0, 100, 100, 0, False, 1.0)
    assert obj.score(fast) == pytest.approx(2.0) and obj.value(obj.score(fast)) == pytest.approx(500.0)
    assert obj.score(fast) < obj.score(slow) < obj.score(late)
    assert obj.describe(obj.score(late)) == "SLO missed" and obj.unit == "req/s"
