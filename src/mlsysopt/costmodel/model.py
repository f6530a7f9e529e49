"""The cost model: opcode embedding + z-scored node features + config fusion -> PyG backbone -> segment pooling -> head.

Shapes. A segment (or a whole graph) enters as :class:`SegmentInputs`. Layout graphs are run for C configurations
at once with configurations as a leading dimension: node states are ``(C, n, hidden)`` and the PyG convolutions
message-pass along dim -2 (their ``node_dim``). The first layer is linear in the concatenation
``[z-scored node features | opcode embedding | config features]``, computed as a per-node part shared by all
configs plus a per-config part added only on the configurable nodes (so non-configurable nodes carry zeros for the
config features, and the config projection's bias marks the configurable ones). Tile and MalNet node states do not
depend on the configuration, so they run once with C = 1; tile configs join after pooling (graph-config fusion).

Each backbone layer is ``h = h + dropout(relu(LayerNorm(conv(h))))`` (skip-sum as in the reference). A segment is
pooled to ``[max | mean]`` over its nodes (``embed_dim = 2 * hidden``), L2-normalised for the ranking tasks.
The trainer aggregates segment embeddings over segments (sum for layout/tile, mean for MalNet) and calls
:meth:`CostModel.head`, which returns one score per config (lower = faster) or class logits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, GINConv, SAGEConv
from torch_geometric.utils import scatter

from mlsysopt.costmodel.data.record import TASKS, GraphRecord
from mlsysopt.costmodel.segment import Segmentation
from mlsysopt.errors import InvalidOption

BACKBONES: tuple[str, ...] = ("sage", "gcn", "gin")

_TASK_DEFAULTS = {
    "layout": {"node_feat_dim": 140, "config_feat_dim": 18, "num_classes": 1, "opcode_dim": 16},
    "tile": {"node_feat_dim": 140, "config_feat_dim": 24, "num_classes": 1, "opcode_dim": 16},
    "malnet": {"node_feat_dim": 5, "config_feat_dim": 0, "num_classes": 5, "opcode_dim": 0},
}


@dataclass
class ModelConfig:
    """Architecture of a :class:`CostModel`; validated on creation (InvalidOption).

    Defaults are sized for a CPU: the TpuGraphs reference uses hidden 256 and a 128-d opcode embedding.
    ``config_feat_dim`` is per node for layout (18), per graph for tile (24), 0 for MalNet.
    """

    task: str = "layout"
    backbone: str = "sage"
    hidden: int = 64
    layers: int = 3
    opcode_vocab: int = 128
    opcode_dim: int = 16
    node_feat_dim: int = 140
    config_feat_dim: int = 18
    num_classes: int = 1
    dropout: float = 0.1

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def for_task(cls, task: str, **overrides: object) -> ModelConfig:
        """A config with the feature sizes of ``task`` (layout, tile or malnet), updated by ``overrides``."""
        if task not in _TASK_DEFAULTS:
            raise InvalidOption(f"unknown task '{task}' (choose from: {', '.join(TASKS)})")
        return cls(task=task, **{**_TASK_DEFAULTS[task], **overrides})  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Rebuild from :meth:`to_dict` output (unknown keys are an InvalidOption)."""
        names = {f.name for f in fields(cls)}
        extra = sorted(set(d) - names)
        if extra:
            raise InvalidOption(f"unknown model config keys: {', '.join(extra)}")
        return cls(**d)

    def to_dict(self) -> dict:
        """Plain dict of every field."""
        return asdict(self)

    @property
    def embed_dim(self) -> int:
        """Width of one segment embedding (max and mean pooling concatenated)."""
        return 2 * self.hidden

    def validate(self) -> None:
        """Raise InvalidOption on a field out of range."""
        if self.task not in TASKS:
            raise InvalidOption(f"unknown task '{self.task}' (choose from: {', '.join(TASKS)})")
        if self.backbone not in BACKBONES:
            raise InvalidOption(f"unknown backbone '{self.backbone}' (choose from: {', '.join(BACKBONES)})")
        for name in ("hidden", "layers", "node_feat_dim", "opcode_vocab"):
            if int(getattr(self, name)) < 1:
                raise InvalidOption(f"model {name} must be >= 1, got {getattr(self, name)}")
        if self.opcode_dim < 0 or self.config_feat_dim < 0:
            raise InvalidOption("opcode_dim and config_feat_dim must be >= 0")
        if self.task == "malnet":
            if self.num_classes < 2:
                raise InvalidOption(f"malnet needs num_classes >= 2, got {self.num_classes}")
            if self.config_feat_dim != 0:
                raise InvalidOption("malnet graphs have no configurations: config_feat_dim must be 0")
        else:
            if self.num_classes != 1:
                raise InvalidOption(f"{self.task} predicts one runtime per config: num_classes must be 1")
            if self.config_feat_dim < 1:
                raise InvalidOption(f"{self.task} needs config_feat_dim >= 1 (18 for layout, 24 for tile)")
        if not 0.0 <= self.dropout < 1.0:
            raise InvalidOption(f"dropout must be in [0, 1), got {self.dropout}")


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


