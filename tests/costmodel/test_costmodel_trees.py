"""The trees baseline (costmodel/trees.py, ``--mode trees``): learns, saves without pickle, reloads, bad inputs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel import TrainConfig, evaluate, load_trainer, predict, synth, train
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.tree_features import graph_features
from mlsysopt.costmodel.trees import MODEL_NAME, TreeArrays, TreesModel
from mlsysopt.errors import InvalidCheckpoint, InvalidOption


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SYNTHETIC realistic layout graphs (clustered runtimes), small: trees train on them in about a second."""
    r = tmp_path_factory.mktemp("trees") / "layout"
    synth("layout", r, {"train": 4, "valid": 1, "test": 2}, (600, 900), 60, seed=5)
    return r


@pytest.fixture(scope="module")
def trees_run(root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A trees run on ``root`` (seed 0) and its result: trained once for the tests that read or break it."""
    out = tmp_path_factory.mktemp("trees-run") / "run"
    return out, train(root, out, TrainConfig(mode="trees", seed=0))


def test_trees_learn_save_reload_and_predict_the_same(root: Path, trees_run: tuple[Path, dict]) -> None:
    run, result = trees_run
    assert result["test"]["opa"] > 0.6  # random ranking is 0.5
    assert (run / MODEL_NAME).is_file() and (run / "result.json").is_file()
    with np.load(run / MODEL_NAME, allow_pickle=False) as z:  # plain arrays, never a pickle
        assert z["value"].dtype == np.float64
    model = load_trainer(run)
    assert isinstance(model, TreesModel)
    assert evaluate(run, root)["metrics"] == result["test"]
    ranked = predict(run, root)["graphs"]
    test = load_dataset(root, "test")
    assert set(ranked) == set(test.names)
    again = train(root, None, TrainConfig(mode="trees", seed=0))
    assert again["test"] == result["test"]  # deterministic for a seed


def test_exported_trees_predict_like_scikit_learn() -> None:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    x[::7, 2] = np.nan  # missing values take the learned side
    y = np.where(np.isnan(x[:, 2]), 3.0, x[:, 0] * 2 - x[:, 1])
    with threadpool_limits(1):  # OpenMP threads that wait for a busy core are 50x slower (seen at 2 cores, load 4)
        est = HistGradientBoostingRegressor(max_iter=30, random_state=0).fit(x, y)
        trees = TreeArrays.from_estimator(est)
        np.testing.assert_allclose(trees.predict(x), est.predict(x), rtol=1e-12, atol=1e-12)


def test_features_are_per_configuration_rows(root: Path) -> None:
    rec = load_dataset(root, "train").record(0)
    f = graph_features(rec)
    assert f.shape[0] == rec.num_configs and np.isfinite(f).all()
    assert not np.allclose(f[0], f[1])  # configurations differ


def test_trees_refuse_what_they_cannot_do(root: Path, trees_run: tuple[Path, dict], tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="not malnet"):
        TreesModel("malnet")
    with pytest.raises(InvalidOption, match="no --resume, no --workers"):
        train(root, tmp_path / "r", TrainConfig(mode="trees", graphs_per_step=2), workers=2)
    with pytest.raises(InvalidOption, match="not trained"):
        TreesModel("layout").predict(load_dataset(root, "test"))
    assert not (tmp_path / "r").exists()
    shutil.copytree(trees_run[0], tmp_path / "ok")  # a trained run, then its trees file broken
    (tmp_path / "ok" / MODEL_NAME).write_bytes(b"not an npz")
    with pytest.raises(InvalidCheckpoint, match=MODEL_NAME):
        load_trainer(tmp_path / "ok")


@pytest.mark.parametrize(("mode", "file"), [("lightgbm", "lightgbm.txt"), ("xgboost", "xgboost.json")])
def test_ranking_baselines_learn_save_in_their_own_format_and_reload(root: Path, tmp_path: Path, mode: str,
                                                                     file: str) -> None:  # fmt: skip
    from mlsysopt.costmodel.baselines import load_trees

    result = train(root, tmp_path / mode, TrainConfig(mode=mode, seed=0))
    assert result["test"]["opa"] > 0.6 and result["model"].startswith(("LightGBM", "XGBoost"))
    saved = (tmp_path / mode / file).read_bytes()
    assert not saved.startswith(b"\x80")  # the library's text/JSON model, never a pickle
    model = load_trees(tmp_path / mode)
    assert model.library == mode and model.chosen == result["history"][0]["rounds"]
    assert evaluate(tmp_path / mode, root)["metrics"] == result["test"]
    assert train(root, None, TrainConfig(mode=mode, seed=0))["test"] == result["test"]  # deterministic
    (tmp_path / mode / file).write_text("garbage")
    with pytest.raises(InvalidCheckpoint, match=file):
        load_trainer(tmp_path / mode)


def test_grades_rank_the_fastest_highest_and_tie_equal_runtimes() -> None:
    from mlsysopt.costmodel.tree_features import grades

    g = grades(np.array([3.0, 1.0, 2.0, 1.0, 5.0]))
    assert g[1] == g[3] == 30 and g[4] == 0 and g[2] > g[0] > g[4]
