"""The training distribution of GiPH's shipped policy: layered DAGs, workflow recipes and DNN graphs, in real units.

:func:`sample_problem` draws one (graph, cluster) pair; a third of them each:

* ``layered`` — GiPH's layered DAGs (10-60 tasks, 5 hardware types) on random heterogeneous clusters of 4-20
  devices (synthetic, unitless);
* ``workflow`` — WfChef recipes fitted to real traces (:data:`TRAIN_RECIPES`, 50-200 tasks; compute in reference
  seconds, files in bytes);
* ``dnn`` — small PyTorch models traced with torch.fx (:class:`BranchMLP`, :class:`InceptionNet`,
  :class:`AttentionStack`, random widths, depths, branches and batch sizes; FLOPs and bytes);

the workflows and DNNs on a *preset-like* cluster half of the time (a preset of :mod:`mlsysopt.graph.presets`
with a random subset of its devices and speeds, bandwidths and latencies scaled by up to ~2x: real device and link
figures) and on a random cluster in the graph's units otherwise. The benchmark's held-out sets use other seeds,
the recipes of :data:`HELD_OUT_RECIPES` (never trained on) and the zoo's models on the exact presets.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import cluster_for, layered_dag, random_cluster
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.importers.wfcommons import from_recipe
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.presets import PRESETS, preset_cluster

#: Recipes the policy is trained on; the benchmark tests on :data:`HELD_OUT_RECIPES` only.
TRAIN_RECIPES: tuple[str, ...] = ("blast", "bwa", "cycles", "soykb", "srasearch")
HELD_OUT_RECIPES: tuple[str, ...] = ("montage", "epigenomics", "genome", "seismology")
#: The smallest instance each training recipe builds (its real base graph).
RECIPE_MIN_TASKS = {"blast": 45, "bwa": 106, "cycles": 69, "soykb": 98, "srasearch": 45}
KINDS: tuple[str, ...] = ("layered", "workflow", "dnn")


class BranchMLP(nn.Module):
    """Residual stages of ``branches`` parallel two-layer MLPs, summed and normalized."""

    def __init__(self, dim: int, branches: int, depth: int) -> None:
        super().__init__()
        self.stages = nn.ModuleList(
            nn.ModuleList(
                nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)) for _ in range(branches)
            )
            for _ in range(depth)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply every stage."""
        for branches, norm in zip(self.stages, self.norms, strict=True):
            y = branches[0](x)
            for b in branches[1:]:
                y = y + b(x)
            x = norm(x + y)
        return x


