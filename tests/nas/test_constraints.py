"""Resource constraints: Optuna's sign convention, several at once, MnasNet soft reward, hard penalty, bad input."""

from __future__ import annotations

import math

import pytest

from mlsysopt.errors import InvalidConstraint, MlsysoptError
from mlsysopt.nas.constraints import RESOURCES, Constraint, Constraints

RES = {"params": 2e6, "flops": 3e8, "latency_ms": 4.0, "intensity": 50.0}


def test_value_is_relative_violation_and_nonpositive_when_satisfied() -> None:
    assert Constraint("max_params", 4e6).value(RES) == pytest.approx(-0.5)
    assert Constraint("max_params", 1e6).value(RES) == pytest.approx(1.0)
    assert Constraint("max_latency_ms", 4.0).value(RES) == 0.0  # on the limit is satisfied
    assert Constraint("min_intensity", 25.0).value(RES) == pytest.approx(-1.0)
    assert Constraint("min_intensity", 100.0).value(RES) == pytest.approx(0.5)
    assert Constraint("max_flops", 3e8).satisfied(RES)
    assert not Constraint("min_intensity", 100.0).satisfied(RES)


def test_several_constraints_at_once() -> None:
    ok = Constraints([Constraint("max_params", 3e6), Constraint("max_latency_ms", 5), Constraint("min_intensity", 10)])
    assert ok.feasible(RES) and ok.violated(RES) == []
    assert all(v <= 0 for v in ok.values(RES).values())
    bad = Constraints([Constraint("max_params", 3e6), Constraint("max_flops", 1e8), Constraint("min_intensity", 60)])
    assert not bad.feasible(RES)
    assert bad.violated(RES) == ["max_flops", "min_intensity"]
    assert set(bad.values(RES)) == {"max_params", "max_flops", "min_intensity"}
    assert Constraints().feasible(RES)  # no constraint: everything fits


def test_unknown_resource_counts_as_violated() -> None:
    c = Constraints([Constraint("max_flops", 1e9)])
    assert math.isnan(c.values({"params": 1.0})["max_flops"])
    assert not c.feasible({"params": 1.0})


def test_soft_reward_is_mnasnet_factor_per_violated_constraint() -> None:
    cons = [Constraint("max_params", 1e6), Constraint("min_intensity", 100.0), Constraint("max_latency_ms", 8.0)]
    soft = Constraints(cons, mode="soft", weight=-0.07)
    # params 2x over the limit, intensity half the minimum; latency satisfied contributes 1
    expected = 0.8 * 2.0**-0.07 * 2.0**-0.07
    assert soft.reward(0.8, RES) == pytest.approx(expected)
    assert soft.reward(0.8, {**RES, "params": 5e5, "intensity": 200.0}) == pytest.approx(0.8)  # no bonus for slack
    assert soft.reward(-1.0, RES) < -1.0  # a negative performance also gets worse


def test_hard_reward_is_perf_or_penalty() -> None:
    hard = Constraints([Constraint("max_params", 1e6)], penalty=-1.0)
    assert hard.reward(0.8, {"params": 5e5}) == 0.8
    assert hard.reward(0.8, RES) == -1.0
    assert hard.reward(float("nan"), {"params": 5e5}) == -1.0


def test_from_limits_to_dict_round_trip() -> None:
    c = Constraints.from_limits(mode="soft", max_params=1e6, max_flops=None, min_intensity=10)
    assert c.names == ["max_params", "min_intensity"]
    again = Constraints.from_dict(c.to_dict())
    assert again.to_dict() == c.to_dict() and again.mode == "soft"
    assert "params <= 1e+06" in c.describe() and "intensity >= 10" in c.describe()
    assert set(RESOURCES) == {"max_params", "max_flops", "max_latency_ms", "min_intensity"}


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Constraint("most_memory", 1.0), "unknown constraint 'most_memory'"),
        (lambda: Constraint("max_", 1.0), "unknown constraint 'max_'"),
        (lambda: Constraint("max_params", 0), "limit must be a finite number > 0"),
        (lambda: Constraint("max_params", -3), "limit must be a finite number > 0"),
        (lambda: Constraint("max_params", float("nan")), "limit must be a finite number > 0"),
        (lambda: Constraint("max_params", "big"), "limit must be a number"),
        (lambda: Constraints([Constraint("max_params", 1), Constraint("max_params", 2)]), "more than once"),
        (lambda: Constraints(mode="strict"), "unknown constraint mode"),
        (lambda: Constraints(weight=0.5), "weight must be <= 0"),
    ],
)
def test_bad_constraints_are_clear_errors(make, match) -> None:
    with pytest.raises(InvalidConstraint, match=match):
        make()
    assert issubclass(InvalidConstraint, MlsysoptError)


def test_constraint_on_a_resource_the_space_lacks() -> None:
    class Space:
        name = "tiny"
        resource_names = ("params", "latency_ms")

    Constraints([Constraint("max_params", 1)]).check_resources(Space())
    with pytest.raises(InvalidConstraint, match="needs resource 'flops'.*reports: params, latency_ms"):
        Constraints([Constraint("max_flops", 1)]).check_resources(Space())
