"""The non-GNN baseline a Kaggle competitor would use: gradient-boosted trees on flattened configuration features.

The 11th place of the TpuGraphs "Fast or Slow" competition used LightGBM alone on layout; this is that kind of
model (LightGBM, ``--mode trees``). One row per (graph, configuration), features:

* **flattened per-node configuration features**: the graph's ``TOP_K`` configurable nodes with the most work (node
  feature 10, log2 work; ties by node id), each contributing its 18 configuration features, whether they differ
  from that node's most common setting in the graph, its log2 work, opcode and rank (zeros where a graph has fewer);
* **configuration aggregates**: per configuration feature, its mean over all configurable nodes; how many nodes
  differ from their most common setting, and their summed log2 work;
* **simple graph statistics**: log nodes, log edges, configurable nodes, log total work.

Target: ``log(runtime / fastest runtime of the graph)``, so graphs of every scale weigh alike; the model regresses
it (L2) and ranks a graph's configurations by the prediction (lower = faster). Tile graphs use their 24 graph
configuration features and the same statistics. The model is saved as LightGBM's own text format (read back
without pickle) next to a JSON description of the features.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.costmodel.inputs import unique_rows
from mlsysopt.errors import InvalidCheckpoint, InvalidOption

TOP_K = 16
MODEL_NAME = "trees.txt"
META_NAME = "trees.json"
PARAMS: dict[str, Any] = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20,
                          "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
                          "verbosity": -1, "deterministic": True, "force_col_wise": True}  # fmt: skip


def graph_features(rec: GraphRecord, top_k: int = TOP_K) -> np.ndarray:
    """Feature rows ``(configs, F)`` of one layout or tile graph (see the module docstring)."""
    x = rec.x
    work = np.asarray(x[:, 10], np.float64) if x.shape[1] > 10 else np.zeros(rec.num_nodes)
    stats = np.array([np.log1p(rec.num_nodes), np.log1p(rec.num_edges), 0.0, np.log1p(np.exp2(work).sum())])
    c = rec.num_configs
    if rec.task == "tile":
        assert rec.graph_config_feat is not None
        return np.hstack([rec.graph_config_feat.astype(np.float64), np.tile(stats, (c, 1))])
    if rec.node_config_feat is None or rec.config_node_ids is None:
        raise InvalidOption(f"{rec.name}: trees need layout or tile graphs, not {rec.task}")
    ids = np.asarray(rec.config_node_ids, np.int64)
    feat = rec.node_config_feat.astype(np.float64)  # (c, nc, 18)
    nc = ids.size
    stats[2] = nc
    mode = _mode_rows(feat)  # (nc, 18): each node's most common setting
    diff = (feat != mode[None]).any(axis=2)  # (c, nc)
    order = np.lexsort((ids, -work[ids]))[:top_k]
    per = np.zeros((c, top_k, feat.shape[2] + 4))
    k = order.size
    per[:, :k, : feat.shape[2]] = feat[:, order]
    per[:, :k, feat.shape[2]] = diff[:, order]
    per[:, :k, feat.shape[2] + 1] = work[ids[order]]
    per[:, :k, feat.shape[2] + 2] = 0 if rec.opcode is None else rec.opcode[ids[order]]
    per[:, :k, feat.shape[2] + 3] = x[ids[order], 1]
    agg = np.hstack(
        [feat.mean(axis=1), diff.sum(axis=1, keepdims=True), (diff * work[ids][None]).sum(1, keepdims=True)]
    )
    return np.hstack([per.reshape(c, -1), agg, np.tile(stats, (c, 1))])


def _mode_rows(feat: np.ndarray) -> np.ndarray:
    """Per configurable node, its most common 18-feature row over the configurations."""
    _, nc, d = feat.shape
    out = np.empty((nc, d))
    for j in range(nc):
        first, _, counts = unique_rows(np.ascontiguousarray(feat[:, j]))
        out[j] = feat[first[int(np.argmax(counts))], j]
    return out


def _target(rec: GraphRecord) -> np.ndarray:
    if rec.runtime is None:
        raise InvalidOption(f"{rec.name}: has no runtimes to train on")
    rt = np.asarray(rec.runtime, np.float64)
    return np.log(rt / rt.min())


class TreesModel:
    """LightGBM on flattened configuration features; ``fit``, ``predict``, ``evaluate`` like the GNN trainer."""

    def __init__(self, task: str, seed: int = 0, rounds: int = 400, threads: int = 1, top_k: int = TOP_K) -> None:
        if task not in ("layout", "tile"):
            raise InvalidOption(f"--mode trees ranks configurations: it is for layout and tile graphs, not {task}")
        self.task, self.seed, self.rounds, self.threads, self.top_k = task, int(seed), int(rounds), int(threads), top_k
        self.booster: Any = None
        self.history: list[dict[str, Any]] = []

    def _rows(self, ds: GraphDataset) -> tuple[np.ndarray, np.ndarray, list[int]]:
        xs, ys, sizes = [], [], []
        for i in range(len(ds)):
            rec = ds.record(i)
            if rec.task != self.task:
                raise InvalidOption(f"{rec.name}: a {rec.task} graph, but the model is for {self.task}")
            xs.append(graph_features(rec, self.top_k))
            ys.append(_target(rec))
            sizes.append(rec.num_configs)
        widths = {x.shape[1] for x in xs}
        if len(widths) != 1:
            raise InvalidOption(f"graphs give different feature widths {sorted(widths)}")
        return np.vstack(xs), np.concatenate(ys), sizes

    def fit(self, train_ds: GraphDataset, valid_ds: GraphDataset | None = None) -> list[dict[str, Any]]:
        """Train on every configuration of every training graph; validation metrics in the one history entry."""
        import time

        import lightgbm as lgb

        t0 = time.perf_counter()
        x, y, _ = self._rows(train_ds)
        params = {**PARAMS, "seed": self.seed, "num_threads": self.threads}
        self.booster = lgb.train(params, lgb.Dataset(x, y), num_boost_round=self.rounds)
        entry: dict[str, Any] = {"epoch": 1, "phase": "train", "rounds": self.rounds, "rows": int(x.shape[0]),
                                 "loss": float(np.mean((self.booster.predict(x) - y) ** 2)),
                                 "epoch_s": time.perf_counter() - t0, "peak_step_mb": 0.0, "step_mb": []}  # fmt: skip
        if valid_ds is not None and len(valid_ds):
            entry |= {f"valid_{k}": v for k, v in self.evaluate(valid_ds).items()}
        self.history = [entry]
        return self.history

    def predict(self, ds: GraphDataset) -> dict[str, np.ndarray]:
        """Per graph: a score per configuration (lower = faster)."""
        if self.booster is None:
            raise InvalidOption("the trees model is not trained")
        out = {}
        for i in range(len(ds)):
            rec = ds.record(i)
            out[rec.name] = np.asarray(self.booster.predict(graph_features(rec, self.top_k)), np.float64)
        return out

    def evaluate(self, ds: GraphDataset) -> dict[str, float]:
        """Ranking metrics on ``ds`` (as the GNN trainer's)."""
        from mlsysopt.costmodel.metrics import ranking_metrics

        preds = self.predict(ds)
        trues = []
        for i in range(len(ds)):
            rec = ds.record(i)
            if rec.runtime is None:
                raise InvalidOption(f"{rec.name}: has no runtimes to evaluate against")
            trues.append(np.asarray(rec.runtime, np.float64))
        return ranking_metrics(list(preds.values()), trues)

    # ------------------------------------------------------------------ files (no pickle)
    def save(self, folder: str | Path, write: Any) -> None:
        """Write the model text and its description with ``write(name, text)`` (an atomic writer)."""
        write(MODEL_NAME, self.booster.model_to_string())
        write(META_NAME, json.dumps({"kind": "mlsysopt-costmodel-trees", "task": self.task, "seed": self.seed,
                                     "rounds": self.rounds, "top_k": self.top_k, "history": self.history}))  # fmt: skip

    @classmethod
    def load(cls, folder: str | Path) -> TreesModel:
        """Read a trees run folder (LightGBM text + JSON), or raise InvalidCheckpoint saying why not."""
        import lightgbm as lgb

        from mlsysopt.io import read_json

        folder = Path(folder)
        meta = read_json(folder / META_NAME, InvalidCheckpoint)
        if meta.get("kind") != "mlsysopt-costmodel-trees":
            raise InvalidCheckpoint(f"{folder / META_NAME}: not a trees model description")
        try:
            text = (folder / MODEL_NAME).read_text()
            model = cls(meta["task"], meta["seed"], meta["rounds"], top_k=meta["top_k"])
            model.booster = lgb.Booster(model_str=text)
        except (OSError, KeyError, TypeError, UnicodeDecodeError, lgb.basic.LightGBMError) as exc:
            raise InvalidCheckpoint(f"{folder / MODEL_NAME}: not a readable trees model ({exc})") from None
        model.history = list(meta.get("history", []))
        return model
