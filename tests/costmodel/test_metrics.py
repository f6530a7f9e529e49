"""Ranking and classification metrics: hand-worked values, ties, degenerate graphs, brute-force OPA, bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from mlsysopt.costmodel.metrics import (
    accuracy,
    classification_metrics,
    kendall_tau,
    macro_f1,
    opa,
    ranking_metrics,
    slowdown_at_k,
)
from mlsysopt.errors import InvalidOption, MlsysoptError

TRUE = np.array([1.0, 2.0, 3.0, 4.0])


def _brute_opa(pred: np.ndarray, true: np.ndarray) -> float:
    score = pairs = 0.0
    for i, j in itertools.combinations(range(len(true)), 2):
        if true[i] == true[j]:
            continue
        pairs += 1
        if pred[i] == pred[j]:
            score += 0.5
        elif (pred[i] < pred[j]) == (true[i] < true[j]):
            score += 1
    return score / pairs if pairs else math.nan


def test_perfect_reversed_and_one_swap() -> None:
    assert opa(TRUE * 7 + 1, TRUE) == pytest.approx(1.0)  # only the order matters
    assert opa(-TRUE, TRUE) == pytest.approx(0.0)
    assert kendall_tau(TRUE, TRUE) == pytest.approx(1.0)
    assert kendall_tau(-TRUE, TRUE) == pytest.approx(-1.0)
    swapped = np.array([0.1, 0.3, 0.2, 0.4])  # one of six pairs wrong
    assert opa(swapped, TRUE) == pytest.approx(5 / 6)
    assert kendall_tau(swapped, TRUE) == pytest.approx((5 - 1) / 6)


def test_ties_in_truth_are_skipped_ties_in_prediction_score_half() -> None:
    assert opa(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 2.0])) == pytest.approx(0.5)  # 1 right, 1 wrong
    assert opa(np.array([1.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0])) == pytest.approx(2.5 / 3)
    assert opa(np.full(5, 0.3), np.arange(5.0)) == pytest.approx(0.5)  # constant predictor = chance
    assert kendall_tau(np.full(5, 0.3), np.arange(5.0)) == 0.0


def test_opa_matches_brute_force_with_many_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(60):
        c = int(rng.integers(2, 25))
        pred = rng.integers(0, 4, c).astype(float)
        true = rng.integers(0, 5, c).astype(float)
        want = _brute_opa(pred, true)
        got = opa(pred, true)
        assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, abs=1e-12)


def test_undefined_order_gives_nan() -> None:
    assert math.isnan(opa(np.array([1.0]), np.array([5.0])))
    assert math.isnan(kendall_tau(np.array([1.0]), np.array([5.0])))
    assert math.isnan(opa(np.array([1.0, 2.0]), np.array([3.0, 3.0])))
    assert math.isnan(kendall_tau(np.array([1.0, 2.0]), np.array([3.0, 3.0])))
    assert slowdown_at_k(np.array([1.0]), np.array([5.0]), 1) == 0.0


def test_slowdown_hand_worked() -> None:
    true = np.array([10.0, 12.0, 15.0, 11.0])
    pred = np.array([3.0, 1.0, 2.0, 4.0])  # model's order: 1, 2, 0, 3
    assert slowdown_at_k(pred, true, 1) == pytest.approx(0.2)
    assert slowdown_at_k(pred, true, 2) == pytest.approx(0.2)
    assert slowdown_at_k(pred, true, 3) == pytest.approx(0.0)
    assert slowdown_at_k(pred, true, 10) == 0.0  # k beyond the number of configs: all of them
    assert slowdown_at_k(true, true, 1) == 0.0
    # ties in the prediction go against the model: a constant predictor does not pick the best by index
    assert slowdown_at_k(np.zeros(3), np.array([10.0, 20.0, 15.0]), 1) == pytest.approx(1.0)
    assert slowdown_at_k(np.zeros(3), np.array([10.0, 20.0, 15.0]), 2) == pytest.approx(0.5)


def test_ranking_metrics_averages_per_graph_and_skips_undefined() -> None:
    preds = [TRUE.copy(), -TRUE, np.array([0.0])]
    trues = [TRUE, TRUE, np.array([2.0])]
    m = ranking_metrics(preds, trues)
    assert m["opa"] == pytest.approx(0.5)  # (1 + 0) / 2: the single-config graph has no pairs
    assert m["kendall"] == pytest.approx(0.0)
    assert m["slowdown_top1"] == pytest.approx((0 + 3.0 + 0) / 3)  # reversed picks runtime 4 vs best 1
    assert m["slowdown_top5"] == 0.0 and m["slowdown_top10"] == 0.0
    assert (m["num_graphs"], m["num_ranked_graphs"]) == (3, 2)
    only_single = ranking_metrics([np.array([1.0])], [np.array([1.0])])
    assert math.isnan(only_single["opa"]) and only_single["slowdown_top1"] == 0.0


def test_ranking_bad_input() -> None:
    with pytest.raises(InvalidOption, match="lengths must match"):
        opa(np.zeros(3), np.zeros(4))
    with pytest.raises(InvalidOption, match="NaN"):
        kendall_tau(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    with pytest.raises(InvalidOption, match="true runtimes contain NaN"):
        opa(np.array([1.0, 2.0]), np.array([1.0, np.inf]))
    with pytest.raises(InvalidOption, match="1-D"):
        opa(np.zeros((2, 2)), np.zeros(4))
    with pytest.raises(InvalidOption, match="k must be"):
        slowdown_at_k(TRUE, TRUE, 0)
    with pytest.raises(InvalidOption, match="> 0"):
        slowdown_at_k(TRUE, TRUE - 1, 1)
    with pytest.raises(InvalidOption, match="at least one configuration"):
        slowdown_at_k(np.zeros(0), np.zeros(0), 1)
    with pytest.raises(InvalidOption, match="2 prediction arrays for 1 graphs"):
        ranking_metrics([TRUE, TRUE], [TRUE])
    with pytest.raises(InvalidOption, match="at least one graph"):
        ranking_metrics([], [])
    with pytest.raises(InvalidOption, match="graph 1: 3 predictions for 4"):
        ranking_metrics([TRUE, TRUE[:3]], [TRUE, TRUE])
    assert issubclass(InvalidOption, MlsysoptError)


def test_opa_handles_many_configs() -> None:
    """200k configurations (2e10 pairs: a pairwise loop would not finish), the value as on a subsample."""
    rng = np.random.default_rng(1)
    true = rng.random(200_000)
    pred = true + rng.normal(0, 0.1, true.size)
    value = opa(pred, true)
    assert 0.7 < value < 1.0
    assert value == pytest.approx(opa(pred[:2000], true[:2000]), abs=0.02)


def test_classification_hand_worked() -> None:
    y = np.array([0, 0, 1, 1, 2])
    p = np.array([0, 1, 1, 1, 0])
    assert accuracy(p, y) == pytest.approx(3 / 5)
    # F1: class 0 = 2*1/(2+2) = 0.5, class 1 = 2*2/(3+2) = 0.8, class 2 = 0
    assert macro_f1(p, y) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    logits = np.eye(3)[p] * 5.0  # (N, classes) scores are reduced by arg-max
    m = classification_metrics(logits, y)
    assert m == pytest.approx({"accuracy": 0.6, "macro_f1": 1.3 / 3, "num_graphs": 5})
    assert macro_f1(y, y) == 1.0 and accuracy(y, y) == 1.0
    # a class only predicted (never true) counts, as in sklearn
    assert macro_f1(np.array([3, 0]), np.array([0, 0])) == pytest.approx((2 / 3 + 0) / 2)


def test_classification_bad_input() -> None:
    with pytest.raises(InvalidOption, match="lengths must match"):
        accuracy(np.array([0, 1]), np.array([0]))
    with pytest.raises(InvalidOption, match="at least one graph"):
        macro_f1(np.array([], dtype=int), np.array([], dtype=int))
    with pytest.raises(InvalidOption, match="integer class ids"):
        classification_metrics(np.array([0.5]), np.array([0]))
