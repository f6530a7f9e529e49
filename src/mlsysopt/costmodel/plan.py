"""A graph prepared for the cost model: segments, configuration signatures and configuration regions.

**Configuration signatures.** A segment's embedding is computed with the edges that leave it dropped, so it
depends on a layout configuration only through the features of the configurable nodes *inside* that segment.
Two configurations that agree there have the same embedding. ``signatures(s)`` numbers the distinct
sub-configurations of segment ``s`` (0 for every configuration of a segment without configurable nodes): the
history table keys its rows by (graph, segment, signature), so one row serves every configuration that shares
it, and evaluation computes each distinct sub-configuration once.

**Configuration regions.** Only the configurable nodes' inputs differ between configurations; a message-passing
layer spreads a difference one hop along the edges. :func:`config_region` lists, per layer, the nodes whose state
can depend on the configuration (``affected``: the configurable nodes and everything within ``l`` hops
downstream) and the nodes a layer reads to update them. :meth:`CostModel.node_states` computes every node once for
all configurations and only the affected nodes per configuration: the same function as running every node for
every configuration, at a fraction of the cost (a graph-wide region for full-graph training, one per segment).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.costmodel.inputs import SegmentInputs, config_columns, make_inputs
from mlsysopt.costmodel.segment import Segmentation


@dataclass
class RegionLayer:
    """One layer's update of the affected nodes, in positions of ``sources`` (local node ids, sorted)."""

    sources: np.ndarray  # nodes read: the affected nodes after this layer and their in-neighbours
    edge_index: np.ndarray  # (2, m) edges into the affected nodes, as positions in ``sources``
    target_pos: np.ndarray  # positions of the affected nodes after this layer
    prev_pos: np.ndarray  # positions of the affected nodes before this layer


@dataclass
class Region:
    """Nodes whose states can depend on the configuration, before every layer (``affected[0]``: configurable)."""

    affected: list[np.ndarray]
    layers: list[RegionLayer] = field(default_factory=list)

    @property
    def final(self) -> np.ndarray:
        """The affected nodes after the last layer (local ids, sorted)."""
        return self.affected[-1]


def config_region(edge_index: np.ndarray, num_nodes: int, cfg_pos: np.ndarray, layers: int) -> Region:
    """The configuration region of a (sub)graph: see the module docstring. ``edge_index`` is (2, m) src -> dst."""
    src, dst = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
    affected = np.unique(np.asarray(cfg_pos, np.int64))
    in_a = np.zeros(num_nodes, bool)
    in_a[affected] = True
    region = Region([affected])
    pos = np.full(num_nodes, -1, np.int64)
    for _ in range(layers):
        nxt = in_a.copy()
        nxt[dst[in_a[src]]] = True
        into = nxt[dst]
        read = nxt.copy()
        read[src[into]] = True
        sources = np.flatnonzero(read)
        pos[sources] = np.arange(sources.size)
        new = np.flatnonzero(nxt)
        region.layers.append(
            RegionLayer(sources, np.stack([pos[src[into]], pos[dst[into]]]), pos[new], pos[region.affected[-1]])
        )
        pos[sources] = -1
        region.affected.append(new)
        in_a = nxt
    return region


class GraphPlan:
    """A record with its segmentation, column map, signatures and regions (lazy, cached per segment)."""

    def __init__(self, rec: GraphRecord, seg: Segmentation, layers: int) -> None:
        self.rec, self.seg, self.layers = rec, seg, int(layers)
        self.columns = config_columns(rec) if rec.task == "layout" else None
        self._sig: dict[int, np.ndarray] = {}
        self._regions: dict[int, Region | None] = {}
        self._keys: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def num_segments(self) -> int:
        """Segments of the graph."""
        return self.seg.num_segments

    def config_cols(self, s: int) -> np.ndarray:
        """Columns of ``node_config_feat`` of the configurable nodes in segment ``s`` (by node id)."""
        if self.columns is None:
            return np.zeros(0, np.int64)
        col = self.columns[self.seg.nodes(s)]
        return col[col >= 0]

    def signatures(self, s: int) -> np.ndarray:
        """Signature of every configuration in segment ``s``, shape (C,) int64 (ids 0..U-1 by first appearance)."""
        sig = self._sig.get(s)
        if sig is None:
            cols = self.config_cols(s)
            if cols.size == 0 or self.rec.node_config_feat is None:
                sig = np.zeros(self.rec.num_configs, np.int64)
            else:
                rows = self.rec.node_config_feat[:, cols].reshape(self.rec.num_configs, -1)
                _, first, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)
                rank = np.empty(first.size, np.int64)  # renumber by first appearance: stable across numpy versions
                rank[np.argsort(first, kind="stable")] = np.arange(first.size)
                sig = rank[inv.reshape(-1)]
            self._sig[s] = sig
        return sig

    def row_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets (S + 1,), sig (C, S))``: the table row of (config c, segment s) is ``offsets[s] + sig[c, s]``."""
        if self._keys is None:
            sig = np.stack([self.signatures(s) for s in range(self.num_segments)], axis=1)
            counts = sig.max(axis=0) + 1 if sig.size else np.ones(self.num_segments, np.int64)
            self._keys = (np.concatenate(([0], np.cumsum(counts))).astype(np.int64), sig)
        return self._keys

    def region(self, s: int | None) -> Region | None:
        """Configuration region of segment ``s`` (None: the whole graph); None when it has no configurable node."""
        key = -1 if s is None else int(s)
        if key not in self._regions:
            region = None
            if self.columns is not None:
                if s is None:
                    ei, col = self.rec.edge_index, self.columns
                else:
                    ei, nodes = self.seg.subgraph(s, self.rec.edge_index)
                    col = self.columns[nodes]
                pos = np.flatnonzero(col >= 0)
                if pos.size:
                    region = config_region(ei, col.shape[0], pos, self.layers)
            self._regions[key] = region
        return self._regions[key]

    def inputs(self, s: int | None, configs: np.ndarray, device: object = "cpu") -> SegmentInputs:
        """Tensors of segment ``s`` (None: the whole graph, every edge) for ``configs`` on ``device``."""
        if s is None:
            return make_inputs(self.rec, None, self.rec.edge_index, configs, device, self.columns)
        ei, nodes = self.seg.subgraph(s, self.rec.edge_index)
        return make_inputs(self.rec, nodes, ei, configs, device, self.columns)
