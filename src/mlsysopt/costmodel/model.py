"""The cost model: opcode embedding + z-scored node features + config fusion -> PyG backbone -> segment pooling -> head.

Shapes. A segment (or a whole graph) enters as :class:`~mlsysopt.costmodel.inputs.SegmentInputs`. The first layer
is linear in ``[z-scored squashed node features | opcode embedding | config features]`` (squash = ``sign(x)
log1p|x|``), computed as a per-node part shared by all configurations plus a per-configuration part added only on
the configurable nodes (non-configurable nodes carry zeros for the config features; the config projection's bias
marks the configurable ones). With ``deviation`` (layout, off by default) a configurable node's features carry one more
column: whether the configuration deviates from that node's most common setting in the graph. Each backbone
layer is ``h = h + dropout(relu(LayerNorm(conv(h))))`` (skip-sum as in the reference).

Node states are :class:`NodeStates`: every node once (``shared``, (n, hidden)), plus, for layout inputs, the nodes of
the configuration region (:mod:`mlsysopt.costmodel.plan`) once per configuration (``config``, (C, a, hidden)). This
is exactly the function of running all n nodes for each of the C configurations, at the cost of n + C * a node
updates (SAGE and GIN; the GCN backbone normalises by both endpoints' degrees and runs densely, C x n). Tile and
MalNet states do not depend on the configuration (tile configs join after pooling).

A segment is pooled to ``[max | mean]`` over its nodes (``embed_dim = 2 * hidden``), L2-normalised for the ranking
tasks. ``readout`` decides what is summed over segments: ``embedding`` (the GST paper's MalNet model: the head
scores the sum, mean for MalNet) or ``scalar`` (the reference's TPU model: the head scores each segment and the
graph's score is the sum of the segment scores). Scores are one per configuration (lower = faster) or class logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, GINConv, SAGEConv

from mlsysopt.costmodel.inputs import SegmentInputs, squash, to_device
from mlsysopt.costmodel.model_config import ModelConfig
from mlsysopt.costmodel.plan import Block, GraphPlan, Region
from mlsysopt.errors import InvalidOption


@dataclass
class NodeStates:
    """Backbone output: ``shared`` (n, h) for every node; ``config`` (C, a, h) for the region's ``affected`` nodes.

    A dense result (GCN) has ``shared`` None and ``config`` (C, n, h) for every node.
    """

    shared: torch.Tensor | None
    config: torch.Tensor | None = None
    affected: torch.Tensor | None = None  # (a,) node positions of ``config``'s rows
    num_configs: int = 1


class CostModel(nn.Module):
    """GNN cost model over graph segments; see the module docstring for the data flow.

    Args:
        config: The architecture (validated again here).

    Raises:
        InvalidOption: If ``config`` is invalid.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        h = config.hidden
        self.register_buffer("feat_mean", torch.zeros(config.node_feat_dim))
        self.register_buffer("feat_std", torch.ones(config.node_feat_dim))
        cfg_in = config.config_feat_dim + int(config.deviation)
        self.register_buffer("cfg_mean", torch.zeros(cfg_in))
        self.register_buffer("cfg_std", torch.ones(cfg_in))
        # an absolute target (the logmse loss): scores are (log runtime - target_mean) / target_std
        self.register_buffer("target_stats", torch.tensor([0.0, 1.0]))
        self.opcode_emb = nn.Embedding(config.opcode_vocab, config.opcode_dim) if config.opcode_dim else None
        self.lin_node = nn.Linear(config.node_feat_dim + config.opcode_dim, h)
        self.lin_cfg = nn.Linear(cfg_in, h) if config.task == "layout" else None
        self.convs = nn.ModuleList(self._conv(config.backbone, h) for _ in range(config.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(config.layers))
        head_in = config.embed_dim
        heads = config.cross_config_heads
        self.cross = CrossConfigAttention(config.embed_dim, heads) if heads else None
        self.lin_graph_cfg = nn.Linear(config.config_feat_dim, h) if config.task == "tile" else None
        head_in += h if config.task == "tile" else 0
        self.head_mlp = nn.Sequential(nn.Linear(head_in, h), nn.ReLU(), nn.Linear(h, config.num_classes))

    @staticmethod
    def _conv(kind: str, h: int) -> nn.Module:
        if kind == "sage":
            return SAGEConv(h, h)
        if kind == "gcn":
            return GCNConv(h, h)
        return GINConv(nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h)), train_eps=True)

    @property
    def aggregate_mean(self) -> bool:
        """True when segment units are averaged (MalNet) rather than summed (layout, tile)."""
        return self.config.task == "malnet"

    @property
    def device(self) -> torch.device:
        """Where the parameters live."""
        return self.feat_mean.device

    def set_feature_stats(self, mean: np.ndarray | torch.Tensor, std: np.ndarray | torch.Tensor) -> None:
        """Use these per-column statistics to z-score node features (near-constant columns are only centred)."""
        mean_t = torch.as_tensor(np.asarray(mean, dtype=np.float32)).reshape(-1)
        std_t = torch.as_tensor(np.asarray(std, dtype=np.float32)).reshape(-1)
        if mean_t.numel() != self.config.node_feat_dim or std_t.numel() != self.config.node_feat_dim:
            raise InvalidOption(
                f"feature statistics have {mean_t.numel()} columns, the model expects {self.config.node_feat_dim}"
            )
        std_t = torch.where(std_t > 1e-6, std_t, torch.ones_like(std_t))
        self.feat_mean.copy_(mean_t)
        self.feat_std.copy_(std_t)

    def set_config_stats(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Z-score layout configuration features with these per-column statistics (constant columns only centred)."""
        mean_t = torch.as_tensor(np.asarray(mean, np.float32)).reshape(-1)
        std_t = torch.as_tensor(np.asarray(std, np.float32)).reshape(-1)
        if mean_t.numel() != self.cfg_mean.numel() or std_t.numel() != self.cfg_std.numel():
            raise InvalidOption(f"configuration statistics have {mean_t.numel()} columns, the model expects "
                                f"{self.cfg_mean.numel()}")  # fmt: skip
        self.cfg_mean.copy_(mean_t)
        self.cfg_std.copy_(torch.where(std_t > 1e-6, std_t, torch.ones_like(std_t)))

    def set_target_stats(self, mean: float, std: float) -> None:
        """Scale of an absolute target: a score ``y`` means log runtime ``y * std + mean``."""
        self.target_stats.copy_(torch.tensor([float(mean), max(float(std), 1e-6)]))

    def log_runtime(self, scores: np.ndarray | torch.Tensor) -> np.ndarray:
        """Predicted log runtimes from scores of a model trained with an absolute target (``--loss logmse``)."""
        mean, std = (float(v) for v in self.target_stats)
        return np.asarray(scores, np.float64) * std + mean

    def _cfg(self, feat: torch.Tensor) -> torch.Tensor:
        assert self.lin_cfg is not None
        return self.lin_cfg((feat - self.cfg_mean) / self.cfg_std)

    def head_parameters(self) -> list[nn.Parameter]:
        """Parameters of the prediction head (what F finetunes)."""
        mods = [self.head_mlp] + ([self.lin_graph_cfg] if self.lin_graph_cfg is not None else [])
        mods += [self.cross] if self.cross is not None else []
        return [p for m in mods for p in m.parameters()]

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Every parameter that is not in the head (what F freezes)."""
        head = {id(p) for p in self.head_parameters()}
        return [p for p in self.parameters() if id(p) not in head]

    # ---------------------------------------------------------------- node states
    def _first_layer(self, inp: SegmentInputs) -> torch.Tensor:
        x = (squash(inp.x) - self.feat_mean) / self.feat_std
        if self.opcode_emb is not None:
            if inp.opcode is None:
                raise InvalidOption("this model embeds opcodes but the graph has none")
            if inp.opcode.numel() and int(inp.opcode.max()) >= self.config.opcode_vocab:
                raise InvalidOption(
                    f"opcode {int(inp.opcode.max())} is outside the model's vocabulary of {self.config.opcode_vocab}"
                )
            x = torch.cat((x, self.opcode_emb(inp.opcode)), dim=-1)
        return self.lin_node(x)

    def _layer(self, i: int, h: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norms[i](self.convs[i](h, edge_index)))
        return h + F.dropout(out, self.config.dropout, self.training)

    def has_config(self, inp: SegmentInputs) -> bool:
        """Whether ``inp`` carries layout config features this model reads."""
        return self.lin_cfg is not None and inp.cfg_feat is not None and inp.cfg_pos is not None

    def shared_states(self, inp: SegmentInputs) -> list[torch.Tensor]:
        """Every node once, ignoring configurations: ``[first layer (pre-ReLU), h_0, ..., h_L]``, each (n, h)."""
        base = self._first_layer(inp)
        out = [base, F.relu(base)]
        for i in range(self.config.layers):
            out.append(self._layer(i, out[-1], inp.edge_index))
        return out

    def config_states(self, inp: SegmentInputs, region: Region, shared: list[torch.Tensor]) -> torch.Tensor:
        """The region's affected nodes for each of ``inp``'s configurations: ``(C, a, h)`` (see the module docs)."""
        assert self.lin_cfg is not None and inp.cfg_feat is not None and inp.cfg_pos is not None
        dev = shared[0].device
        hc = F.relu(shared[0][inp.cfg_pos].unsqueeze(0) + self._cfg(inp.cfg_feat))  # rows in cfg_pos order
        for i, lay in enumerate(region.layers):
            xb = shared[i + 1][torch.from_numpy(lay.sources).to(dev)].unsqueeze(0).expand(inp.num_configs, -1, -1)
            xb = xb.index_copy(1, torch.from_numpy(lay.prev_pos).to(dev), hc)
            tgt = torch.from_numpy(lay.target_pos).to(dev)
            x_tgt = xb[:, tgt]
            if self.config.backbone == "gcn":  # GCN normalises by both ends' degrees: the whole (sub)graph
                out = self.convs[i](xb, torch.from_numpy(lay.edge_index).to(dev))[:, tgt]
            else:  # SAGE and GIN update only the targets: a bipartite pass from the sources to them
                out = self.convs[i]((xb, x_tgt), torch.from_numpy(lay.target_edge_index).to(dev))
            hc = x_tgt + F.dropout(F.relu(self.norms[i](out)), self.config.dropout, self.training)
        return hc

    def node_states(self, inp: SegmentInputs, region: Region | None = None) -> NodeStates:
        """Backbone output for ``inp``; with a ``region`` the configuration-dependent nodes per config (see above)."""
        if not self.has_config(inp):
            return NodeStates(self.shared_states(inp)[-1])
        if region is None or self.config.backbone == "gcn":
            assert self.lin_cfg is not None and inp.cfg_feat is not None and inp.cfg_pos is not None
            base = self._first_layer(inp)
            h = base.unsqueeze(0).expand(inp.num_configs, -1, -1).index_add(1, inp.cfg_pos, self._cfg(inp.cfg_feat))
            h = F.relu(h)
            for i in range(self.config.layers):
                h = self._layer(i, h, inp.edge_index)
            return NodeStates(None, h, None, inp.num_configs)
        shared = self.shared_states(inp)
        hc = self.config_states(inp, region, shared)
        return NodeStates(shared[-1], hc, torch.from_numpy(region.final).to(shared[0].device), inp.num_configs)

    # ---------------------------------------------------------------- pooling and readout
    def pool(self, st: NodeStates, segment_ids: torch.Tensor | None = None, num_segments: int = 1) -> torch.Tensor:
        """``[max | mean]`` of node states per segment: ``(C, S, embed_dim)`` (all nodes one segment if None)."""
        if st.shared is None:
            assert st.config is not None
            return self._finish(*_pool_dense(st.config, segment_ids, num_segments))
        hs = st.shared
        n, h = hs.shape
        ids = torch.zeros(n, dtype=torch.long, device=hs.device) if segment_ids is None else segment_ids
        keep = torch.ones(n, dtype=torch.bool, device=hs.device)
        if st.affected is not None:
            keep[st.affected] = False
        count = torch.bincount(ids, minlength=num_segments).clamp(min=1).to(hs.dtype)
        mx = _amax_into(hs.new_full((num_segments, h), float("-inf")), 0, ids[keep], hs[keep])
        sm = hs.new_zeros((num_segments, h)).index_add(0, ids[keep], hs[keep])
        mx, sm = mx.unsqueeze(0), sm.unsqueeze(0)
        if st.config is not None and st.affected is not None:
            c = st.config.shape[0]
            a_ids = ids[st.affected]
            mx = _amax_into(mx.expand(c, -1, -1), 1, a_ids, st.config)
            sm = sm.expand(c, -1, -1).index_add(1, a_ids, st.config)
        return self._finish(mx, sm / count[None, :, None])

    def _finish(self, mx: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        pooled = torch.cat((mx, mean), dim=-1)
        return pooled if self.config.task == "malnet" else F.normalize(pooled, dim=-1)

    def segment_embedding(self, inp: SegmentInputs, region: Region | None = None) -> torch.Tensor:
        """Embedding of one segment: ``(C, embed_dim)`` (C = inp.num_configs; 1 without configurations)."""
        return self.pool(self.node_states(inp, region))[:, 0]

    def head(self, graph_emb: torch.Tensor, graph_config_feat: torch.Tensor | None = None) -> torch.Tensor:
        """Scores ``(C,)`` (lower = faster) or logits ``(C, classes)`` from embeddings ``(C, embed_dim)``."""
        z = graph_emb
        if self.cross is not None and z.dim() == 2:
            z = self.cross(z.unsqueeze(1)).squeeze(1)
        if self.lin_graph_cfg is not None:
            if graph_config_feat is None:
                raise InvalidOption("tile models need graph_config_feat")
            z = z.expand(graph_config_feat.shape[0], -1)
            z = torch.cat((z, F.relu(self.lin_graph_cfg(graph_config_feat))), dim=-1)
        out = self.head_mlp(z)
        return out if self.config.task == "malnet" else out[:, 0]

    def units(self, emb: torch.Tensor, gcf: torch.Tensor | None = None) -> torch.Tensor:
        """What is aggregated over segments: the embeddings ``(C, embed_dim)``, or each segment's score ``(C, 1)``."""
        return self.head(emb, gcf).unsqueeze(-1) if self.config.readout == "scalar" else emb

    def readout(self, agg: torch.Tensor, gcf: torch.Tensor | None = None) -> torch.Tensor:
        """Scores or logits from the aggregated units ``(C, unit_dim)``."""
        return agg[:, 0] if self.config.readout == "scalar" else self.head(agg, gcf)

    # ---------------------------------------------------------------- whole-graph passes
    def embed_segment(self, plan: GraphPlan, s: int, cfgs: np.ndarray) -> torch.Tensor:
        """Segment ``s`` alone (edges leaving it dropped) for configs ``cfgs``: ``(C, embed_dim)``.

        Each distinct sub-configuration of the segment is computed once (see :meth:`GraphPlan.signatures`).
        """
        cfgs = np.asarray(cfgs, dtype=np.int64)
        if self.config.task != "layout" or plan.config_cols(s).size == 0:
            emb = self.segment_embedding(plan.inputs(s, cfgs[:1], self.device), None)
            return emb.expand(len(cfgs), -1)
        sig = plan.signatures(s)[cfgs]
        uniq, first, inv = np.unique(sig, return_index=True, return_inverse=True)
        emb = self.segment_embedding(plan.inputs(s, cfgs[first], self.device), plan.region(s))
        return emb if uniq.size == len(cfgs) and np.array_equal(inv, np.arange(len(cfgs))) else emb[inv.reshape(-1)]

    def block_embeddings(self, plan: GraphPlan, block: Block, cfgs: np.ndarray) -> torch.Tensor:
        """Every segment of ``block`` for configs ``cfgs`` in one pass: ``(C, segments, embed_dim)``.

        Each distinct sub-configuration of a segment is computed once: the pass runs one row per signature
        (:meth:`GraphPlan.signature_rows`), and every configuration reads its signature's row.
        """
        cfgs = np.asarray(cfgs, dtype=np.int64)
        ids = torch.as_tensor(np.array(block.seg_ids, np.int64), device=self.device)
        if self.config.task != "layout" or block.region is None:
            inp = plan.block_inputs(block, cfgs[:1], self.device)
            return self.pool(self.node_states(inp, block.region), ids, block.num_segments).expand(len(cfgs), -1, -1)
        rep, rows = plan.signature_rows(block, cfgs)
        inp = plan.block_inputs(block, rep, self.device)
        emb = self.pool(self.node_states(inp, block.region), ids, block.num_segments)  # (R, segments, d)
        cols = torch.arange(block.num_segments, device=self.device)
        return emb[torch.from_numpy(rows).to(self.device), cols[None, :]]

    def segment_units(self, plan: GraphPlan, s: int, cfgs: np.ndarray, gcf: torch.Tensor | None) -> torch.Tensor:
        """:meth:`units` of segment ``s``: ``(C, unit_dim)``."""
        return self.units(self.embed_segment(plan, s, cfgs), gcf)

    def fresh_units(
        self, plan: GraphPlan, segments: object, cfgs: np.ndarray, gcf: torch.Tensor | None
    ) -> torch.Tensor:
        """Sum of segment units under no_grad, ONE segment at a time (memory stays per-segment)."""
        c = len(cfgs) if gcf is None else gcf.shape[0]
        total = torch.zeros(c, self.config.unit_dim, device=self.device)
        with torch.no_grad():
            for s in segments:  # type: ignore[attr-defined]
                total += self.segment_units(plan, int(s), cfgs, gcf)
        return total

    def units_per_segment(self, emb: torch.Tensor, gcf: torch.Tensor | None = None) -> torch.Tensor:
        """Units of segment embeddings ``(Ce, S, d)``: themselves, or each segment's score ``(C, S, 1)``."""
        if self.config.readout != "scalar":
            return emb
        c, s, d = emb.shape
        if gcf is not None:
            return torch.stack([self.head(emb[:, j], gcf) for j in range(s)], dim=1).unsqueeze(-1)
        if self.cross is not None:
            emb = self.cross(emb)
        return self.head_mlp(emb.reshape(c * s, d)).reshape(c, s, 1)

    def sum_units(self, emb: torch.Tensor, gcf: torch.Tensor | None = None) -> torch.Tensor:
        """Units of segment embeddings ``(Ce, S, d)`` summed over the segments: ``(C, unit_dim)``."""
        if self.config.readout != "scalar":
            return emb.sum(1)
        return self.units_per_segment(emb, gcf).sum(1)

    def embed_whole_graph(self, plan: GraphPlan, cfgs: np.ndarray) -> torch.Tensor:
        """Full-graph pass (every edge kept), pooled per segment: ``(C, S, embed_dim)``."""
        st = self.node_states(plan.inputs(None, cfgs, self.device), plan.region(None))
        return self.pool(st, to_device(plan.seg.assignment, self.device, torch.long), plan.num_segments)

    def whole_graph_units(self, plan: GraphPlan, cfgs: np.ndarray, gcf: torch.Tensor | None) -> torch.Tensor:
        """Units of every segment from the full-graph pass, aggregated: ``(C, unit_dim)``."""
        emb = self.embed_whole_graph(plan, cfgs)  # (C, S, d)
        if self.aggregate_mean:
            return emb.mean(1)
        return self.sum_units(emb, gcf)

    def graph_config(self, plan: GraphPlan, configs: np.ndarray) -> torch.Tensor | None:
        """Tile graph-config features of ``configs`` on the model's device (None for other tasks)."""
        if self.config.task != "tile":
            return None
        return to_device(plan.rec.graph_config_feat[configs], self.device, torch.float32)


class CrossConfigAttention(nn.Module):
    """Each configuration's embedding attends to the other configurations of the same graph and segment.

    The 1st-place TpuGraphs layout model compares the configurations of a batch this way: ``z + MHA(LN(z))`` over
    the configuration axis, for every segment separately (input ``(C, S, d)``). Segments whose configurations
    all agree give identical tokens, whose attention output does not depend on how many there are, so their
    history-table rows stay valid across steps. In evaluation the context is the chunk of configurations scored
    together (``eval_chunk``).
    """

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise InvalidOption(f"cross-configuration attention: {heads} heads do not divide the embedding ({dim})")
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """``(C, S, d)`` -> ``(C, S, d)``."""
        x = self.norm(z.transpose(0, 1))  # (S, C, d): attention over C for each segment
        out, _ = self.attn(x, x, x, need_weights=False)
        return z + out.transpose(0, 1)


def _pool_dense(
    h: torch.Tensor, segment_ids: torch.Tensor | None, num_segments: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and mean of dense states ``(C, n, h)`` per segment."""
    if segment_ids is None:
        return h.amax(dim=1, keepdim=True), h.mean(dim=1, keepdim=True)
    c, _, d = h.shape
    count = torch.bincount(segment_ids, minlength=num_segments).clamp(min=1).to(h.dtype)
    mx = _amax_into(h.new_full((c, num_segments, d), float("-inf")), 1, segment_ids, h)
    sm = h.new_zeros((c, num_segments, d)).index_add(1, segment_ids, h)
    return mx, sm / count[None, :, None]


def _amax_into(base: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``base`` with ``base[..., index[i], :] = max(base[..., index[i], :], src[..., i, :])`` along ``dim``."""
    shape = [1] * src.dim()
    shape[dim] = index.numel()
    return base.scatter_reduce(dim, index.view(shape).expand_as(src), src, "amax", include_self=True)
