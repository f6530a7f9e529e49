"""Graph Segment Training (Cao et al., NeurIPS 2023): one training graph's step in every mode, and F's table refresh.

A step samples up to ``configs_per_graph`` configurations of the graph and builds the aggregate ``G`` (C x unit) of
its segment *units* (embeddings, or per-segment scores with the scalar readout) that the model reads out:

* ``full``: one pass over the whole graph (every edge kept), pooled per segment; memory grows with the graph.
* ``gst``: ``k`` segments sampled uniformly without replacement get gradients; every other segment is computed
  fresh under ``torch.no_grad`` one at a time (exact, but the step's time grows with the graph).
* ``gst+e``: the other segments are read from the :class:`~mlsysopt.costmodel.history.HistoryTable` (a missing row
  is computed once under no_grad and stored); after the optimizer step the table receives the sampled segments'
  units of that step's forward pass. Rows are keyed by (graph, segment, *signature*), so every configuration that
  agrees on a segment's configurable nodes shares its row (see :mod:`mlsysopt.costmodel.plan`); ``history_key=
  "config"`` keys them by configuration as the reference does. ``refresh = r`` also recomputes, without gradients,
  the r stalest other segments for the sampled configurations (their rows are written after the step).
* ``gst+ef``: gst+e, then F: freeze the backbone, recompute every segment of every training graph fresh into the F
  table (eval mode, up to ``finetune_configs`` configurations per graph), train only the head on it, without SED.
* ``gst+efd``: gst+ef plus Stale Embedding Dropout: each stale segment (not sampled, not refreshed) is dropped with
  probability ``p`` (``sed_policy="age"``: ``p * min(1, age / sed_tau)``, age in epochs) and

      G = (1 + D / k) * sum_{s in K} fresh_s + sum_{refreshed} fresh_s + sum_{stale, kept} stale_s   (D = dropped)

  i.e. each dropped segment is replaced by the mean of the sampled ones. With K uniform and drops i.i.d. (uniform
  policy, no refresh), given U = K + dropped, K is a uniform k-subset of U, so E[(D/k) sum_K fresh] =
  E[sum_dropped fresh]: G is an UNBIASED estimate of the full sum whenever the table holds current units (see
  :func:`combine`). The reference's rule ("up-weight the fresh segment by the number dropped") with the realised
  count. The age policy and refreshed segments make it approximately unbiased (exactly, if age is independent of
  a segment's unit).

Every random choice of a graph's step comes from ``rng`` (seeded by the trainer from seed, epoch and the graph's
position in the epoch), so the same step gives the same result in one process and in data-parallel ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mlsysopt.errors import InvalidCheckpoint

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphRecord
    from mlsysopt.costmodel.history import HistoryTable
    from mlsysopt.costmodel.losses import Loss
    from mlsysopt.costmodel.model import CostModel
    from mlsysopt.costmodel.plan import GraphPlan
    from mlsysopt.costmodel.train_config import TrainConfig

#: A table write applied after the optimizer step: (graph name, rows (N,), units (N, unit_dim)).
Write = tuple[str, np.ndarray, torch.Tensor]


def combine(
    fresh_sum: torch.Tensor, k: int, stale_sum: torch.Tensor, dropped: int, num_segments: int, mean: bool
) -> torch.Tensor:
    """SED aggregate ``(1 + dropped/k) * fresh_sum + stale_sum`` (divided by S for mean aggregation).

    Args:
        fresh_sum: Sum of the units of the k segments computed with gradients.
        k: Number of fresh segments, >= 1.
        stale_sum: Sum of the history units of the other, kept segments.
        dropped: Stale segments dropped by SED.
        num_segments: Segments of the graph (S).
        mean: Whether the aggregation is a mean (divide by S) rather than a sum.

    Returns:
        torch.Tensor: The aggregate, shaped like ``fresh_sum``.

    Shapes:
        fresh_sum: (..., unit_dim) float
        stale_sum: (..., unit_dim) float
    """
    agg = fresh_sum * (1.0 + dropped / k) + stale_sum
    return agg / num_segments if mean else agg


class GSTSteps:
    """The per-graph steps of every mode; mixed into :class:`~mlsysopt.costmodel.trainer.Trainer`."""

    model: CostModel
    tc: TrainConfig
    task: str
    table: HistoryTable
    ft_table: HistoryTable
    loss_fn: Loss
    device: torch.device
    k: int
    segment_size: int | None
    absolute: bool
    steps_per_epoch: int
    ft_configs: dict[str, np.ndarray]

    def plan(self, rec: GraphRecord) -> GraphPlan:  # implemented by the trainer (cached per graph)
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def _emb_configs(self, configs: np.ndarray) -> np.ndarray:
        # Only layout node states depend on the config; tile and MalNet embed once, as config 0.
        return configs if self.task == "layout" else np.zeros(1, dtype=np.int64)

    def _key_by_config(self) -> bool:
        # a tile graph's per-segment score depends on its graph config: such rows cannot be shared
        return self.tc.history_key == "config" or (self.task == "tile" and self.model.config.readout == "scalar")

    def rows(self, plan: GraphPlan, configs: np.ndarray, segs: np.ndarray) -> np.ndarray:
        """Table rows ``(C, len(segs))`` of ``configs`` (the step's sampled ones) x ``segs``."""
        segs = np.asarray(segs, np.int64)
        if self._key_by_config():
            return configs[:, None] * plan.num_segments + segs[None, :]
        offsets, sig = plan.row_keys()
        cfgs = self._emb_configs(configs)
        return offsets[segs][None, :] + sig[np.ix_(cfgs, segs)]

    def _target(self, rec: GraphRecord, configs: np.ndarray) -> torch.Tensor:
        if self.task == "malnet":
            return torch.tensor([int(rec.label)], device=self.device)
        rt = np.asarray(rec.runtime, np.float64)[configs]
        if self.absolute:  # z-scored log runtime (the model's target scale)
            mean, std = (float(v) for v in self.model.target_stats)
            rt = (np.log(rt) - mean) / std
        return torch.as_tensor(rt, dtype=torch.float32, device=self.device)

    def _sample_configs(self, pool: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.task == "malnet":
            return np.zeros(1, dtype=np.int64)
        return np.sort(rng.choice(pool, size=min(self.tc.configs_per_graph, len(pool)), replace=False))

    def _units_of(self, plan: GraphPlan, s: int, configs: np.ndarray, gcf: torch.Tensor | None) -> torch.Tensor:
        return self.model.segment_units(plan, s, self._emb_configs(configs), gcf)

    def units_many(self, plan: GraphPlan, segs: np.ndarray, configs: np.ndarray, gcf: torch.Tensor | None,
                   max_nodes: int) -> torch.Tensor:  # fmt: skip
        """Units of segments ``segs`` for ``configs``, in blocks of <= ``max_nodes`` nodes: ``(C, len(segs), unit)``.

        Without gradients (refreshes, table fills) the model runs in eval mode: no dropout noise in stored units.
        """
        parts = []
        training = self.model.training
        if not torch.is_grad_enabled():
            self.model.eval()
        try:
            for group in plan.split(segs, max_nodes):
                emb = self.model.block_embeddings(plan, plan.block(group), self._emb_configs(configs))
                parts.append(self.model.units_per_segment(emb, gcf))
        finally:
            self.model.train(training)
        return torch.cat(parts, dim=1)

    def _block_nodes(self) -> int:
        # no-grad blocks of a training step stay a few segments big, so step memory does not grow with the graph
        return 4 * (self.segment_size or 1)

    def _table_sum(
        self, plan: GraphPlan, configs: np.ndarray, segs: np.ndarray, gcf: torch.Tensor | None
    ) -> torch.Tensor:
        """Sum over ``segs`` of the table's units for ``configs``; segments with a missing row are computed (no_grad)
        for every configuration of the step and stored."""
        name = plan.rec.name
        total = torch.zeros(1, self.model.config.unit_dim, device=self.device)
        if segs.size == 0:
            return total
        rows = self.rows(plan, configs, segs)  # (Cr, m)
        uniq, inv = np.unique(rows, return_inverse=True)
        units, present = self.table.get(name, uniq)
        if not bool(present.all()):
            missing = np.isin(rows, uniq[~present.numpy()]).any(axis=0)
            with torch.no_grad():
                fresh = self.units_many(plan, segs[missing], configs, gcf, self._block_nodes())
            self.table.put(name, rows[:, missing].reshape(-1), fresh.reshape(-1, fresh.shape[-1]))
            units, _ = self.table.get(name, uniq)
        return total + units[torch.from_numpy(inv.reshape(-1))].reshape(*rows.shape, -1).sum(1).to(self.device)

    def _keep_mask(
        self, plan: GraphPlan, configs: np.ndarray, segs: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """SED: which stale segments are kept (all of them without D)."""
        if self.tc.mode != "gst+efd" or segs.size == 0:
            return np.ones(segs.size, dtype=bool)
        p = np.full(segs.size, self.tc.sed_p)
        if self.tc.sed_policy == "age":
            rows = self.rows(plan, configs, segs)
            age = self.table.age(plan.rec.name, rows.reshape(-1)).reshape(rows.shape)
            age_epochs = np.where(age < 0, np.inf, age).max(axis=0) / max(1, self.steps_per_epoch)
            p = p * np.minimum(1.0, age_epochs / max(self.tc.sed_tau, 1e-9))
        return rng.random(segs.size) >= p

    def _sample_segments(self, plan: GraphPlan, configs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The ``k`` segments that get gradients: uniform, or (``sample="varying"``) among those where the step's
        configurations differ (the only ones a ranking loss can learn from), topped up uniformly."""
        S = plan.num_segments
        k = min(self.k, S)
        if self.tc.sample == "varying" and self.task == "layout" and not self._key_by_config():
            rows = self.rows(plan, configs, np.arange(S))
            varying = np.flatnonzero((rows != rows[:1]).any(axis=0))
            if varying.size >= k:
                return np.sort(rng.choice(varying, size=k, replace=False))
            rest = np.setdiff1d(np.arange(S), varying)
            return np.sort(np.concatenate([varying, rng.choice(rest, size=k - varying.size, replace=False)]))
        return np.sort(rng.choice(S, size=k, replace=False))

    def _to_refresh(self, plan: GraphPlan, configs: np.ndarray, segs: np.ndarray) -> np.ndarray:
        """Which of the kept stale segments ``segs`` are recomputed (no grad) instead of read from the table.

        ``varying``: those on which the step's configurations differ (their units' differences are what a ranking
        loss sees, so they must come from one model); ``stalest``: the ``refresh_segments`` oldest; ``none``.
        """
        redo = np.zeros(segs.size, dtype=bool)
        if segs.size == 0 or self.tc.refresh == "none":
            return redo
        rows = self.rows(plan, configs, segs)
        if self.tc.refresh == "varying":
            return (rows != rows[:1]).any(axis=0)
        age = self.table.age(plan.rec.name, rows.reshape(-1)).reshape(rows.shape)
        oldest = np.where(age < 0, np.iinfo(np.int64).max, age).max(axis=0)
        redo[np.argsort(-oldest, kind="stable")[: self.tc.refresh_segments]] = True
        return redo

    # ------------------------------------------------------------------ one training graph
    def train_graph(self, rec: GraphRecord, weight: float, rng: np.random.Generator) -> tuple[float, list[Write]]:
        """Forward + backward of one graph; returns its loss and the table writes to apply after the step."""
        plan = self.plan(rec)
        configs = self._sample_configs(np.arange(rec.num_configs), rng)
        gcf = self.model.graph_config(plan, configs)
        S, writes = plan.num_segments, []
        if self.tc.mode == "full":
            agg = self.model.whole_graph_units(plan, self._emb_configs(configs), gcf)
        else:
            sampled = self._sample_segments(plan, configs, rng)
            k = sampled.size
            others = np.setdiff1d(np.arange(S), sampled)
            fresh_units = self.units_many(plan, sampled, configs, gcf, k * (self.segment_size or 1))  # one pass, grad
            fresh = list(fresh_units.unbind(1))
            dropped = 0
            if self.tc.mode == "gst":
                stale_sum = self.model.fresh_units(plan, others, self._emb_configs(configs), gcf)
            else:
                keep = self._keep_mask(plan, configs, others, rng)
                dropped = int((~keep).sum())
                kept = others[keep]
                redo = self._to_refresh(plan, configs, kept)
                stale_sum = self._table_sum(plan, configs, kept[~redo], gcf)
                if redo.any():
                    with torch.no_grad():
                        units = self.units_many(plan, kept[redo], configs, gcf, self._block_nodes())
                    stale_sum = stale_sum + units.sum(1)
                    rows = self.rows(plan, configs, kept[redo])
                    writes.append((rec.name, rows.reshape(-1), units.reshape(-1, units.shape[-1]).detach()))
                for s, f in zip(sampled, fresh, strict=True):
                    writes.append((rec.name, self.rows(plan, configs, np.array([s]))[:, 0], f.detach()))
            agg = combine(torch.stack(fresh).sum(0), k, stale_sum, dropped, S, self.model.aggregate_mean)
        loss = self.loss_fn(self.model.readout(agg, gcf), self._target(rec, configs))
        (loss * weight).backward()
        return float(loss.detach()), writes

    def finetune_graph(self, rec: GraphRecord, weight: float, rng: np.random.Generator) -> tuple[float, list[Write]]:
        """F: the head on F-table embeddings (all fresh from the frozen backbone), no SED."""
        plan = self.plan(rec)
        configs = self._sample_configs(self.ft_configs[rec.name], rng)
        gcf = self.model.graph_config(plan, configs)
        S, c = plan.num_segments, len(configs)
        agg = torch.zeros(c if gcf is None else gcf.shape[0], self.model.config.unit_dim, device=self.device)
        for start in range(0, S, 256):
            segs = np.arange(start, min(start + 256, S))
            rows = self._ft_rows(plan, configs, segs)
            emb, present = self.ft_table.get(rec.name, rows.reshape(-1), self.device)
            if not bool(present.all()):
                raise InvalidCheckpoint(f"{rec.name}: the F table misses rows after the F refresh")
            emb = emb.reshape(rows.shape[0], len(segs), -1)
            if self.model.config.readout == "scalar":
                agg += torch.stack([self.model.units(emb[:, j], gcf) for j in range(len(segs))], 1).sum(1)
            else:
                agg += emb.sum(1)
        agg = agg / S if self.model.aggregate_mean else agg
        loss = self.loss_fn(self.model.readout(agg, gcf), self._target(rec, configs))
        (loss * weight).backward()
        return float(loss.detach()), []

    def _ft_rows(self, plan: GraphPlan, configs: np.ndarray, segs: np.ndarray) -> np.ndarray:
        # the F table holds embeddings, which never depend on a tile config: key by signature unless asked not to
        if self.tc.history_key == "config":
            return self._emb_configs(configs)[:, None] * plan.num_segments + segs[None, :]
        offsets, sig = plan.row_keys()
        return offsets[segs][None, :] + sig[np.ix_(self._emb_configs(configs), segs)]

    def refresh_graph(self, rec: GraphRecord, rng: np.random.Generator) -> dict[str, Any]:
        """F, first half, for one graph: every segment recomputed by the frozen backbone into the F table."""
        self.model.eval()
        plan = self.plan(rec)
        pool = np.arange(rec.num_configs)
        if self.task != "malnet" and len(pool) > self.tc.finetune_configs:
            pool = np.sort(rng.choice(pool, size=self.tc.finetune_configs, replace=False))
        self.ft_configs[rec.name] = pool
        cfgs = self._emb_configs(pool)
        with torch.no_grad():
            for s in range(plan.num_segments):
                rows = self._ft_rows(plan, pool, np.array([s]))[:, 0]
                uniq, first = np.unique(rows, return_index=True)
                for c0 in range(0, uniq.size, self.tc.eval_chunk):
                    pick = first[c0 : c0 + self.tc.eval_chunk]
                    self.ft_table.put(rec.name, uniq[c0 : c0 + self.tc.eval_chunk],
                                      self.model.embed_segment(plan, s, cfgs[pick]))  # fmt: skip
        return {"pool": pool}
