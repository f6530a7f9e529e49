"""The trees baseline (costmodel/trees.py, ``--mode trees``): learns, saves without pickle, reloads, bad inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel import TrainConfig, evaluate, load_trainer, predict, synth, train
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.trees import MODEL_NAME, TreeArrays, TreesModel, graph_features
from mlsysopt.errors import InvalidCheckpoint, InvalidOption


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SYNTHETIC realistic layout graphs (clustered runtimes), small: trees train on them in about a second."""
    r = tmp_path_factory.mktemp("trees") / "layout"
    synth("layout", r, {"train": 4, "valid": 1, "test": 2}, (600, 900), 120, seed=5)
    return r


def test_trees_learn_save_reload_and_predict_the_same(root: Path, tmp_path: Path) -> None:
    result = train(root, tmp_path / "run", TrainConfig(mode="trees", seed=0))
    assert result["test"]["opa"] > 0.6  # random ranking is 0.5
    assert (tmp_path / "run" / MODEL_NAME).is_file() and (tmp_path / "run" / "result.json").is_file()
    with np.load(tmp_path / "run" / MODEL_NAME, allow_pickle=False) as z:  # plain arrays, never a pickle
        assert z["value"].dtype == np.float64
    model = load_trainer(tmp_path / "run")
    assert isinstance(model, TreesModel)
    assert evaluate(tmp_path / "run", root)["metrics"] == result["test"]
    ranked = predict(tmp_path / "run", root)["graphs"]
    test = load_dataset(root, "test")
    assert set(ranked) == set(test.names)
    again = train(root, None, TrainConfig(mode="trees", seed=0))
    assert again["test"] == result["test"]  # deterministic for a seed


def test_exported_trees_predict_like_scikit_learn() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    x[::7, 2] = np.nan  # missing values take the learned side
    y = np.where(np.isnan(x[:, 2]), 3.0, x[:, 0] * 2 - x[:, 1])
    est = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(x, y)
    trees = TreeArrays.from_estimator(est)
    np.testing.assert_allclose(trees.predict(x), est.predict(x), rtol=1e-12, atol=1e-12)


def test_features_are_per_configuration_rows(root: Path) -> None:
    rec = load_dataset(root, "train").record(0)
    f = graph_features(rec)
    assert f.shape[0] == rec.num_configs and np.isfinite(f).all()
    assert not np.allclose(f[0], f[1])  # configurations differ


def test_trees_refuse_what_they_cannot_do(root: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="not malnet"):
        TreesModel("malnet")
    with pytest.raises(InvalidOption, match="no --resume, no --workers"):
        train(root, tmp_path / "r", TrainConfig(mode="trees", graphs_per_step=2), workers=2)
    with pytest.raises(InvalidOption, match="not trained"):
        TreesModel("layout").predict(load_dataset(root, "test"))
    assert not (tmp_path / "r").exists()
    train(root, tmp_path / "ok", TrainConfig(mode="trees"))
    (tmp_path / "ok" / MODEL_NAME).write_bytes(b"not an npz")
    with pytest.raises(InvalidCheckpoint, match=MODEL_NAME):
        load_trainer(tmp_path / "ok")
