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
) -> SegmentInputs:
    """Copy the slice of ``record`` holding ``nodes`` (None = all) onto ``device`` for the given ``configs``.

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
        feat = record.node_config_feat[np.ix_(np.asarray(configs, dtype=np.int64), col[pos])]
        inp.cfg_pos = to_device(pos, device, torch.long)
        inp.cfg_feat = to_device(feat, device, torch.float32)
        inp.num_configs = len(configs)
    return inp


def feature_stats(records: Iterable[GraphRecord]) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and std of node features over ``records`` (streamed: one graph at a time, float64 sums)."""
    total, sq, count = None, None, 0
    for rec in records:
        x = np.asarray(rec.x, dtype=np.float64)
        total = x.sum(0) if total is None else total + x.sum(0)
        sq = (x * x).sum(0) if sq is None else sq + (x * x).sum(0)
        count += x.shape[0]
    if total is None or sq is None or count == 0:
        raise InvalidOption("cannot compute feature statistics from an empty dataset")
    mean = total / count
    std = np.sqrt(np.maximum(sq / count - mean * mean, 0.0))
    return mean.astype(np.float32), std.astype(np.float32)


def prune_layout(record: GraphRecord, hops: int = 1) -> GraphRecord:
    """Keep the configurable nodes and their ``hops``-hop neighbours (either edge direction): the Kaggle trick.

    Node order (topological) is preserved; ``config_node_ids`` and ``node_splits`` are renumbered.
    """
    import scipy.sparse as sp

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
