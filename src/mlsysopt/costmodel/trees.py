"""The non-GNN baselines a Kaggle competitor would use: gradient-boosted trees on flattened configuration features.

The 11th place of the TpuGraphs "Fast or Slow" competition used LightGBM alone on layout (pairwise 0.701 vs 0.680
pointwise). Three such models share the features, the validation-chosen tree count and the run-folder files:
``--mode trees`` (scikit-learn's ``HistGradientBoostingRegressor``, this file), ``--mode lightgbm`` (LightGBM
``lambdarank``) and ``--mode xgboost`` (XGBoost ``rank:pairwise``) in :mod:`mlsysopt.costmodel.boosting`.
The features of one row per (graph, configuration) are :mod:`mlsysopt.costmodel.tree_features`'s.

Target: ``log(runtime / fastest runtime of the graph)``, so graphs of every scale weigh alike; the regressor fits
it (squared error), the rankers its per-graph grades (0-30, faster = higher, ties equal) with one query group per
graph; every model ranks a graph's configurations by its score (lower = faster). Tile graphs use their 24
graph configuration features and the same statistics. With a validation split the number of trees is chosen on it
(the first 50, 100, 200 or ``rounds`` trees, by validation OPA: early stopping). The fitted trees are saved as
plain arrays (``trees.npz``, read back without pickle) next to a JSON description (``trees.json``, whose ``library``
says which model it is); predictions from the saved arrays are the estimator's own (checked when saving).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset
from mlsysopt.costmodel.metrics import opa, ranking_metrics
from mlsysopt.costmodel.train_config import DEFAULT_ROUNDS
from mlsysopt.costmodel.tree_features import TOP_K, graph_features, log_target
from mlsysopt.errors import InvalidCheckpoint, InvalidOption

MODEL_NAME = "trees.npz"
META_NAME = "trees.json"
#: scikit-learn HistGradientBoostingRegressor settings (no early stopping: every run trains ``rounds`` trees).
PARAMS: dict[str, Any] = {"learning_rate": 0.05, "max_leaf_nodes": 31, "min_samples_leaf": 20, "l2_regularization": 1.0,
                          "max_features": 0.8, "early_stopping": False}  # fmt: skip
#: Tree counts tried on the validation split (the best validation OPA is kept; all of them without one).
ROUND_CHOICES: tuple[int, ...] = (50, 100, 200, 400)
#: One graph for a tree model: its name, feature rows and runtimes (None: not measured).
Graph = tuple[str, np.ndarray, "np.ndarray | None"]
#: Training rows: features (rows, F), targets (rows,), each graph's runtimes, each graph's configuration count.
Rows = tuple[np.ndarray, np.ndarray, list[np.ndarray], list[int]]
#: One graph's scores and runtimes (None: not measured).
Scored = tuple[np.ndarray, "np.ndarray | None"]
_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right", "is_leaf")


class TreeArrays:
    """Fitted regression trees as plain arrays (every tree's nodes concatenated); predicts like the estimator."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.a = arrays

    @classmethod
    def from_estimator(cls, est: Any) -> TreeArrays:
        """The trees of a fitted ``HistGradientBoostingRegressor``, numerical features only."""
        trees = [p.nodes for stage in est._predictors for p in stage]
        sizes = np.array([t.size for t in trees], np.int64)
        nodes = np.concatenate(trees)
        if nodes["is_categorical"].any():
            raise InvalidOption("the trees baseline uses numerical features only")
        arrays = {f: np.ascontiguousarray(nodes[f]) for f in _FIELDS}
        arrays["offsets"] = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        arrays["baseline"] = np.asarray(est._baseline_prediction, np.float64).reshape(-1)
        return cls(arrays)

    def first(self, rounds: int) -> TreeArrays:
        """The same model with only its first ``rounds`` trees."""
        a = dict(self.a)
        a["offsets"] = a["offsets"][:rounds]
        return TreeArrays(a)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predictions for rows ``x`` (n, features): baseline + the leaf value of every tree (all trees at once)."""
        a = self.a
        x = np.asarray(x, np.float64)
        offsets = a["offsets"].astype(np.int64)
        out = np.full(x.shape[0], float(a["baseline"][0]))
        for start in range(0, x.shape[0], 4096):  # bounded (rows x trees) work arrays
            xb = x[start : start + 4096]
            node = np.repeat(offsets[None, :], xb.shape[0], axis=0)  # (n, trees)
            rows = np.repeat(np.arange(xb.shape[0])[:, None], offsets.size, axis=1)
            inner = a["is_leaf"][node] == 0
            while inner.any():
                n, r = node[inner], rows[inner]
                v = xb[r, a["feature_idx"][n]]
                left = np.where(np.isnan(v), a["missing_go_to_left"][n] == 1, v <= a["num_threshold"][n])
                base = np.broadcast_to(offsets[None, :], node.shape)[inner]
                node[inner] = base + np.where(left, a["left"][n], a["right"][n]).astype(np.int64)
                inner = a["is_leaf"][node] == 0
            out[start : start + xb.shape[0]] += a["value"][node].sum(axis=1)
        return out

    def to_bytes(self) -> bytes:
        """``.npz`` bytes (plain numeric arrays: loadable without pickle)."""
        buf = io.BytesIO()
        np.savez(buf, **self.a)
        return buf.getvalue()

    @classmethod
    def from_file(cls, path: Path) -> TreeArrays:
        """Read :meth:`to_bytes` output, or raise InvalidCheckpoint naming the file."""
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in (*_FIELDS, "offsets", "baseline")}
        except (OSError, ValueError, KeyError, EOFError) as exc:
            raise InvalidCheckpoint(f"{path}: not a readable trees model ({exc})") from None
        n = arrays["value"].size
        sizes = {arrays[f].size for f in _FIELDS}
        offs = arrays["offsets"]
        if sizes != {n} or arrays["baseline"].size != 1 or (offs.size and (offs.min() < 0 or offs.max() >= n)):
            raise InvalidCheckpoint(f"{path}: inconsistent trees arrays")
        return cls(arrays)


class TreeRanker:
    """What the three tree baselines share: rows, the validation-chosen tree count, evaluation and the files.

    A subclass sets ``library`` and ``description`` and implements ``_fit(x, y, runtimes, sizes)``,
    ``_predict(x, rounds)``, ``_files()`` and ``_read(folder, meta)``.

    Args:
        task: ``"layout"`` or ``"tile"`` (configurations are ranked).
        seed: Seed of the booster.
        rounds: Most boosting rounds; validation chooses how many are used.
        threads: Threads the library may use.
        top_k: Configurable nodes summarized per layout graph in the feature rows.

    Raises:
        InvalidOption: If ``task`` is not ``layout`` or ``tile``.
    """

    library = ""
    description = ""

    def __init__(
        self, task: str, seed: int = 0, rounds: int = DEFAULT_ROUNDS, threads: int = 1, top_k: int = TOP_K
    ) -> None:
        if task not in ("layout", "tile"):
            raise InvalidOption(f"--mode {self.mode} ranks configurations: it is for layout and tile, not {task}")
        self.task, self.seed, self.rounds, self.threads, self.top_k = task, int(seed), int(rounds), int(threads), top_k
        self.chosen: int | None = None
        self.history: list[dict[str, Any]] = []

    @property
    def mode(self) -> str:
        """The ``--mode`` that trains this model."""
        return {"sklearn": "trees"}.get(self.library, self.library)

    @property
    def fitted(self) -> bool:
        """Whether the model holds trained trees."""
        raise NotImplementedError

    def rows(self, ds: GraphDataset) -> Rows:
        """The training rows of ``ds`` (every configuration of every graph), each graph read and checked once:
        features, targets, each graph's runtimes and configuration count."""
        xs, ys, rts, sizes = [], [], [], []
        for i in range(len(ds)):
            rec = ds.record(i)
            if rec.task != self.task:
                raise InvalidOption(f"{rec.name}: a {rec.task} graph, but the model is for {self.task}")
            xs.append(graph_features(rec, self.top_k))
            ys.append(log_target(rec))
            rts.append(np.asarray(rec.runtime, np.float64))
            sizes.append(rec.num_configs)
        widths = {x.shape[1] for x in xs}
        if len(widths) != 1:
            raise InvalidOption(f"graphs give different feature widths {sorted(widths)}")
        return np.vstack(xs), np.concatenate(ys), rts, sizes

    def graphs(self, ds: GraphDataset | None) -> list[Graph]:
        """Every graph of ``ds`` (none for None), each read and checked once: (name, feature rows, runtimes or
        None), what :meth:`fit_rows` validates on and :meth:`evaluate_graphs` scores."""
        return [] if ds is None else list(self._graphs(ds))

    def fit(self, train_ds: GraphDataset, valid_ds: GraphDataset | None = None) -> list[dict[str, Any]]:
        """Train on every configuration of every training graph (tree count chosen on ``valid_ds`` when given);
        validation metrics in the one history entry."""
        t0 = time.perf_counter()
        return self.fit_rows(self.rows(train_ds), self.graphs(valid_ds), t0)

    def fit_rows(self, rows: Rows, valid: list[Graph], t0: float | None = None) -> list[dict[str, Any]]:
        """:meth:`fit` from :meth:`rows` of the training graphs and :meth:`graphs` of the validation ones (each
        read once, for every tree count tried); ``t0``: when the epoch started (None: now)."""
        t0 = time.perf_counter() if t0 is None else t0
        x, y, rts, sizes = rows
        loss = self._fit(x, y, rts, sizes)
        self.chosen = self.rounds
        if valid:  # early stopping the way a competitor would: on validation OPA
            scores = {}
            for r in sorted({min(r, self.rounds) for r in ROUND_CHOICES} | {self.rounds}):
                scores[r] = self._metrics(self._scored(valid, r))["opa"]
            self.chosen = max(scores, key=lambda r: (scores[r], -r))
        entry: dict[str, Any] = {"epoch": 1, "phase": "train", "rounds": self.chosen, "rows": int(x.shape[0]),
                                 "loss": loss, "epoch_s": time.perf_counter() - t0, "peak_step_mb": 0.0,
                                 "step_mb": []}  # fmt: skip
        if valid:
            t_ev = time.perf_counter()
            entry |= {f"valid_{k}": v for k, v in self._metrics(self._scored(valid, self.chosen)).items()}
            entry["eval_s"] = time.perf_counter() - t_ev
        self.history = [entry]
        return self.history

    def _graphs(self, ds: GraphDataset) -> Iterator[Graph]:
        """Per graph of ``ds``, one read each: (name, feature rows, runtimes or None)."""
        for i in range(len(ds)):
            rec = ds.record(i)
            if rec.task != self.task:
                raise InvalidOption(f"{rec.name}: a {rec.task} graph, but the model is for {self.task}")
            rt = None if rec.runtime is None else np.asarray(rec.runtime, np.float64)
            yield rec.name, graph_features(rec, self.top_k), rt

    def _scored(self, graphs: Iterable[Graph], rounds: int | None = None) -> dict[str, Scored]:
        """Per graph of ``graphs`` (from :meth:`_graphs`): its scores with the first ``rounds`` trees (None: the
        chosen count) and its runtimes."""
        if not self.fitted:
            raise InvalidOption("the trees model is not trained")
        r = rounds or self.chosen or self.rounds
        return {name: (self._predict(x, r), rt) for name, x, rt in graphs}

    @staticmethod
    def _measured(scored: dict[str, Scored]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        for name, (_, rt) in scored.items():
            if rt is None:
                raise InvalidOption(f"{name}: has no runtimes to evaluate against")
        return scored  # type: ignore[return-value]

    def _metrics(self, scored: dict[str, Scored]) -> dict[str, float]:
        pairs = self._measured(scored).values()
        return ranking_metrics([p for p, _ in pairs], [rt for _, rt in pairs])

    def predict(self, ds: GraphDataset) -> dict[str, np.ndarray]:
        """Per graph: a score per configuration (lower = faster)."""
        return {name: pred for name, (pred, _) in self._scored(self._graphs(ds)).items()}

    def evaluate(self, ds: GraphDataset, comm: Any = None) -> dict[str, float]:
        """Ranking metrics on ``ds`` (as the GNN trainer's)."""
        return self._metrics(self._scored(self._graphs(ds)))

    def per_graph_opa(self, ds: GraphDataset) -> dict[str, float]:
        """OPA of every graph of ``ds``, by name."""
        return {name: opa(p, rt) for name, (p, rt) in self._measured(self._scored(self._graphs(ds))).items()}

    def evaluate_graphs(self, graphs: list[Graph]) -> tuple[dict[str, float], dict[str, float]]:
        """:meth:`evaluate` and :meth:`per_graph_opa` of :meth:`graphs` of a dataset (read once)."""
        scored = self._measured(self._scored(graphs))
        return self._metrics(scored), {name: opa(p, rt) for name, (p, rt) in scored.items()}

    # ------------------------------------------------------------------ files (no pickle)
    def save(self, folder: str | Path, write: Any) -> None:
        """Write the model's files and their description with ``write(name, data)`` (an atomic writer)."""
        if not self.fitted:
            raise InvalidOption("the trees model is not trained")
        for name, data in self._files().items():
            write(name, data)
        write(META_NAME, json.dumps({"kind": "mlsysopt-costmodel-trees", "library": self.library, "task": self.task,
                                     "seed": self.seed, "rounds": self.rounds, "chosen": self.chosen,
                                     "top_k": self.top_k, "history": self.history}))  # fmt: skip

    @classmethod
    def from_folder(cls, folder: Path, meta: dict[str, Any]) -> TreeRanker:
        """The model described by ``meta`` (``trees.json``), its trees read from ``folder``."""
        try:
            model = cls(str(meta["task"]), int(meta["seed"]), int(meta["rounds"]), top_k=int(meta["top_k"]))
            model.chosen = int(meta.get("chosen") or meta["rounds"])
        except (KeyError, TypeError, ValueError, InvalidOption) as exc:
            raise InvalidCheckpoint(f"{folder / META_NAME}: not a trees model description ({exc})") from None
        model._read(folder)
        hist = meta.get("history", [])
        model.history = list(hist) if isinstance(hist, list) else []
        return model

    # ------------------------------------------------------------------ what a library implements
    def _fit(self, x: np.ndarray, y: np.ndarray, runtimes: list[np.ndarray], sizes: list[int]) -> float | None:
        raise NotImplementedError

    def _predict(self, x: np.ndarray, rounds: int) -> np.ndarray:
        raise NotImplementedError

    def _files(self) -> dict[str, bytes | str]:
        raise NotImplementedError

    def _read(self, folder: Path) -> None:
        raise NotImplementedError


class TreesModel(TreeRanker):
    """scikit-learn's HistGradientBoostingRegressor on log(runtime / fastest) (``--mode trees``).

    Args:
        task, seed, rounds, threads, top_k: as :class:`~mlsysopt.costmodel.trees.TreeRanker`.
    """

    library = "sklearn"
    description = "scikit-learn HistGradientBoostingRegressor on flattened configuration features (trees.py)"

    def __init__(
        self, task: str, seed: int = 0, rounds: int = DEFAULT_ROUNDS, threads: int = 1, top_k: int = TOP_K
    ) -> None:
        super().__init__(task, seed, rounds, threads, top_k)
        self.trees: TreeArrays | None = None

    @property
    def fitted(self) -> bool:
        """Whether the model holds trained trees."""
        return self.trees is not None

    def _fit(self, x: np.ndarray, y: np.ndarray, runtimes: list[np.ndarray], sizes: list[int]) -> float | None:
        # deferred: scikit-learn loads only when this model is trained
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits  # deferred: threadpoolctl comes with scikit-learn

        est = HistGradientBoostingRegressor(max_iter=self.rounds, random_state=self.seed, **PARAMS)
        with threadpool_limits(self.threads):  # scikit-learn's trees use OpenMP threads, in predict too
            est.fit(x, y)
            theirs = est.predict(x)
        self.trees = TreeArrays.from_estimator(est)
        fitted = self.trees.predict(x)
        if not np.allclose(fitted, theirs, rtol=1e-9, atol=1e-9):
            raise InvalidOption("the exported trees do not reproduce scikit-learn's predictions (unsupported version)")
        return float(np.mean((fitted - y) ** 2))

    def _predict(self, x: np.ndarray, rounds: int) -> np.ndarray:
        assert self.trees is not None
        return self.trees.first(rounds).predict(x)

    def _files(self) -> dict[str, bytes | str]:
        assert self.trees is not None
        return {MODEL_NAME: self.trees.to_bytes()}

    def _read(self, folder: Path) -> None:
        self.trees = TreeArrays.from_file(folder / MODEL_NAME)
