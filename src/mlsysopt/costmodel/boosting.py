"""The field's ranking baselines: LightGBM ``lambdarank`` and XGBoost ``rank:pairwise`` on the trees' features.

What Kaggle "Fast or Slow" tree solutions ran (LightGBM pairwise 0.701 against 0.680 pointwise on layout). Both
rank one query group per graph on :func:`~mlsysopt.costmodel.tree_features.graph_features` rows, with relevance grades
0-30 from the graph's runtimes (:func:`~mlsysopt.costmodel.tree_features.grades`, the fastest highest); their scores are
negated so that, as everywhere in mlsysopt, a lower score means a faster configuration. LightGBM counts every pair
of a graph (``lambdarank_truncation_level`` = the largest group) with linear label gains, which is what OPA
measures; XGBoost samples pairs uniformly (``lambdarank_pair_method="mean"``). The tree count is chosen on the
validation split like the regressor's. Models are saved in the libraries' own text/JSON formats (no pickle):
``lightgbm.txt`` or ``xgboost.json``, next to ``trees.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.tree_features import grades
from mlsysopt.costmodel.trees import TreeRanker
from mlsysopt.errors import InvalidCheckpoint

LEVELS = 30
LIGHTGBM_FILE = "lightgbm.txt"
XGBOOST_FILE = "xgboost.json"
#: LightGBM settings (learning rate, leaves, ... as the regressor's; lambdarank over every pair of a graph).
LIGHTGBM_PARAMS: dict[str, Any] = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 31,
                                   "min_data_in_leaf": 20, "lambda_l2": 1.0, "feature_fraction": 0.8,
                                   "label_gain": list(range(LEVELS + 1)), "metric": "none", "verbose": -1,
                                   "deterministic": True, "force_row_wise": True}  # fmt: skip
#: XGBoost settings (pairwise ranking, hist trees).
XGBOOST_PARAMS: dict[str, Any] = {"objective": "rank:pairwise", "eta": 0.05, "max_depth": 6, "min_child_weight": 1.0,
                                  "lambda": 1.0, "colsample_bytree": 0.8, "tree_method": "hist",
                                  "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 8}  # fmt: skip


def _grades(runtimes: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([grades(rt, LEVELS) for rt in runtimes])


class BoosterRanker(TreeRanker):
    """A ranker whose model is one library booster (LightGBM's or XGBoost's), trained or loaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.booster: Any = None

    @property
    def fitted(self) -> bool:
        """Whether a booster is trained or loaded."""
        return self.booster is not None


class LightGBMRanker(BoosterRanker):
    """LightGBM ``lambdarank`` over the configurations of each graph (``--mode lightgbm``).

    Args:
        task, seed, rounds, threads, top_k: as :class:`~mlsysopt.costmodel.trees.TreeRanker`.
    """

    library = "lightgbm"
    description = "LightGBM lambdarank (every pair of a graph) on flattened configuration features (boosting.py)"

    def _fit(self, x: np.ndarray, y: np.ndarray, runtimes: list[np.ndarray], sizes: list[int]) -> float | None:
        import lightgbm as lgb  # deferred: LightGBM loads only when this model is trained

        params = LIGHTGBM_PARAMS | {"seed": self.seed, "num_threads": self.threads,
                                    "lambdarank_truncation_level": max(sizes)}  # fmt: skip
        data = lgb.Dataset(x, _grades(runtimes), group=sizes, params={"verbose": -1})
        self.booster = lgb.train(params, data, num_boost_round=self.rounds)
        return None  # a ranking objective has no loss on the runtime scale

    def _predict(self, x: np.ndarray, rounds: int) -> np.ndarray:
        return -np.asarray(self.booster.predict(x, num_iteration=rounds, num_threads=self.threads), np.float64)

    def _files(self) -> dict[str, bytes | str]:
        return {LIGHTGBM_FILE: self.booster.model_to_string()}

    def _read(self, folder: Path) -> None:
        import lightgbm as lgb  # deferred: LightGBM loads only when this model is trained

        path = folder / LIGHTGBM_FILE
        try:
            self.booster = lgb.Booster(model_str=path.read_text())
        except (OSError, UnicodeDecodeError, lgb.basic.LightGBMError) as exc:
            raise InvalidCheckpoint(f"{path}: not a readable LightGBM model ({str(exc).splitlines()[0]})") from None


class XGBoostRanker(BoosterRanker):
    """XGBoost ``rank:pairwise`` over the configurations of each graph (``--mode xgboost``).

    Args:
        task, seed, rounds, threads, top_k: as :class:`~mlsysopt.costmodel.trees.TreeRanker`.
    """

    library = "xgboost"
    description = "XGBoost rank:pairwise on flattened configuration features (boosting.py)"

    def _fit(self, x: np.ndarray, y: np.ndarray, runtimes: list[np.ndarray], sizes: list[int]) -> float | None:
        import xgboost as xgb  # deferred: XGBoost loads only when this model is trained

        qid = np.repeat(np.arange(len(sizes)), sizes)
        data = xgb.DMatrix(x, label=_grades(runtimes), qid=qid, nthread=self.threads)
        params = XGBOOST_PARAMS | {"seed": self.seed, "nthread": self.threads}
        self.booster = xgb.train(params, data, num_boost_round=self.rounds)
        return None

    def _predict(self, x: np.ndarray, rounds: int) -> np.ndarray:
        import xgboost as xgb  # deferred: XGBoost loads only when this model is trained

        pred = self.booster.predict(xgb.DMatrix(x, nthread=self.threads), iteration_range=(0, rounds))
        return -np.asarray(pred, np.float64)

    def _files(self) -> dict[str, bytes | str]:
        return {XGBOOST_FILE: bytes(self.booster.save_raw("json"))}

    def _read(self, folder: Path) -> None:
        import xgboost as xgb  # deferred: XGBoost loads only when this model is trained

        path = folder / XGBOOST_FILE
        try:
            booster = xgb.Booster()
            booster.load_model(bytearray(path.read_bytes()))
        except (OSError, xgb.core.XGBoostError) as exc:
            raise InvalidCheckpoint(f"{path}: not a readable XGBoost model ({str(exc).splitlines()[0]})") from None
        booster.set_param({"nthread": self.threads})
        self.booster = booster
