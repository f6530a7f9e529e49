"""Latency predictors on a latency collection, one small class each behind :class:`LatencyPredictor`.

* :class:`FlopsProportional` -- milliseconds = a coefficient per setting x FLOPs (the roofline-free baseline);
* :class:`AdditivePerOp` -- nn-Meter-style (Zhang et al., MobiSys 2021, https://doi.org/10.1145/3458864.3467882): a
  model's latency is the sum of its ops' latencies, each op category's a piecewise-linear regressor on its FLOPs and
  activation bytes (by size class), weight bytes and count, per setting. nn-Meter fits its kernel regressors on
  kernels timed one by one; here the per-category coefficients are fitted on whole-model times (non-negative least
  squares on the relative error), so no per-kernel timing is needed;
* :class:`SummaryGBM` -- LightGBM on graph-summary features (:mod:`.features`) and the setting, on log milliseconds;
* :class:`AdditiveGBM` -- the additive model corrected by LightGBM on its log residual (an ensemble, named so).

Every predictor maps (node table, setting) to milliseconds; ``fit`` takes timed models and the settings to learn.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from mlsysopt.costmodel.oracle.dataset import TimedModel
from mlsysopt.costmodel.oracle.features import (
    BASIS_PER_CATEGORY,
    CATEGORIES,
    FEATURE_NAMES,
    additive_basis,
    additive_basis_nodes,
    features,
    per_category,
)
from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import InvalidCheckpoint


def design(models: list[TimedModel], settings: list[Setting]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, log-ms targets and setting index of every (model, setting) with a time.

    Shapes:
        returns (rows, len(FEATURE_NAMES)), (rows,), (rows,)
    """
    x, y, s_idx = [], [], []
    for m in models:
        for j, s in enumerate(settings):
            if s.key in m.ms:
                x.append(features(m.ops, m.nodes, s))
                y.append(np.log(m.ms[s.key]))
                s_idx.append(j)
    return np.array(x), np.array(y), np.array(s_idx)


class LatencyPredictor(ABC):
    """Predicted milliseconds of a model (its node table) under a setting."""

    name = "base"
    #: Whether ``__init__`` takes a ``seed`` (a predictor with a random part: bagging, initial weights).
    seeded = False

    @abstractmethod
    def fit(self, models: list[TimedModel], settings: list[Setting]) -> LatencyPredictor:
        """Learn from ``models``' times under ``settings``; returns self."""

    @abstractmethod
    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        """Milliseconds of one inference of the model ``(ops, nodes, edges)`` under ``setting`` (only a GNN reads
        the edges)."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form that :meth:`from_dict` reads back."""

    @classmethod
    @abstractmethod
    def from_dict(cls, d: dict[str, Any]) -> LatencyPredictor:
        """The predictor back from :meth:`to_dict`."""

    def predict_models(self, models: list[TimedModel], setting: Setting) -> np.ndarray:
        """Milliseconds of every model under ``setting``."""
        return np.array([self.predict(m.ops, m.nodes, setting, m.edges) for m in models])

    def per_op(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting,
               edges: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """Every node's milliseconds; they sum to :meth:`predict`. A predictor without a per-op part splits its
        prediction by FLOPs plus an equal share per node; one that sums per-op terms returns its own.

        Shapes:
            returns (n,) ms
        """
        flops = nodes[:, 0] * setting.batch
        parts = flops / max(flops.sum(), 1.0) + 1.0 / len(ops)
        return parts * (self.predict(ops, nodes, setting, edges) / parts.sum())


def nearest_setting(known: list[str], s: Setting) -> str:
    """The recorded setting closest to ``s`` (same engine first, then batch, threads, mode)."""

    def dist(k: str) -> tuple:
        o = Setting.parse(k)
        return (o.engine != s.engine, abs(np.log2(o.batch) - np.log2(s.batch)), abs(o.threads - s.threads),
                o.mode != s.mode)  # fmt: skip

    return min(known, key=dist)


class FlopsProportional(LatencyPredictor):
    """``ms = a_setting x GFLOPs`` (a by the median log ratio over the training models)."""

    name = "flops"

    def __init__(self) -> None:
        self.coef: dict[str, float] = {}

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> FlopsProportional:
        for s in settings:
            r = [np.log(m.ms[s.key]) - np.log(per_category(m.ops, m.nodes, s.batch, s.engine)[:, 1].sum() + 1e-9)
                 for m in models if s.key in m.ms]  # fmt: skip
            self.coef[s.key] = float(np.exp(np.median(r)))
        return self

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        key = setting.key if setting.key in self.coef else nearest_setting(list(self.coef), setting)
        return float(self.coef[key] * (per_category(ops, nodes, setting.batch, setting.engine)[:, 1].sum() + 1e-9))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "coef": self.coef}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlopsProportional:
        out = cls()
        out.coef = {str(k): float(v) for k, v in d["coef"].items()}
        return out


