"""The features the tree baselines learn from: one row per (graph, configuration), and the rankers' grades.

* **flattened per-node configuration features**: the graph's ``TOP_K`` configurable nodes with the most work (node
  feature 10, log2 work; ties by node id), each contributing its 18 configuration features, whether they differ
  from that node's most common setting in the graph, its log2 work, opcode and rank, and its node features 2-7
  (output dims) and 16-25 (windows and channels of real graphs, see :mod:`~mlsysopt.costmodel.data.features`)
  (zeros where a graph has fewer);
* **configuration aggregates**: per configuration feature, its mean over all configurable nodes; how many nodes
  differ from their most common setting, and their summed log2 work;
* **simple graph statistics**: log nodes, log edges, configurable nodes, log total work.

Tile graphs use their 24 graph configuration features and the same statistics. The models that use them:
:mod:`mlsysopt.costmodel.trees` and :mod:`mlsysopt.costmodel.boosting`.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.costmodel.inputs import unique_rows
from mlsysopt.errors import InvalidOption

TOP_K = 16
#: Node-feature columns each of the top-k nodes contributes (output dims; windows and channels of real graphs).
NODE_COLUMNS: tuple[int, ...] = (*range(2, 8), *range(16, 26))


def graph_features(rec: GraphRecord, top_k: int = TOP_K) -> np.ndarray:
    """Feature rows ``(configs, F)`` of one layout or tile graph (see the module docstring).

    Args:
        rec: A layout or tile record.
        top_k: Configurable nodes summarized per layout graph.

    Returns:
        np.ndarray: One feature row per configuration.

    Shapes:
        output: (num_configs, num_features) float64
    """
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
    per = np.zeros((c, top_k, feat.shape[2] + 4 + len(NODE_COLUMNS)))
    k = order.size
    per[:, :k, : feat.shape[2]] = feat[:, order]
    per[:, :k, feat.shape[2]] = diff[:, order]
    per[:, :k, feat.shape[2] + 1] = work[ids[order]]
    per[:, :k, feat.shape[2] + 2] = 0 if rec.opcode is None else rec.opcode[ids[order]]
    per[:, :k, feat.shape[2] + 3] = x[ids[order], 1]
    cols = [j for j in NODE_COLUMNS if j < x.shape[1]]
    per[:, :k, feat.shape[2] + 4 : feat.shape[2] + 4 + len(cols)] = x[ids[order]][:, cols]
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


def log_target(rec: GraphRecord) -> np.ndarray:
    """``log(runtime / fastest runtime)`` of one graph's configurations: what the regressor fits."""
    if rec.runtime is None:
        raise InvalidOption(f"{rec.name}: has no runtimes to train on")
    rt = np.asarray(rec.runtime, np.float64)
    return np.log(rt / rt.min())


def grades(rt: np.ndarray, levels: int = 30) -> np.ndarray:
    """Relevance grades of one graph's runtimes for the rankers: ``levels`` for the fastest .. 0 for the slowest
    (equal runtimes get equal grades)."""
    r = rankdata(np.asarray(rt, np.float64), method="min") - 1.0
    return np.rint(levels * (1.0 - r / max(1.0, r.max()))).astype(np.int32)