@dataclass
class GraphView:
    """A record with its segmentation and node -> config-column map, ready for :class:`CostModel`'s graph passes."""

    rec: GraphRecord
    seg: Segmentation
    columns: np.ndarray | None = None

    @classmethod
    def of(cls, rec: GraphRecord, seg: Segmentation) -> GraphView:
        """Build the view (the column map is O(n), so it is made once per graph, not per segment)."""
        return cls(rec, seg, config_columns(rec) if rec.task == "layout" else None)


class CostModel(nn.Module):
    """GNN cost model over graph segments; see the module docstring for the data flow."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        h = config.hidden
        self.register_buffer("feat_mean", torch.zeros(config.node_feat_dim))
        self.register_buffer("feat_std", torch.ones(config.node_feat_dim))
        self.opcode_emb = nn.Embedding(config.opcode_vocab, config.opcode_dim) if config.opcode_dim else None
        self.lin_node = nn.Linear(config.node_feat_dim + config.opcode_dim, h)
        self.lin_cfg = nn.Linear(config.config_feat_dim, h) if config.task == "layout" else None
        self.convs = nn.ModuleList(self._conv(config.backbone, h) for _ in range(config.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(h) for _ in range(config.layers))
        head_in = config.embed_dim
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
        """True when segment embeddings are averaged (MalNet) rather than summed (layout, tile)."""
        return self.config.task == "malnet"

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

    def head_parameters(self) -> list[nn.Parameter]:
        """Parameters of the prediction head (what F finetunes)."""
        mods = [self.head_mlp] + ([self.lin_graph_cfg] if self.lin_graph_cfg is not None else [])
        return [p for m in mods for p in m.parameters()]

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Every parameter that is not in the head (what F freezes)."""
        head = {id(p) for p in self.head_parameters()}
        return [p for p in self.parameters() if id(p) not in head]

    def node_states(self, inp: SegmentInputs) -> torch.Tensor:
        """Backbone output per node: ``(C, n, hidden)`` (C = number of configs for layout, else 1)."""
        x = (inp.x - self.feat_mean) / self.feat_std
        if self.opcode_emb is not None:
            if inp.opcode is None:
                raise InvalidOption("this model embeds opcodes but the graph has none")
            if inp.opcode.numel() and int(inp.opcode.max()) >= self.config.opcode_vocab:
                raise InvalidOption(
                    f"opcode {int(inp.opcode.max())} is outside the model's vocabulary of {self.config.opcode_vocab}"
                )
            x = torch.cat((x, self.opcode_emb(inp.opcode)), dim=-1)
        h = self.lin_node(x).unsqueeze(0)
        if self.lin_cfg is not None and inp.cfg_feat is not None and inp.cfg_pos is not None:
            h = h.expand(inp.num_configs, -1, -1).index_add(1, inp.cfg_pos, self.lin_cfg(inp.cfg_feat))
        h = F.relu(h)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = h + F.dropout(F.relu(norm(conv(h, inp.edge_index))), self.config.dropout, self.training)
        return h

    def pool(self, h: torch.Tensor, segment_ids: torch.Tensor | None = None, num_segments: int = 1) -> torch.Tensor:
        """Pool node states ``(C, n, hidden)`` per segment to ``(C, S, embed_dim)`` (all nodes one segment if None)."""
        if segment_ids is None:
            pooled = torch.cat((h.amax(dim=1), h.mean(dim=1)), dim=-1).unsqueeze(1)
        else:
            mx = scatter(h, segment_ids, dim=1, dim_size=num_segments, reduce="max")
            mean = scatter(h, segment_ids, dim=1, dim_size=num_segments, reduce="mean")
            pooled = torch.cat((mx, mean), dim=-1)
        return pooled if self.config.task == "malnet" else F.normalize(pooled, dim=-1)

    def segment_embedding(self, inp: SegmentInputs) -> torch.Tensor:
        """Embedding of one segment: ``(C, embed_dim)``."""
        return self.pool(self.node_states(inp))[:, 0]

    def head(self, graph_emb: torch.Tensor, graph_config_feat: torch.Tensor | None = None) -> torch.Tensor:
        """Scores ``(C,)`` (lower = faster) or logits ``(C, classes)`` from aggregated embeddings ``(C, embed_dim)``."""
        z = graph_emb
        if self.lin_graph_cfg is not None:
            if graph_config_feat is None:
                raise InvalidOption("tile models need graph_config_feat")
            z = z.expand(graph_config_feat.shape[0], -1)
            z = torch.cat((z, F.relu(self.lin_graph_cfg(graph_config_feat))), dim=-1)
        out = self.head_mlp(z)
        return out if self.config.task == "malnet" else out[:, 0]

    # ---------------------------------------------------------------- whole-graph passes
    def embed_segment(self, g: GraphView, s: int, cfgs: np.ndarray) -> torch.Tensor:
        """Segment ``s`` of ``g`` alone (edges leaving it dropped) for configs ``cfgs``: ``(C, embed_dim)``."""
        ei, nodes = g.seg.subgraph(s, g.rec.edge_index)
        return self.segment_embedding(make_inputs(g.rec, nodes, ei, cfgs, self.feat_mean.device, g.columns))

    def embed_fresh(self, g: GraphView, segments: Iterable[int], cfgs: np.ndarray) -> torch.Tensor:
        """Sum of segment embeddings under no_grad, ONE segment at a time (memory stays per-segment)."""
        total = torch.zeros(len(cfgs), self.config.embed_dim, device=self.feat_mean.device)
        with torch.no_grad():
            for s in segments:
                total += self.embed_segment(g, int(s), cfgs)
        return total

    def embed_whole_graph(self, g: GraphView, cfgs: np.ndarray) -> torch.Tensor:
        """Full-graph pass (every edge kept), pooled per segment and aggregated: ``(C, embed_dim)``."""
        device = self.feat_mean.device
        h = self.node_states(make_inputs(g.rec, None, g.rec.edge_index, cfgs, device, g.columns))
        emb = self.pool(h, to_device(g.seg.assignment, device, torch.long), g.seg.num_segments)
        return emb.mean(1) if self.aggregate_mean else emb.sum(1)

    def graph_config(self, rec: GraphRecord, configs: np.ndarray) -> torch.Tensor | None:
        """Tile graph-config features of ``configs`` on the model's device (None for other tasks)."""
        if self.config.task != "tile":
            return None
        return to_device(rec.graph_config_feat[configs], self.feat_mean.device, torch.float32)

    @torch.no_grad()
    def predict_graph(self, g: GraphView, whole_graph: bool = False, chunk: int = 32) -> np.ndarray:
        """Scores of every config (or class logits), every segment fresh, ``chunk`` configs at a time."""
        rec, S = g.rec, g.seg.num_segments

        def agg(cfgs: np.ndarray) -> torch.Tensor:
            if whole_graph:
                return self.embed_whole_graph(g, cfgs)
            total = self.embed_fresh(g, range(S), cfgs)
            return total / S if self.aggregate_mean else total

        chunks = [np.arange(c, min(c + chunk, rec.num_configs)) for c in range(0, rec.num_configs, chunk)]
        if self.config.task == "layout":
            parts = [self.head(agg(c)) for c in chunks]
        else:
            emb = agg(np.zeros(1, dtype=np.int64))  # tile and MalNet node states do not depend on the config
            if self.config.task == "malnet":
                return self.head(emb)[0].cpu().numpy()
            parts = [self.head(emb, self.graph_config(rec, c)) for c in chunks]
        return torch.cat(parts).cpu().numpy().astype(np.float64)


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
