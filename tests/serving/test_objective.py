"""The scoring rule every tuner shares: latency statistics, cost under the SLO, the capped score, feasibility."""

from __future__ import annotations

import math

import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.objective import SCORE_CAP, Objective
from mlsysopt.serving.space import Config, Workload

W = Workload(100.0)


def measured(config: Config, mean: float, p99: float, saturated: bool = False) -> Measurement:
    return Measurement(config, W, mean, mean, p99, p99, 100.0, None, 0.0, 0, 100, 100, 0, saturated, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "throughput"}, "unknown objective 'throughput'"),
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
    big_ok = measured(Config(workers=4, intra_threads=2), mean=2.0, p99=9.0)  # 8 cores, meets the SLO
    near = measured(Config(), mean=5.0, p99=12.0)  # 1 core, misses by 20%
    far = measured(Config(), mean=50.0, p99=100.0)
    assert obj.score(big_ok) == 8.0
    assert obj.score(near) == 1000.0 + 1.2
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
    assert Objective("cost", 5.0, "p95").to_dict() == {"kind": "cost", "slo_ms": 5.0, "stat": "p95"}
