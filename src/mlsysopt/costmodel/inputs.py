"""What the cost model reads: one segment's (or a whole graph's) tensors, z-score statistics, layout pruning.

:func:`make_inputs` copies the slice of a :class:`GraphRecord` holding a segment's nodes onto the compute device
for a set of configurations; only layout inputs depend on the configurations (their configurable nodes' features).
:func:`feature_stats` streams the node-feature statistics of a dataset; :func:`prune_layout` is the Kaggle winners'
trick (configurable nodes and their k-hop neighbours).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.errors import InvalidOption


@dataclass
class SegmentInputs:
    """The tensors of one segment (or a whole graph), already on the compute device."""

    x: torch.Tensor  # (n, F) raw node features
    edge_index: torch.Tensor  # (2, m) local ids, producer -> consumer
    opcode: torch.Tensor | None = None  # (n,)
    cfg_pos: torch.Tensor | None = None  # (nc_s,) local positions of configurable nodes (layout)
    cfg_feat: torch.Tensor | None = None  # (C, nc_s, 18) their config features (layout)
    num_configs: int = 1

    def select(self, rows: np.ndarray) -> SegmentInputs:
        """The same segment for the configurations at positions ``rows`` of this one's (layout only changes)."""
        if self.cfg_feat is None:
            return self
        idx = torch.as_tensor(np.asarray(rows, np.int64), device=self.cfg_feat.device)
        return SegmentInputs(self.x, self.edge_index, self.opcode, self.cfg_pos, self.cfg_feat[idx], len(rows))


def config_columns(record: GraphRecord) -> np.ndarray:
    """For every node, its column in ``node_config_feat`` (or -1 when it takes no layout config), shape (n,)."""
    col = np.full(record.num_nodes, -1, dtype=np.int64)
    if record.config_node_ids is not None:
        col[np.asarray(record.config_node_ids, dtype=np.int64)] = np.arange(len(record.config_node_ids))
    return col


def to_device(a: np.ndarray, device: str | torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A real copy of ``a`` on ``device`` (never a view of numpy memory), so memory accounting sees it."""
    a = np.ascontiguousarray(a)
    host = torch.from_numpy(a if a.flags.writeable else a.copy())  # torch warns on read-only arrays
    return host.to(device=device, dtype=dtype, copy=True)


def make_inputs(
    record: GraphRecord,
    nodes: np.ndarray | None,
    edge_index: np.ndarray,
    configs: np.ndarray,
    device: str | torch.device = "cpu",
    columns: np.ndarray | None = None,
    deviation: bool = False,
    seg_ids: np.ndarray | None = None,
) -> SegmentInputs:
    """Copy the slice of ``record`` holding ``nodes`` (None = all) onto ``device`` for the given ``configs``.

    ``configs`` may also be ``(R, segments)`` with ``seg_ids`` the segment of every node: row ``r`` then gives each
    segment's nodes the features of configuration ``configs[r, segment]`` (one row per signature, see plan.py).
    With ``deviation`` each configurable node's features get one more column: 1 where the configuration differs
    from that node's most common setting among the graph's configurations (:func:`config_deviation`).

    ``edge_index`` must index into ``nodes`` (e.g. from ``Segmentation.subgraph``); ``columns`` is
    :func:`config_columns` of the record, passed in to avoid O(n) work per segment. Only layout inputs depend on
    ``configs``; tile and MalNet inputs are built for one config.
    """
    device = torch.device(device)
    x = record.x if nodes is None else record.x[nodes]
    op = None
    if record.opcode is not None:
        op = to_device(record.opcode if nodes is None else record.opcode[nodes], device, torch.long)
    inp = SegmentInputs(
        x=to_device(x, device, torch.float32), edge_index=to_device(edge_index, device, torch.long), opcode=op
    )
    if record.task == "layout" and record.node_config_feat is not None:
        col = config_columns(record) if columns is None else columns
        col = col if nodes is None else col[nodes]
        pos = np.flatnonzero(col >= 0)
        # One gather of (configs x this segment's columns): never the (configs x all columns) block.
        cfg = np.asarray(configs, dtype=np.int64)
        if cfg.ndim == 2:
            assert seg_ids is not None
            cfg_idx = (cfg[:, seg_ids[pos]], col[pos][None, :])
        else:
            cfg_idx = np.ix_(cfg, col[pos])
        feat = record.node_config_feat[cfg_idx]
        if deviation:
            feat = np.concatenate([feat, config_deviation(record)[cfg_idx][..., None]], axis=-1)
        inp.cfg_pos = to_device(pos, device, torch.long)
        inp.cfg_feat = to_device(feat, device, torch.float32)
        inp.num_configs = cfg.shape[0]
    return inp


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first index, inverse, counts)`` of the distinct rows of a 2-D array (rows compared as raw bytes: fast)."""
    a = np.ascontiguousarray(rows)
    if a.ndim != 2 or a.shape[1] == 0:
        n = a.shape[0]
        return np.zeros(min(n, 1), np.int64), np.zeros(n, np.int64), np.array([n] if n else [], np.int64)
    keys = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).reshape(-1)
    _, first, inv, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    return first, inv.reshape(-1), counts


