"""Honest verdicts: decided on confirmed values; overlapping intervals keep the default; noise sizes confirmation."""

from __future__ import annotations

import math

import pytest

from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.confirmation import Confirmation, Confirmed
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.verdict import KEEP_DEFAULT, SLO_MISSED, USE_PICK, noise_warning, rounds_for_noise, verdict

W = Workload(100.0)
DEFAULT, PICK = Config(1, 1, 0.0, 2, 1, 0), Config(2, 4, 2.0, 1, 1, 0)


def confirmed(config: Config, value: float, lo: float, hi: float, p99: float = 5.0, meets: bool | None = None):
    m = Measurement(config, W, value, value, p99, p99, 100.0, None, 0.0, 0, 100, 100, 0, False, 1.0, windows=9)
    return Confirmed(config, value, (lo, hi), [value] * 3, m, value, is_default=config == DEFAULT, meets_slo=meets)


def conf(pick: Confirmed, default: Confirmed) -> Confirmation:
    cands = [pick, default] if pick.config != default.config else [pick]
    return Confirmation(W, cands, pick, 3, [], DEFAULT)


def test_overlapping_intervals_keep_the_default_in_words() -> None:
    # the case: a pick 8.4% lower on its median, but within the noise
    v = verdict(conf(confirmed(PICK, 3.301, 2.9, 4.2), confirmed(DEFAULT, 3.605, 3.3, 3.9)), Objective())
    assert v.decision == KEEP_DEFAULT and v.overlap is True and v.recommended.config == DEFAULT
    assert "keep the default" in v.words and "overlap" in v.words and "within the noise" in v.words
    assert math.isclose(v.gain, (3.605 - 3.301) / 3.605)
    assert v.export and v.to_dict(Objective())["decision"] == KEEP_DEFAULT


def test_intervals_apart_use_the_pick() -> None:
    v = verdict(conf(confirmed(PICK, 2.0, 1.9, 2.1), confirmed(DEFAULT, 3.6, 3.3, 3.9)), Objective())
    assert v.decision == USE_PICK and v.recommended.config == PICK and v.overlap is False
    assert "44.4% lower" in v.words and "intervals apart" in v.words


def test_the_default_as_the_pick_and_a_missed_slo() -> None:
    d = confirmed(DEFAULT, 3.0, 2.8, 3.2)
    assert verdict(conf(d, d), Objective()).decision == KEEP_DEFAULT
    slo = Objective("latency", slo_ms=1.0)
    missed = verdict(conf(confirmed(PICK, 2.0, 1.9, 2.1, meets=False), confirmed(DEFAULT, 3.0, 2.8, 3.2, meets=False)),
                     slo)  # fmt: skip
    assert missed.decision == SLO_MISSED and not missed.export and "--export-anyway" in missed.words
    saved = verdict(conf(confirmed(PICK, 2.0, 1.9, 2.1, 0.9, True), confirmed(DEFAULT, 3.0, 2.8, 3.2, 5.0, False)),
                    slo)  # fmt: skip
    assert saved.decision == USE_PICK and "misses the SLO" in saved.words


def test_a_missed_slo_says_saturated_when_the_p99_alone_would_meet_it() -> None:
    slo = Objective("latency", slo_ms=1000.0)
    pick = confirmed(DEFAULT, 2.3, 2.1, 4.1, p99=4.87, meets=False)
    pick.measurement.saturated = True  # a window fell behind its offered load
    v = verdict(conf(pick, pick), slo)
    assert v.decision == SLO_MISSED and "p99 4.87 ms but the server fell behind the offered load" in v.words
    slow = confirmed(DEFAULT, 2.3, 2.1, 4.1, p99=1500.0, meets=False)
    plain = verdict(conf(slow, slow), slo)
    assert "has p99 1.5e+03 ms;" in plain.words and "fell behind" not in plain.words


def test_throughput_gain_is_higher_is_better() -> None:
    obj = Objective("throughput", slo_ms=10.0)  # scores are ms per request: 1000 / throughput
    v = verdict(conf(confirmed(PICK, 0.5, 0.48, 0.52, 3.0, True), confirmed(DEFAULT, 1.0, 0.95, 1.05, 3.0, True)), obj)
    assert v.decision == USE_PICK and math.isclose(v.gain, 1.0) and "100.0% higher" in v.words


@pytest.mark.parametrize(
    ("cv", "rounds"), [(None, 3), (0.05, 3), (0.1, 3), (0.15, 7), (0.2, 12), (0.9, 12), (math.inf, 12)]
)
def test_confirmation_rounds_grow_with_the_noise(cv, rounds) -> None:
    assert rounds_for_noise(3, cv) == rounds


def test_high_noise_is_warned_with_its_figure() -> None:
    assert noise_warning({"cv_mean_ms": 0.15, "windows": 5}, 7, 3) is None
    w = noise_warning({"cv_mean_ms": 0.4, "windows": 5}, 12, 3)
    assert w is not None and "CV 40%" in w and "raised from 3 to 12" in w


def test_demo_headline_names_the_winner_ties_and_misses() -> None:
    from mlsysopt.demo.serving import sim_headline

    def fin(**evals: int | None) -> dict:
        return {k: {"evals_to_5pct": v} for k, v in evals.items()}

    won = sim_headline(fin(rrl_warm=2, gp_warm=3, gp=None), 30)
    assert won.startswith("rrl_warm won: within 5% of the optimum after 2 measurements (gp_warm 3, gp > 30;")
    assert sim_headline(fin(rrl_warm=4, gp_warm=1), 30).startswith("gp_warm won")
    assert sim_headline(fin(rrl_warm=1, gp_warm=1), 30).startswith("rrl_warm and gp_warm tied")
    assert sim_headline(fin(rrl=None, gp=None), 30).startswith("No tuner got within 5% of the optimum in 30")