class InceptionNet(nn.Module):
    """Inception-style stages: parallel 1x1 / 3x3 / 5x5 conv branches, concatenated, then a 1x1 mix."""

    def __init__(self, channels: int, branches: int, depth: int) -> None:
        super().__init__()
        c = channels
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        kernels = [1, 3, 5, 3][:branches]
        self.stages = nn.ModuleList(
            nn.ModuleList(nn.Conv2d(c, c, k, padding=k // 2) for k in kernels) for _ in range(depth)
        )
        self.mix = nn.ModuleList(nn.Conv2d(c * len(kernels), c, 1) for _ in range(depth))
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits."""
        x = torch.relu(self.stem(x))
        for branches, mix in zip(self.stages, self.mix, strict=True):
            x = torch.relu(mix(torch.cat([b(x) for b in branches], dim=1)))
        return self.head(x.mean(dim=(2, 3)))


class AttentionStack(nn.Module):
    """Pre-norm self-attention + MLP layers over a token sequence."""

    def __init__(self, dim: int, heads: int, depth: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(depth))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)
        )
        self.norm1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.norm2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply every layer to ``x`` of shape (batch, tokens, dim)."""
        b, t, d = x.shape
        h = self.heads
        for qkv, proj, mlp, n1, n2 in zip(self.qkv, self.proj, self.mlp, self.norm1, self.norm2, strict=True):
            q, k, v = qkv(n1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
            x = x + proj((att @ v).transpose(1, 2).reshape(b, t, d))
            x = x + mlp(n2(x))
        return x


def dnn_graph(rng: np.random.Generator) -> CompGraph:
    """A random DNN of one of the three families, traced with torch.fx (FLOPs and bytes per node)."""

    family = int(rng.integers(3))
    batch = int(rng.choice([1, 8, 32]))
    torch.manual_seed(int(rng.integers(2**31)))
    if family == 0:
        dim = int(rng.choice([64, 128, 256, 512]))
        model: nn.Module = BranchMLP(dim, int(rng.integers(1, 5)), int(rng.integers(2, 7)))
        inputs = (torch.randn(batch, dim),)
        name = "branch_mlp"
    elif family == 1:
        c = int(rng.choice([16, 32, 64]))
        model = InceptionNet(c, int(rng.integers(2, 5)), int(rng.integers(2, 6)))
        inputs = (torch.randn(batch, 3, int(rng.choice([16, 32])), int(rng.choice([16, 32]))),)
        name = "inception"
    else:
        dim = int(rng.choice([64, 128, 256]))
        model = AttentionStack(dim, int(rng.choice([2, 4])), int(rng.integers(1, 5)))
        inputs = (torch.randn(batch, int(rng.choice([16, 64, 128])), dim),)
        name = "attention"
    with torch.no_grad():
        return from_module(model.eval(), inputs, name=name)


def preset_like(graph: CompGraph, rng: np.random.Generator) -> DeviceCluster:
    """A random variant of a preset in ``graph``'s units: some of its devices, speeds and links scaled ~U(1/2, 2)."""

    base = preset_cluster(str(rng.choice(sorted(PRESETS))), graph)
    d = base.num_devices
    keep = np.sort(rng.choice(d, size=int(rng.integers(max(2, d // 2), d + 1)), replace=False))
    k = keep.size
    speed = base.speed[keep] * np.exp(rng.uniform(-0.7, 0.7, k))
    link = np.exp(rng.uniform(-0.7, 0.7, (k, k)))
    link = np.sqrt(link * link.T)  # symmetric scaling, as the presets' links are
    bandwidth = base.bandwidth[np.ix_(keep, keep)] * link
    delay = base.delay[np.ix_(keep, keep)] / link
    meta = {"source": f"preset-like ({base.meta.get('source')}, {k} of {d} devices, scaled)"}
    names = [base.names[i] for i in keep]
    return DeviceCluster(speed, base.supports[keep], bandwidth, delay, names, base.units, meta)


def sample_problem(seed: int, kind: str | None = None, max_tasks: int = 200) -> tuple[CompGraph, DeviceCluster, str]:
    """One training problem (graph, cluster, kind) for ``seed``: the same seed gives the same problem."""

    rng = np.random.default_rng([seed, 7_177])
    kind = KINDS[int(rng.integers(len(KINDS)))] if kind is None else kind
    if kind == "layered":
        n = int(rng.integers(10, min(60, max_tasks) + 1))
        graph = layered_dag(
            n, alpha=float(rng.choice([0.2, 0.3, 0.5])), p=0.2, num_types=5, seed=int(rng.integers(2**31))
        )
        return graph, random_cluster(int(rng.integers(4, 21)), num_types=5, seed=int(rng.integers(2**31))), kind
    if kind == "workflow":
        recipe = str(rng.choice(TRAIN_RECIPES))
        lo = RECIPE_MIN_TASKS[recipe]
        graph = from_recipe(recipe, int(rng.integers(lo, max(lo, max_tasks) + 1)), seed=int(rng.integers(2**31)))
    else:
        graph = dnn_graph(rng)
    if rng.random() < 0.5:
        return graph, preset_like(graph, rng), kind
    return graph, cluster_for(graph, int(rng.integers(4, 17)), seed=int(rng.integers(2**31))), kind
