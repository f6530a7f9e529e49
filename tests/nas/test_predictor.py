"""The performance predictor must rank (Kendall τ, Spearman on held-out architectures of a smooth fake space); its
online refit (EPNAS, PNAS) waits for the warm-up and for the data to grow, and restores exactly from its state."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau, spearmanr
from test_methods import FakeSpace

from mlsysopt.nas.predictor import OnlinePredictor, Predictor, PredictorConfig


def _data() -> tuple[FakeSpace, np.ndarray, np.ndarray]:
    space = FakeSpace(seed=1)
    archs = space.all_archs()
    X = np.stack([space.encode(a) for a in archs])
    y = np.array([space.true_perf(a) for a in archs])
    return space, X, y


def test_predictor_ranks_held_out_architectures() -> None:
    _, X, y = _data()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    train, test = idx[:60], idx[60:]
    pred = Predictor(seed=0).fit(X[train], y[train]).predict(X[test])
    tau, rho = kendalltau(pred, y[test])[0], spearmanr(pred, y[test])[0]
    assert tau > 0.5, f"Kendall tau {tau:.2f}"
    assert rho > 0.7, f"Spearman {rho:.2f}"


def test_ranking_loss_alone_still_ranks() -> None:
    _, X, y = _data()
    idx = np.random.default_rng(1).permutation(len(y))
    pred = Predictor(seed=0, rank_weight=1.0).fit(X[idx[:60]], y[idx[:60]]).predict(X[idx[60:]])
    mse_only = Predictor(seed=0, rank_weight=0.0).fit(X[idx[:60]], y[idx[:60]]).predict(X[idx[60:]])
    assert kendalltau(pred, y[idx[60:]])[0] > 0.5 and kendalltau(mse_only, y[idx[60:]])[0] > 0.5


def test_fit_is_deterministic_and_ignores_nan_targets() -> None:
    _, X, y = _data()
    y2 = y[:40].copy()
    y2[3] = np.nan
    a = Predictor(seed=3).fit(X[:40], y2).predict(X[40:80])
    b = Predictor(seed=3).fit(X[:40], y2).predict(X[40:80])
    assert np.array_equal(a, b) and np.isfinite(a).all()


def test_unfitted_and_tiny_data() -> None:
    _, X, y = _data()
    p = Predictor()
    assert not p.fitted
    assert np.array_equal(p.predict(X[:5]), np.zeros(5))
    p.fit(X[:1], y[:1])  # one point: nothing to rank
    assert not p.fitted
    mean, std = Predictor(members=4).fit(X[:20], y[:20]).predict_dist(X[20:30])
    assert mean.shape == std.shape == (10,) and (std >= 0).all()
    assert mean.mean() == pytest.approx(y[:20].mean(), abs=0.2)


def test_online_predictor_refits_after_warmup_and_growth_and_restores_exactly() -> None:
    space = FakeSpace(seed=1)
    archs = space.all_archs()[::7]
    online = OnlinePredictor(space, PredictorConfig(refit_growth=0.5), seed=0, warmup=4)
    fits = []
    for i, a in enumerate(archs[:20]):
        online.add(a, space.true_perf(a))
        online.refit()
        fits.append(online.fitted_n)
        assert online.fitted == (i + 1 >= 4)
    assert fits[:6] == [0, 0, 0, 4, 4, 6]  # nothing before the warm-up; then once the data grew by half
    assert len(set(fits)) < len(fits) / 2
    copy = OnlinePredictor(space, PredictorConfig(refit_growth=0.5), seed=0, warmup=4)
    copy.load_state_dict(online.state_dict())
    assert copy.data == online.data and copy.fitted_n == online.fitted_n
    np.testing.assert_array_equal(copy.predict(archs), online.predict(archs))