def config_deviation(record: GraphRecord) -> np.ndarray:
    """(configs, nc) float32: 1 where a configurable node's features differ from its most common setting.

    A compiler's search explores around its default, so the most common setting of a node is (nearly always) the
    default's: this says where a configuration deviates from it. It uses the graph's configurations only, never a
    runtime, and is computed once per record.

    Args:
        record: A layout record (with ``node_config_feat``).

    Returns:
        np.ndarray: The deviation mask (cached on the record).

    Shapes:
        output: (num_configs, num_config_nodes) float32
    """
    cached = record.__dict__.get("_deviation")
    if cached is not None:
        return cached
    feat = np.asarray(record.node_config_feat)
    c, nc, _ = feat.shape
    out = np.zeros((c, nc), np.float32)
    for j in range(nc):
        _, inv, counts = unique_rows(feat[:, j])
        out[:, j] = inv != int(np.argmax(counts))
    record.__dict__["_deviation"] = out
    return out


def squash(x: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """``sign(x) * log1p(|x|)``: node features span many orders of magnitude (dims, work); the model reads this."""
    if isinstance(x, torch.Tensor):
        return torch.sign(x) * torch.log1p(torch.abs(x))
    return np.sign(x) * np.log1p(np.abs(x))


def feature_stats(records: Iterable[GraphRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and std of :func:`squash`-ed node features over ``records`` (streamed, float64 sums)."""
    total, sq, count = None, None, 0
    for rec in records:
        x = squash(np.asarray(rec.x, dtype=np.float64))
        total = x.sum(0) if total is None else total + x.sum(0)
        sq = (x * x).sum(0) if sq is None else sq + (x * x).sum(0)
        count += x.shape[0]
    if total is None or sq is None or count == 0:
        raise InvalidOption("cannot compute feature statistics from an empty dataset")
    mean = total / count
    std = np.sqrt(np.maximum(sq / count - mean * mean, 0.0))
    return mean.astype(np.float32), std.astype(np.float32)


def config_stats(records: Iterable[GraphRecord], deviation: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and std of layout configuration features over every (configuration, configurable node) of
    ``records`` (with ``deviation``, one more column: :func:`config_deviation`); streamed, float64 sums."""
    total, sq, count = None, None, 0
    for rec in records:
        if rec.node_config_feat is None:
            continue
        f = np.asarray(rec.node_config_feat, np.float64).reshape(-1, rec.node_config_feat.shape[-1])
        if deviation:
            f = np.concatenate([f, config_deviation(rec).reshape(-1, 1)], axis=1)
        total = f.sum(0) if total is None else total + f.sum(0)
        sq = (f * f).sum(0) if sq is None else sq + (f * f).sum(0)
        count += f.shape[0]
    if total is None or sq is None or count == 0:
        raise InvalidOption("cannot compute configuration statistics: no layout configurations")
    mean = total / count
    return mean.astype(np.float32), np.sqrt(np.maximum(sq / count - mean * mean, 0.0)).astype(np.float32)


def log_runtime_stats(records: Iterable[GraphRecord]) -> tuple[float, float]:
    """Mean and std of log runtime over every configuration of ``records`` (the scale of an absolute target)."""
    logs = [np.log(np.asarray(r.runtime, np.float64)) for r in records if r.runtime is not None]
    if not logs:
        raise InvalidOption("cannot fit an absolute runtime target: the graphs have no runtimes")
    v = np.concatenate(logs)
    return float(v.mean()), float(v.std())


def prune_layout(record: GraphRecord, hops: int = 1) -> GraphRecord:
    """Keep the configurable nodes and their ``hops``-hop neighbours (either edge direction): the Kaggle trick.

    Node order (topological) is preserved; ``config_node_ids`` and ``node_splits`` are renumbered.

    Args:
        record: A layout record.
        hops: Neighbourhood radius kept around the configurable nodes, >= 0.

    Returns:
        GraphRecord: The pruned record.

    Raises:
        InvalidOption: For a non-layout record or negative ``hops``.
    """
    import scipy.sparse as sp  # deferred: scipy.sparse loads only for sparse inputs

    if record.task != "layout" or record.config_node_ids is None:
        raise InvalidOption(f"{record.name}: pruning applies to layout graphs only (task '{record.task}')")
    if hops < 0:
        raise InvalidOption(f"prune hops must be >= 0, got {hops}")
    n = record.num_nodes
    keep = np.zeros(n, dtype=bool)
    keep[record.config_node_ids] = True
    if hops and record.num_edges:
        u, v = record.edge_index
        adj = sp.csr_matrix((np.ones(2 * len(u), dtype=np.int8), (np.r_[u, v], np.r_[v, u])), shape=(n, n))
        for _ in range(hops):
            keep |= (adj @ keep.astype(np.int8)) > 0
    new_id = np.cumsum(keep) - 1
    e = record.edge_index
    ek = keep[e[0]] & keep[e[1]]
    splits = None
    if record.node_splits is not None:
        # A split at old id s starts at the first kept node >= s, i.e. new id = number of kept nodes before s.
        before = np.concatenate(([0], np.cumsum(keep)))
        splits = np.unique(before[np.clip(np.asarray(record.node_splits, dtype=np.int64), 0, n)])
    return GraphRecord(
        name=record.name,
        task=record.task,
        x=record.x[keep],
        edge_index=new_id[e[:, ek]].astype(np.int64),
        opcode=None if record.opcode is None else record.opcode[keep],
        node_splits=splits,
        config_node_ids=new_id[record.config_node_ids].astype(np.int64),
        node_config_feat=record.node_config_feat,
        graph_config_feat=record.graph_config_feat,
        runtime=record.runtime,
        label=record.label,
    )