class AdditivePerOp(LatencyPredictor):
    """nn-Meter-style: ``ms = c + sum over categories of (a . [count, GFLOPs, activation MB, weight MB])``, the
    coefficients non-negative, per setting, fitted on relative error."""

    name = "additive"

    def __init__(self) -> None:
        self.coef: dict[str, list[float]] = {}

    @staticmethod
    def _row(ops: np.ndarray, nodes: np.ndarray, s: Setting) -> np.ndarray:
        return np.r_[additive_basis(ops, nodes, s.batch, s.engine), 1.0]

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> AdditivePerOp:
        from scipy.optimize import nnls  # deferred: SciPy loads only when this predictor is fitted

        for s in settings:
            rows = [(self._row(m.ops, m.nodes, s), m.ms[s.key]) for m in models if s.key in m.ms]
            a = np.array([r for r, _ in rows])
            y = np.array([t for _, t in rows])
            scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
            w = 1.0 / y  # relative error: a 10 us model counts as much as a 10 ms one
            coef, _ = nnls((a / scale) * w[:, None], y * w, maxiter=50 * a.shape[1])
            self.coef[s.key] = (coef / scale).tolist()
        return self

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        key = setting.key if setting.key in self.coef else nearest_setting(list(self.coef), setting)
        return float(max(self._row(ops, nodes, setting) @ np.asarray(self.coef[key]), 1e-4))

    def per_op(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting,
               edges: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """Every node's milliseconds (the constant term on the first node); they sum to :meth:`predict` (``edges``
        unused: one signature with :meth:`~mlsysopt.costmodel.oracle.additive_mlp.AdditiveMLP.per_op`)."""
        key = setting.key if setting.key in self.coef else nearest_setting(list(self.coef), setting)
        coef = np.asarray(self.coef[key])
        out = additive_basis_nodes(ops, nodes, setting.batch, setting.engine) @ coef[:-1]
        out[0] += coef[-1]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "coef": self.coef, "per_category": list(BASIS_PER_CATEGORY)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdditivePerOp:
        out = cls()
        out.coef = {str(k): [float(x) for x in v] for k, v in d["coef"].items()}
        width = len(CATEGORIES) * len(BASIS_PER_CATEGORY) + 1
        if any(len(v) != width for v in out.coef.values()):
            got = len(next(iter(out.coef.values())))
            raise InvalidCheckpoint(f"an additive model of another op-category set ({got} coefficients, this "
                                    f"mlsysopt reads {width}): train it again ('costmodel latency-train')")  # fmt: skip
        return out


_GBM_PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 5,
               "feature_fraction": 0.9, "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0,
               "verbose": -1, "deterministic": True, "force_row_wise": True}  # fmt: skip
#: Training rows from which LightGBM gets a second thread: below, the second (spinning) thread costs more than it
#: saves (480 rows: 5-30x the CPU time of one thread on a busy 2-core machine). ``deterministic`` makes the trees
#: the same on any number of threads.
GBM_THREADED_ROWS = 10_000


def _gbm_params(rows: int, seed: int) -> dict[str, Any]:
    """LightGBM's settings for ``rows`` training rows."""
    return _GBM_PARAMS | {"seed": seed, "num_threads": 2 if rows >= GBM_THREADED_ROWS else 1}


