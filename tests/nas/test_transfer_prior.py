"""The transfer prior (history records -> per-task scores) and the GP that fine-tunes it on the target."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from test_methods import FakeSpace, fake_prior, fake_records

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import PriorConfig, TransferGP, TransferPrior, leave_one_out, prior_from_records
from mlsysopt.nas.prior import normal_scores, records_task, tokens


def test_tokens_flatten_a_decoded_architecture() -> None:
    decoded = {"space": "x", "key": 5, "link": [0, 1], "ops": ["gcn", "fc"], "blocks": 2, "lr": 0.5, "n": 2.0}
    assert tokens(decoded) == ["link[0]=0", "link[1]=1", "ops[0]=gcn", "ops[1]=fc", "lr=0.5", "n=2"]
    nested = {"blocks": [{"width": 16, "act": "relu"}], "lr": 0.01}  # a declared space: blocks is a list
    assert tokens(nested) == ["blocks[0].width=16", "blocks[0].act=relu", "lr=0.01"]


def test_normal_scores_are_ranks_through_the_normal_cdf() -> None:
    z = normal_scores(np.array([0.9, 0.1, 0.5, 0.5]))
    assert z[1] < z[2] == z[3] < z[0] and abs(z.mean()) < 1e-12
    assert normal_scores(np.array([3.0])).tolist() == [0.0]


def test_a_prior_from_records_ranks_the_target_like_the_source() -> None:
    prior = fake_prior()  # trained on FakeSpace(seed 7)'s records, never on seed 0
    target = FakeSpace(0)
    archs = target.all_archs()
    score = prior.score([target.decode(a) for a in archs])
    rho = spearmanr(score, [target.true_perf(a) for a in archs]).statistic
    assert rho > 0.4  # the two tasks share their structure (higher options are better); the prior carries it
    assert prior.tasks == ["fake-7"] and prior.features([target.decode(archs[0])]).shape == (1, 1)


def test_a_task_that_never_saw_a_choice_abstains() -> None:
    records, _ = fake_records()
    only_low = [r for r in records if r["decoded"]["head"] != 2]  # this task never tried head=2
    prior = prior_from_records([(records, {"space": "all"}), (only_low, {"space": "low"})],
                               PriorConfig(hidden=8, epochs=5))  # fmt: skip
    space = FakeSpace()
    feats = prior.features([space.decode(a) for a in space.all_archs()])
    heads = np.array([a.choices[0] for a in space.all_archs()])
    assert np.all(feats[heads == 2, 1] == 0.0) and np.any(feats[heads != 2, 1] != 0.0)
    assert np.any(feats[heads == 2, 0] != 0.0)


def test_state_dict_round_trip_and_bad_records() -> None:
    prior = fake_prior()
    again = TransferPrior.from_state_dict(prior.state_dict())
    space = FakeSpace()
    dec = [space.decode(a) for a in space.all_archs()[:20]]
    assert np.allclose(prior.features(dec), again.features(dec))
    assert records_task("t", [{"perf": None, "decoded": {"a": 1}}, {"ok": False, "perf": 1.0}]).perf.size == 0
    with pytest.raises(MlsysoptError, match="at least one source task"):
        prior_from_records([([], {"space": "empty"})])
    with pytest.raises(MlsysoptError, match="perf must be a number"):
        records_task("t", [{"perf": "high", "decoded": {"a": 1}}])
    with pytest.raises(MlsysoptError, match="not fitted"):
        TransferPrior().features(dec)


def test_leave_one_out_never_sees_the_target() -> None:
    prior = leave_one_out("proteins", PriorConfig(hidden=8, epochs=1, per_task=200))
    assert len(prior.tasks) == 8 and "nasbench-graph:proteins" not in prior.tasks
    with pytest.raises(MlsysoptError, match="unknown NAS-Bench-Graph dataset"):
        leave_one_out("mnist")


def test_the_gp_starts_at_the_prior_and_learns_the_target() -> None:
    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, (200, 12)).astype(float)
    truth = X @ rng.normal(size=12)
    P = np.stack([truth + rng.normal(0, 2, 200), rng.normal(size=200)], 1)  # one useful source task, one useless
    gp = TransferGP(12)
    mean0, _ = gp.predict_dist(X, P)  # before any fit: the prior's mean
    assert np.allclose(mean0, P.mean(1))
    train = rng.choice(200, 40, replace=False)
    gp.fit(X[train], P[train], truth[train])
    mean, std = gp.predict_dist(X, P)
    rest = np.setdiff1d(np.arange(200), train)
    assert spearmanr(mean[rest], truth[rest]).statistic > 0.8 and np.all(std > 0)
    cold = TransferGP(12).fit(X[train], None, truth[train])
    assert spearmanr(cold.predict_dist(X, None)[0][rest], truth[rest]).statistic > 0.5
