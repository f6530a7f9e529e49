"""Losses: ranking direction (lower prediction = faster), values on small cases, task checks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlsysopt.costmodel.losses import cross_entropy, get_loss, list_mle, mse, pairwise_hinge
from mlsysopt.errors import InvalidOption

RUNTIME = torch.tensor([1.0, 3.0, 2.0])  # config 0 fastest, then 2, then 1


def test_hinge_zero_when_ordered_with_margin_and_positive_when_reversed():
    good = torch.tensor([0.0, 1.0, 0.5])
    assert pairwise_hinge(good, RUNTIME).item() == 0.0
    bad = -good
    # pairs (0,1): 0.1+1, (0,2): 0.1+0.5, (2,1): 0.1+0.5 -> mean 0.7666...
    assert pairwise_hinge(bad, RUNTIME).item() == pytest.approx((1.1 + 0.6 + 0.6) / 3)


def test_hinge_margin_matters_and_ties_are_skipped():
    pred = torch.tensor([0.0, 0.05])
    assert pairwise_hinge(pred, torch.tensor([1.0, 2.0])).item() == pytest.approx(0.05)
    assert pairwise_hinge(pred, torch.tensor([1.0, 2.0]), margin=0.0).item() == 0.0
    tied = pairwise_hinge(torch.tensor([0.3, 0.1], requires_grad=True), torch.tensor([2.0, 2.0]))
    assert tied.item() == 0.0
    tied.backward()  # differentiable even without any ordered pair


def test_hinge_gradient_pushes_the_faster_config_down():
    pred = torch.zeros(2, requires_grad=True)
    pairwise_hinge(pred, torch.tensor([1.0, 2.0])).backward()
    assert pred.grad[0] > 0 > pred.grad[1]  # gradient descent lowers pred[0], raises pred[1]


def test_list_mle_matches_plackett_luce_and_prefers_the_true_order():
    pred = torch.tensor([0.2, -0.1, 0.4])
    s = -pred[torch.argsort(RUNTIME)]  # scores in true order: fastest first
    expected = sum(torch.logsumexp(s[i:], 0) - s[i] for i in range(3)) / 3
    assert list_mle(pred, RUNTIME).item() == pytest.approx(expected.item(), rel=1e-6)
    ordered = torch.tensor([0.0, 2.0, 1.0])
    assert list_mle(ordered, RUNTIME) < list_mle(-ordered, RUNTIME)


def test_mse_uses_runtimes_z_scored_within_the_graph():
    z = (RUNTIME - RUNTIME.mean()) / RUNTIME.std(unbiased=False)
    assert mse(z, RUNTIME).item() == pytest.approx(0.0, abs=1e-10)
    assert mse(z, RUNTIME * 1000 + 7).item() == pytest.approx(0.0, abs=1e-8)  # scale-free
    assert mse(torch.zeros(3), RUNTIME).item() == pytest.approx(1.0)


def test_cross_entropy_matches_torch():
    logits = torch.tensor([[2.0, 0.5, -1.0]])
    assert cross_entropy(logits, torch.tensor([1])).item() == pytest.approx(
        F.cross_entropy(logits, torch.tensor([1])).item()
    )
    assert cross_entropy(torch.zeros(1, 4), torch.tensor([0])).item() == pytest.approx(math.log(4))


def test_get_loss_by_name_and_task():
    assert get_loss("hinge", "layout") is pairwise_hinge
    assert get_loss("ce", "malnet") is cross_entropy
    with pytest.raises(InvalidOption, match="unknown loss 'l1'"):
        get_loss("l1")
    with pytest.raises(InvalidOption, match="does not fit task 'malnet'"):
        get_loss("hinge", "malnet")
    with pytest.raises(InvalidOption, match="does not fit task 'tile'"):
        get_loss("ce", "tile")