class SummaryGBM(LatencyPredictor):
    """LightGBM regression of log milliseconds on graph-summary and setting features."""

    name = "gbm"
    seeded = True

    def __init__(self, rounds: int = 800, seed: int = 0) -> None:
        self.rounds, self.seed = rounds, seed
        self.booster: Any = None

    def _target(self, x: np.ndarray, y: np.ndarray, models: Any = None) -> np.ndarray:
        return y

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> SummaryGBM:
        import lightgbm as lgb  # deferred: LightGBM loads only when this predictor is used

        x, y, _ = design(models, settings)
        data = lgb.Dataset(x, self._target(x, y, models), feature_name=list(FEATURE_NAMES), free_raw_data=False)
        self.booster = lgb.train(_gbm_params(len(x), self.seed), data, num_boost_round=self.rounds)
        return self

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        row = features(ops, nodes, setting)[None]
        return float(np.exp(self.booster.predict(row, num_threads=1)[0]))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rounds": self.rounds, "seed": self.seed, "booster": self.booster.model_to_string()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SummaryGBM:
        import lightgbm as lgb  # deferred: LightGBM loads only when this predictor is used

        out = cls(d["rounds"], d["seed"])
        out.booster = _booster(lgb, d["booster"], len(FEATURE_NAMES))
        return out


def _booster(lgb: Any, text: str, width: int) -> Any:
    """A LightGBM booster back from its text, refused when it reads another number of features."""
    booster = lgb.Booster(model_str=text)
    if booster.num_feature() != width:
        raise InvalidCheckpoint(f"a LightGBM model on {booster.num_feature()} features, this mlsysopt computes "
                                f"{width}: train it again with 'costmodel latency-train'")  # fmt: skip
    return booster


class AdditiveGBM(LatencyPredictor):
    """An ensemble: :class:`AdditivePerOp`'s prediction times ``exp`` of LightGBM's fit of its log residual."""

    name = "additive+gbm"
    seeded = True

    def __init__(self, rounds: int = 400, seed: int = 0) -> None:
        self.rounds, self.seed = rounds, seed
        self.base = AdditivePerOp()
        self.booster: Any = None

    def _x(self, ops: np.ndarray, nodes: np.ndarray, s: Setting) -> tuple[np.ndarray, float]:
        base = self.base.predict(ops, nodes, s)
        return np.r_[features(ops, nodes, s), np.log(base)], base

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> AdditiveGBM:
        import lightgbm as lgb  # deferred: LightGBM loads only when this predictor is used

        self.base.fit(models, settings)
        x, r = [], []
        for m in models:
            for s in settings:
                if s.key in m.ms:
                    row, base = self._x(m.ops, m.nodes, s)
                    x.append(row)
                    r.append(np.log(m.ms[s.key]) - np.log(base))
        data = lgb.Dataset(np.array(x), np.array(r), feature_name=[*FEATURE_NAMES, "log_additive_ms"])
        self.booster = lgb.train(_gbm_params(len(x), self.seed), data, num_boost_round=self.rounds)
        return self

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        row, base = self._x(ops, nodes, setting)
        return float(base * np.exp(self.booster.predict(row[None], num_threads=1)[0]))

    def per_op(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting,
               edges: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """The additive base's per-op times (negative ones as 0), scaled to this ensemble's prediction."""
        parts = np.maximum(self.base.per_op(ops, nodes, setting, edges), 0.0)
        return parts * (self.predict(ops, nodes, setting, edges) / max(parts.sum(), 1e-12))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rounds": self.rounds, "seed": self.seed, "base": self.base.to_dict(),
                "booster": self.booster.model_to_string()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AdditiveGBM:
        import lightgbm as lgb  # deferred: LightGBM loads only when this predictor is used

        out = cls(d["rounds"], d["seed"])
        out.base = AdditivePerOp.from_dict(d["base"])
        out.booster = _booster(lgb, d["booster"], len(FEATURE_NAMES) + 1)
        return out


#: The method ``costmodel latency-train`` fits by default: the shipped oracle's (the best on validation models in
#: ``benchmarks/latency_oracle.py``; :mod:`.additive_mlp` registers it).
TRAIN_METHOD = "additive-mlp"

#: Every predictor by name.
PREDICTORS: dict[str, type[LatencyPredictor]] = {
    c.name: c for c in (FlopsProportional, AdditivePerOp, SummaryGBM, AdditiveGBM)
}


def from_dict(d: dict[str, Any]) -> LatencyPredictor:
    """A predictor back from :meth:`LatencyPredictor.to_dict` (its class registered in :data:`PREDICTORS`).

    Raises:
        InvalidCheckpoint: If ``d`` names no known predictor or misses a part.
    """
    try:
        return PREDICTORS[d["name"]].from_dict(d)
    except InvalidCheckpoint:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidCheckpoint(f"not a latency predictor ({type(exc).__name__}: {exc})") from None
