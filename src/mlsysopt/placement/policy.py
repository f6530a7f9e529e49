"""GiPH policy: a GNN over gpNet that sweeps messages in topological order and in reverse, then scores nodes.

Each gpNet edge goes from a lower task level to a strictly higher one, so one sweep over the levels in
increasing order lets information travel along whole paths (as in GiPH's DAG message passing); the reverse
sweep carries it back from the sinks. A node's score says how good relocating its task to its device is; the
action distribution is a softmax over the nodes the ``action_mask`` allows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch_geometric.utils import scatter

from mlsysopt.placement.gpnet import EDGE_DIM, NODE_DIM

if TYPE_CHECKING:
    from mlsysopt.placement.gpnet import GpNet


@dataclass(frozen=True)
class PolicyConfig:
    """Sizes of the policy network; stored in checkpoints and checked on load.

    Args:
        node_dim: gpNet node features (must match this build's ``NODE_DIM``).
        edge_dim: gpNet edge features (must match this build's ``EDGE_DIM``).
        hidden: Hidden size of the node states.
        kinds: Scores per gpNet node: 1 (GiPH's relocation) or 3 (relocate, swap, chain).
    """

    node_dim: int = NODE_DIM
    edge_dim: int = EDGE_DIM
    hidden: int = 32
    kinds: int = 1  # scores per gpNet node: 1 (GiPH's relocation) or one per move kind (relocate, swap, chain)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for checkpoints."""
        return asdict(self)


class LevelSweep(nn.Module):
    """Updates the nodes level by level, each from its already-updated predecessors.

    At each level, every edge entering it carries ``h_src + ReLU(W [h_src ⊕ e])`` (the predecessor's state plus
    an edge-conditioned message); messages are mean-aggregated per destination with PyG's ``scatter`` and
    ``h_dst <- LayerNorm(h_dst + m + ReLU(U [h_dst ⊕ m]))``. The identity paths keep a source's signal alive
    down long paths (without them it shrinks ~15x per level at initialization); LayerNorm keeps the scale.
    """

    def __init__(self, hidden: int, edge_dim: int) -> None:
        super().__init__()
        self.message = nn.Linear(hidden + edge_dim, hidden)
        self.update = nn.Linear(2 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(
        self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor, level: torch.Tensor, reverse: bool
    ) -> torch.Tensor:
        """One sweep: increasing levels along the edges, or decreasing levels against them."""
        src, dst = edge_index
        if reverse:
            src, dst = dst, src
        if dst.numel() == 0:
            return h
        key = -level[dst] if reverse else level[dst]
        order = torch.argsort(key, stable=True)
        src, dst, edge_attr = src[order], dst[order], edge_attr[order]
        counts = torch.unique_consecutive(key[order], return_counts=True)[1].tolist()
        start = 0
        for count in counts:
            sl = slice(start, start + count)
            start += count
            nodes, local = torch.unique(dst[sl], return_inverse=True)
            hs = h[src[sl]]
            msg = hs + torch.relu(self.message(torch.cat([hs, edge_attr[sl]], dim=-1)))
            agg = scatter(msg, local, dim=0, dim_size=nodes.numel(), reduce="mean")
            hn = h[nodes]
            new = self.norm(hn + agg + torch.relu(self.update(torch.cat([hn, agg], dim=-1))))
            h = h.index_copy(0, nodes, new)
        return h


class GiPHPolicy(nn.Module):
    """Node encoder, a forward and a reverse level sweep, and an MLP that scores every gpNet node.

    Call it on a :class:`~mlsysopt.placement.GpNet` for masked relocation logits.

    Args:
        config: Sizes of the network (None: :class:`PolicyConfig` defaults).

    Shapes:
        input: a gpNet with ``x`` (num_gpnet_nodes, node_dim), ``edge_index`` (2, num_gpnet_edges), ``edge_attr``
            (num_gpnet_edges, edge_dim), ``level`` (num_gpnet_nodes,), ``action_mask`` (num_gpnet_nodes,) bool
        output: (num_gpnet_nodes,) float logits, ``-inf`` where the action mask forbids the move
    """

    def __init__(self, config: PolicyConfig | None = None) -> None:
        super().__init__()
        self.config = config or PolicyConfig()
        c = self.config
        self.encode = nn.Sequential(nn.Linear(c.node_dim, c.hidden), nn.ReLU())
        self.forward_sweep = LevelSweep(c.hidden, c.edge_dim)
        self.reverse_sweep = LevelSweep(c.hidden, c.edge_dim)
        self.score = nn.Sequential(nn.Linear(3 * c.hidden, c.hidden), nn.ReLU(), nn.Linear(c.hidden, c.kinds))

    def move_logits(self, gp: GpNet) -> torch.Tensor:
        """Unmasked scores, shape (gpNet nodes, kinds): column k rates move kind k to that node's device."""
        h0 = self.encode(gp.x)
        hf = self.forward_sweep(h0, gp.edge_index, gp.edge_attr, gp.level, reverse=False)
        hb = self.reverse_sweep(h0, gp.edge_index, gp.edge_attr, gp.level, reverse=True)
        return self.score(torch.cat([h0, hf, hb], dim=-1))

    def forward(self, gp: GpNet) -> torch.Tensor:
        """Masked relocation logits, one per gpNet node (``-inf`` where the action mask forbids the move)."""
        logits = self.move_logits(gp)[:, 0]
        return logits.masked_fill(~gp.action_mask, float("-inf"))

    def distribution(self, gp: GpNet, restrict: torch.Tensor | None = None) -> torch.distributions.Categorical:
        """The action distribution; ``restrict`` (bool per node) narrows the allowed moves further."""
        logits = self(gp)
        if restrict is not None:
            logits = logits.masked_fill(~restrict, float("-inf"))
        return torch.distributions.Categorical(logits=logits)
