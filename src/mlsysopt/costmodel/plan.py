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
from mlsysopt.costmodel.inputs import SegmentInputs, config_columns, make_inputs, unique_rows
from mlsysopt.costmodel.segment import Segmentation


@dataclass
class RegionLayer:
    """One layer's update of the affected nodes, in positions of ``sources`` (local node ids, sorted)."""

    sources: np.ndarray  # nodes read: the affected nodes after this layer and their in-neighbours
    edge_index: np.ndarray  # (2, m) edges into the affected nodes, as positions in ``sources``
    target_pos: np.ndarray  # positions of the affected nodes after this layer
    prev_pos: np.ndarray  # positions of the affected nodes before this layer
    target_edge_index: np.ndarray  # (2, m) the same edges, source as position in ``sources``, target in ``target_pos``


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
    """The configuration region of a (sub)graph: see the module docstring. ``edge_index`` is (2, m) src -> dst.

    Args:
        edge_index: Edges of the (sub)graph, ``src -> dst``, local ids.
        num_nodes: Nodes of the (sub)graph.
        cfg_pos: Local ids of the configurable nodes.
        layers: Number of message-passing layers.

    Returns:
        Region: The affected nodes before every layer and each layer's sources and edges.

    Shapes:
        edge_index: (2, num_edges) int64
        cfg_pos: (num_config_nodes,) int64
    """
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
        tpos = np.full(num_nodes, -1, np.int64)
        tpos[new] = np.arange(new.size)
        edges = np.stack([pos[src[into]], pos[dst[into]]])
        to_targets = np.stack([pos[src[into]], tpos[dst[into]]])
        region.layers.append(RegionLayer(sources, edges, pos[new], pos[region.affected[-1]], to_targets))
        pos[sources] = -1
        region.affected.append(new)
        in_a = nxt
    return region


@dataclass
class Block:
    """Consecutive whole segments as one graph with only their intra-segment edges (or the whole graph)."""

    segments: np.ndarray  # segment ids
    nodes: np.ndarray | None  # global node ids (None: every node, in order)
    edge_index: np.ndarray  # (2, m) local ids
    seg_ids: np.ndarray  # (n_block,) position of each node's segment in ``segments``
    region: Region | None

    @property
    def num_segments(self) -> int:
        """Segments in the block."""
        return int(self.segments.size)


#: Most nodes evaluated as one block of segments (bounds evaluation memory).
BLOCK_NODES = 16384


class GraphPlan:
    """A record with its segmentation, column map, signatures and regions (lazy, cached per segment).

    Args:
        rec: The graph record.
        seg: Its segmentation.
        layers: Number of GNN layers (sets the configuration regions).
        deviation: Whether the model adds the config-deviation column (layout).
    """

    def __init__(self, rec: GraphRecord, seg: Segmentation, layers: int, deviation: bool = False) -> None:
        self.rec, self.seg, self.layers, self.deviation = rec, seg, int(layers), bool(deviation)
        self.columns = config_columns(rec) if rec.task == "layout" else None
        self._sig: dict[int, np.ndarray] = {}
        self._regions: dict[int, Region | None] = {}
        self._keys: tuple[np.ndarray, np.ndarray] | None = None
        self._blocks: tuple[int, list[Block]] | None = None

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
                first, inv, _ = unique_rows(rows)
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

    def whole(self) -> Block:
        """The whole graph, every edge kept, as one block (full-graph models)."""
        return Block(np.arange(self.num_segments), None, self.rec.edge_index, self.seg.assignment, self.region(None))

    def block(self, segs: np.ndarray) -> Block:
        """Segments ``segs`` as one block: their nodes in segment order, only intra-segment edges, their region."""
        segs = np.asarray(segs, np.int64)
        parts, edges, offset = [], [], 0
        for s in segs.tolist():
            ei, nodes = self.seg.subgraph(s, self.rec.edge_index)
            parts.append(nodes)
            edges.append(ei + offset)
            offset += nodes.size
        nodes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        ei = np.concatenate(edges, axis=1) if edges else np.zeros((2, 0), np.int64)
        seg_ids = np.repeat(np.arange(segs.size), self.seg.sizes[segs])
        region = None
        if self.columns is not None:
            pos = np.flatnonzero(self.columns[nodes] >= 0)
            region = config_region(ei, nodes.size, pos, self.layers) if pos.size else None
        return Block(segs, nodes, ei, seg_ids, region)

    def split(self, segs: np.ndarray, max_nodes: int = BLOCK_NODES) -> list[np.ndarray]:
        """``segs`` cut into consecutive groups of at most ``max_nodes`` nodes (at least one segment each)."""
        segs = np.asarray(segs, np.int64)
        cum = np.concatenate(([0], np.cumsum(self.seg.sizes[segs])))
        out, start = [], 0
        while start < segs.size:
            stop = max(start + 1, int(np.searchsorted(cum, cum[start] + max_nodes, side="right")) - 1)
            out.append(segs[start : min(stop, segs.size)])
            start = min(stop, segs.size)
        return out

    def blocks(self, max_nodes: int = BLOCK_NODES) -> list[Block]:
        """Every segment, in blocks of at most ``max_nodes`` nodes (cached)."""
        if self._blocks is None or self._blocks[0] != max_nodes:
            groups = self.split(np.arange(self.num_segments), max_nodes)
            self._blocks = (max_nodes, [self.block(g) for g in groups])
        return self._blocks[1]

    def block_inputs(self, block: Block, configs: np.ndarray, device: object = "cpu") -> SegmentInputs:
        """Tensors of ``block`` for ``configs`` (C,) or signature rows (R, segments) on ``device``."""
        return make_inputs(self.rec, block.nodes, block.edge_index, configs, device, self.columns, self.deviation,
                           block.seg_ids)  # fmt: skip

    def signature_rows(self, block: Block, configs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rep (R, segments), row (C, segments))``: configuration ``configs[c]`` of segment ``j`` of ``block`` is
        computed as row ``row[c, j]``, whose configuration there is ``rep[row[c, j], j]``; R is the most distinct
        sub-configurations any one of the block's segments has among ``configs``."""
        configs = np.asarray(configs, np.int64)
        segs = block.segments
        rows = np.zeros((configs.size, segs.size), np.int64)
        firsts = []
        for j, s in enumerate(segs.tolist()):
            _, first, inv = np.unique(self.signatures(s)[configs], return_index=True, return_inverse=True)
            rows[:, j] = inv.reshape(-1)
            firsts.append(first)
        r = max((f.size for f in firsts), default=1)
        rep = np.stack([configs[f[np.minimum(np.arange(r), f.size - 1)]] for f in firsts], axis=1) if firsts else None
        return (rep if rep is not None else configs[:1, None]), rows

    def inputs(self, s: int | None, configs: np.ndarray, device: object = "cpu") -> SegmentInputs:
        """Tensors of segment ``s`` (None: the whole graph, every edge) for ``configs`` on ``device``."""
        if s is None:
            return make_inputs(self.rec, None, self.rec.edge_index, configs, device, self.columns, self.deviation)
        ei, nodes = self.seg.subgraph(s, self.rec.edge_index)
        return make_inputs(self.rec, nodes, ei, configs, device, self.columns, self.deviation)
