"""A GNN latency predictor with an absolute loss: GraphSAGE over the op graph, per-node times summed.

The GST base model (GraphSAGE message passing, Hamilton et al. 2017) reads each node's op category, its FLOPs,
bytes and weights at the setting's batch, and the setting; a head gives every node a non-negative time and the
model's latency is their sum, trained on log milliseconds (mean squared error of the log, the ``--loss logmse`` of
``costmodel train``). Graphs here have tens to hundreds of nodes, so no segment is needed: the whole graph fits.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.costmodel.oracle.dataset import COLUMNS, TimedModel
from mlsysopt.costmodel.oracle.features import CATEGORIES, categories, setting_vector
from mlsysopt.costmodel.oracle.predictors import PREDICTORS, LatencyPredictor
from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import InvalidCheckpoint

NODE_DIM = len(CATEGORIES) + 5 + 4


def node_features(ops: np.ndarray, nodes: np.ndarray, s: Setting) -> np.ndarray:
    """``(n, NODE_DIM)``: category one-hot, log1p of MFLOPs and activation KB at the batch, weight KB, groups,
    kernel area, then the setting."""
    n = len(ops)
    x = np.zeros((n, NODE_DIM), np.float32)
    x[np.arange(n), categories(ops, nodes, s.engine)] = 1.0
    c = len(CATEGORIES)
    col = lambda name: nodes[:, COLUMNS.index(name)]  # noqa: E731
    x[:, c] = np.log1p(col("flops") * s.batch / 1e6)
    x[:, c + 1] = np.log1p((col("bytes_in") + col("bytes_out")) * s.batch / 1e3)
    x[:, c + 2] = np.log1p(col("params") * 4 / 1e3)
    x[:, c + 3] = np.log1p(col("groups"))
    x[:, c + 4] = np.log1p(col("kernel_area"))
    x[:, c + 5 :] = setting_vector(s)
    return x


class _Net(nn.Module):
    def __init__(self, hidden: int = 64, layers: int = 3) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv  # deferred: torch_geometric loads only when the GNN is built

        self.inp = nn.Linear(NODE_DIM, hidden)
        self.convs = nn.ModuleList([SAGEConv(hidden, hidden) for _ in range(layers)])
        self.head = nn.Sequential(nn.Linear(hidden + NODE_DIM, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, graphs: int) -> torch.Tensor:
        """Log milliseconds per graph ``(graphs,)``."""
        h = torch.relu(self.inp(x))
        for conv in self.convs:
            h = h + torch.relu(conv(h, edge_index))
        per_node = torch.nn.functional.softplus(self.head(torch.cat([h, x], dim=1))).squeeze(1) * 1e-2
        total = torch.zeros(graphs).index_add_(0, batch, per_node)
        return torch.log(total + 1e-4)


class GraphSAGELatency(LatencyPredictor):
    """GraphSAGE over the op graph, per-node times summed, log-MSE (see the module docstring)."""

    name = "gnn"
    seeded = True

    def __init__(self, epochs: int = 40, seed: int = 0, hidden: int = 64) -> None:
        self.epochs, self.seed, self.hidden = epochs, seed, hidden
        self.net: _Net | None = None
        self.edges: dict[int, np.ndarray] = {}

    @staticmethod
    def _edges(m: TimedModel) -> np.ndarray:
        return np.asarray(m.edges if m.edges is not None else np.zeros((2, 0)), np.int64)

    def fit(self, models: list[TimedModel], settings: list[Setting]) -> GraphSAGELatency:
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        items = [(m, s) for m in models for s in settings if s.key in m.ms]
        xs = [torch.from_numpy(node_features(m.ops, m.nodes, s)) for m, s in items]
        es = [torch.from_numpy(self._edges(m)) for m, _ in items]
        ys = torch.tensor([np.log(m.ms[s.key]) for m, s in items], dtype=torch.float32)
        self.net = _Net(self.hidden)
        opt = torch.optim.Adam(self.net.parameters(), lr=2e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.epochs)
        for _ in range(self.epochs):
            for chunk in np.array_split(rng.permutation(len(items)), max(1, len(items) // 64)):
                x, e, b = _collate([xs[i] for i in chunk], [es[i] for i in chunk])
                loss = ((self.net(x, e, b, len(chunk)) - ys[chunk]) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            sched.step()
        return self

    def predict(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, edges: np.ndarray | None = None) -> float:
        assert self.net is not None
        x = torch.from_numpy(node_features(ops, nodes, setting))
        e = torch.from_numpy(np.asarray(edges if edges is not None else np.zeros((2, 0)), np.int64))
        with torch.no_grad():
            return float(torch.exp(self.net(x, e, torch.zeros(len(ops), dtype=torch.long), 1))[0])

    def to_dict(self) -> dict[str, Any]:

        buf = io.BytesIO()
        torch.save(self.net.state_dict() if self.net is not None else {}, buf)
        return {"name": self.name, "epochs": self.epochs, "seed": self.seed, "hidden": self.hidden,
                "state": base64.b64encode(buf.getvalue()).decode()}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphSAGELatency:
        """Back from :meth:`to_dict` (plain tensors only)."""

        try:
            out = cls(d["epochs"], d["seed"], d["hidden"])
            out.net = _Net(out.hidden)
            out.net.load_state_dict(torch.load(io.BytesIO(base64.b64decode(d["state"])), weights_only=True))
        except Exception as exc:
            raise InvalidCheckpoint(f"not a GNN latency predictor ({type(exc).__name__})") from None
        return out


def _collate(xs: list[torch.Tensor], es: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    offs = np.cumsum([0] + [len(x) for x in xs[:-1]])
    x = torch.cat(xs)
    e = torch.cat([ei + int(o) for ei, o in zip(es, offs, strict=True)], dim=1)
    b = torch.cat([torch.full((len(xi),), i, dtype=torch.long) for i, xi in enumerate(xs)])
    return x, e, b


PREDICTORS[GraphSAGELatency.name] = GraphSAGELatency
