"""The trainer's graphs and what it chooses from them: records checked against the model and pruned, kept with
their segment plans in a bounded cache; the input normalisations; the ``auto`` segment size and ``k``.

Mixed into :class:`~mlsysopt.costmodel.trainer.Trainer` (which owns the state these methods read: the configs,
the model, its optimizer and the GST steps' ``units_many``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mlsysopt.costmodel.inputs import config_stats, feature_stats, log_runtime_stats, prune_layout
from mlsysopt.costmodel.memory import PeakMemory
from mlsysopt.costmodel.model_config import ModelConfig
from mlsysopt.costmodel.plan import GraphPlan
from mlsysopt.costmodel.segment import Segmenter
from mlsysopt.costmodel.train_config import AUTO, AUTO_SEGMENT_CAP, TrainConfig
from mlsysopt.errors import InvalidOption

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
    from mlsysopt.costmodel.model import CostModel

#: Configuration and target statistics are fitted on at most this many training graphs.
STATS_GRAPHS = 256


def resolve_prune(hops: int | str | None, task: str, absolute: bool, layers: int) -> int | None:
    """Pruning hops of a run: ``auto`` keeps a layout graph's configurable nodes and their ``layers``-hop
    neighbourhood for a ranking loss (nodes further away add the same to every configuration's score), and prunes
    nothing for an absolute target (whose runtime every node adds to) or for tile and MalNet graphs."""
    if hops != AUTO:
        return None if hops is None else int(hops)
    return layers if task == "layout" and not absolute else None


class TrainerData:
    """Records, plans, normalisations, segment size and ``k`` of a trainer (see the module docstring)."""

    mc: ModelConfig
    tc: TrainConfig
    task: str
    model: CostModel
    optimizer: torch.optim.Optimizer
    prune_hops: int | None
    segment_method: str
    segment_size: int | None
    segmenter: Segmenter | None
    k: int
    stats_ready: bool
    probe: dict[str, Any] | None
    absolute: bool
    device: torch.device
    _cache: OrderedDict[tuple[int, int], list[Any]]
    _cache_bytes: int
    units_many: Callable[..., torch.Tensor]  # the GST steps' (gst.py), mixed in by the trainer

    def _make_segmenter(self, size: int) -> None:
        self.segment_size = int(size)
        self.segmenter = Segmenter(self.segment_method, self.segment_size, self.tc.cache_dir, seed=self.tc.seed)

    def record(self, ds: GraphDataset, i: int) -> GraphRecord:
        """Graph ``i`` of ``ds``, checked against the model and pruned as configured (kept in a bounded cache)."""
        key = (id(ds), int(i))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit[0]
        rec = ds.record(i)
        if rec.task != self.task:
            raise InvalidOption(f"{rec.name}: a {rec.task} graph, but the model is for {self.task}")
        if rec.x.shape[1] != self.mc.node_feat_dim:
            raise InvalidOption(
                f"{rec.name}: {rec.x.shape[1]} node features, the model expects {self.mc.node_feat_dim}"
            )
        if self.prune_hops is not None:
            rec = prune_layout(rec, self.prune_hops)
        self._remember(key, rec)
        return rec

    @staticmethod
    def _nbytes(rec: GraphRecord) -> int:
        return sum(a.nbytes for a in (rec.x, rec.edge_index, rec.node_config_feat) if a is not None)

    def _remember(self, key: tuple[int, int], rec: GraphRecord) -> None:
        size = self._nbytes(rec)
        if size > self.tc.cache_mb * 2**20:
            return
        self._cache[key] = [rec, None]
        self._cache_bytes += size
        while self._cache_bytes > self.tc.cache_mb * 2**20:
            _, (old, _) = self._cache.popitem(last=False)
            self._cache_bytes -= self._nbytes(old)

    def plan(self, rec: GraphRecord) -> GraphPlan:
        """The :class:`GraphPlan` of ``rec`` (cached with the record; else made now)."""
        if self.segmenter is None:
            raise InvalidOption("the segment size is not chosen yet: prepare() the trainer on its training graphs")
        for entry in reversed(self._cache.values()):
            if entry[0] is rec:
                if entry[1] is None:
                    entry[1] = GraphPlan(rec, self.segmenter(rec), self.mc.layers, self.mc.deviation)
                return entry[1]
        return GraphPlan(rec, self.segmenter(rec), self.mc.layers, self.mc.deviation)

    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.default_rng([self.tc.seed, *key])

    def prepare(self, train_ds: GraphDataset) -> None:
        """Fit the input normalisations on the training graphs (reads and checks every one of them) and choose the
        segment size: node features, configuration features, the target scale of an absolute loss."""
        stats = getattr(train_ds, "feature_stats", None)
        records = (self.record(train_ds, i) for i in range(len(train_ds)))
        self.model.set_feature_stats(*(stats() if callable(stats) else feature_stats(records)))
        every = [self.record(train_ds, i) for i in range(min(len(train_ds), STATS_GRAPHS))]
        if self.task == "layout":
            self.model.set_config_stats(*config_stats(every, self.mc.deviation))
        if self.absolute:
            self.model.set_target_stats(*log_runtime_stats(every))
        if self.segment_size is None:
            largest = max(self.record(train_ds, i).num_nodes for i in range(len(train_ds)))
            self._make_segmenter(max(1, min(AUTO_SEGMENT_CAP, largest)))
        self.stats_ready = True

    def choose_k(self, train_ds: GraphDataset) -> int:
        """``k`` from the step-memory budget (``k="auto"`` or ``memory_budget_mb``): as many sampled segments as it
        holds, measured by a probe step on the training segment with the most configurable nodes (where the
        per-configuration cost of a step sits)."""
        if self.tc.mode == "full" or (self.tc.k != AUTO and self.tc.memory_budget_mb is None):
            return self.k
        best = (-1, 0, 0)
        for i in range(len(train_ds)):
            rec = self.record(train_ds, i)
            plan = self.plan(rec)
            for s in range(plan.num_segments):
                n_cfg = int(plan.config_cols(s).size) if self.task == "layout" else int(plan.seg.sizes[s])
                if n_cfg > best[0]:
                    best = (n_cfg, i, s)
        rec = self.record(train_ds, best[1])
        plan, s = self.plan(rec), best[2]
        configs = np.arange(min(self.tc.configs_per_graph, rec.num_configs))
        self.model.train()
        with PeakMemory(self.device) as pm:
            gcf = self.model.graph_config(plan, configs)
            units = self.units_many(plan, np.array([s]), configs, gcf, self.segment_size or AUTO_SEGMENT_CAP)
            self.model.readout(units.sum(1), gcf).float().sum().backward()
        self.optimizer.zero_grad(set_to_none=True)
        per_segment = max(pm.peak_mb, 1e-6)
        most = max(self.plan(self.record(train_ds, i)).num_segments for i in range(len(train_ds)))
        self.k = int(max(1, min(most, self.tc.budget_mb // per_segment)))
        self.probe = {"graph": rec.name, "segment": int(s), "configurable_nodes": int(max(best[0], 0)),
                      "segment_nodes": int(plan.seg.sizes[s]), "peak_mb": float(pm.peak_mb),
                      "budget_mb": self.tc.budget_mb, "k": self.k, "max_segments": int(most)}  # fmt: skip
        return self.k
