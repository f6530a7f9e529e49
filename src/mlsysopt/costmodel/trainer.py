"""One trainer for every mode: full | gst | gst+e | gst+ef | gst+efd (Graph Segment Training, Cao et al. 2023).

A training step takes ``graphs_per_step`` graphs; for each, it samples up to ``configs_per_graph`` configurations
and builds the graph embedding ``G`` (C x d) the head scores:

* ``full``: the backbone runs on the whole graph (every edge kept); each segment is pooled from the whole-graph
  node states and ``G = sum_s emb_s`` (mean for MalNet). Memory grows with the graph.
* ``gst``: ``k`` segments sampled uniformly without replacement get gradients; every other segment is computed fresh
  under ``torch.no_grad`` ONE AT A TIME (only its running sum is kept), so memory stays per-segment.
* ``gst+e``: the other segments come from the :class:`HistoryTable` (a missing row is computed fresh under no_grad
  once and stored). After the optimizer step the table receives the sampled segments' embeddings computed in that
  step's forward pass (detached); it is never refreshed in bulk during training. Segments computed under no_grad
  during a step use the same train mode (dropout) as the sampled ones.
* ``gst+ef``: gst+e, then F: freeze the backbone, recompute every segment's embedding of every training graph fresh
  into the table (eval mode, for up to ``finetune_configs`` configs per graph) and train only the head on them for
  ``finetune_epochs`` epochs, without SED.
* ``gst+efd``: gst+ef plus Stale Embedding Dropout: each stale segment is dropped with probability ``p`` and

      G = (1 + D / k) * sum_{s in K} fresh_s + sum_{s not in K, kept} stale_s          (D = number dropped)

  i.e. each dropped segment is replaced by the mean of the fresh ones. With K uniform and drops i.i.d., given the
  set U = K + dropped, K is a uniform k-subset of U, so E[(D/k) sum_K fresh] = E[sum_dropped fresh]: G is an
  UNBIASED estimate of the full sum whenever the table holds the current embeddings (see :func:`combine`).
  This is the reference's rule ("up-weight the fresh segment by the number dropped") with the realised count.

Evaluation (:meth:`Trainer.evaluate`, :meth:`Trainer.predict`) always computes every segment fresh, one segment
and ``eval_chunk`` configs at a time (full mode: the whole graph per config chunk), and never reads the table.
A checkpoint is written atomically into ``run_dir`` (a folder, or an open :class:`~mlsysopt.io.RunDir`) after every
epoch; ``fit(resume=True)`` continues exactly (:meth:`Trainer.state_dict` holds everything it needs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.costmodel.checkpoint import check_compatible, checkpoint_path, load_checkpoint, save_checkpoint, tagged
from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.costmodel.history import HistoryTable
from mlsysopt.costmodel.losses import get_loss
from mlsysopt.costmodel.memory import PeakMemory
from mlsysopt.costmodel.model import (
    CostModel,
    GraphView,
    ModelConfig,
    feature_stats,
    prune_layout,
    to_device,
)
from mlsysopt.costmodel.segment import Segmenter
from mlsysopt.costmodel.train_config import MODES, TrainConfig
from mlsysopt.errors import InvalidCheckpoint, InvalidOption
from mlsysopt.io import RunDir

__all__ = ["MODES", "Progress", "TrainConfig", "Trainer", "combine"]

Progress = Callable[[int, int, dict[str, Any]], None]


def combine(
    fresh_sum: torch.Tensor, k: int, stale_sum: torch.Tensor, dropped: int, num_segments: int, mean: bool
) -> torch.Tensor:
    """SED aggregate ``(1 + dropped/k) * fresh_sum + stale_sum`` (divided by S for mean aggregation)."""
    agg = fresh_sum * (1.0 + dropped / k) + stale_sum
    return agg / num_segments if mean else agg


class Trainer:
    """Trains and evaluates a :class:`CostModel` with one of the GST modes (see the module docstring)."""

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig) -> None:
        model_config.validate()
        train_config.validate()
        self.mc, self.tc = model_config, train_config
        self.task = model_config.task
        loss_name = train_config.loss if train_config.loss != "auto" else ("ce" if self.task == "malnet" else "hinge")
        self.loss_fn = get_loss(loss_name, self.task)
        if train_config.prune_hops is not None and self.task != "layout":
            raise InvalidOption("prune hops applies to layout graphs only")
        self.device = torch.device(train_config.device)
        torch.manual_seed(train_config.seed)
        self.model = CostModel(model_config).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=train_config.lr, weight_decay=train_config.weight_decay
        )
        self.ft_optimizer: torch.optim.Optimizer | None = None
        auto = "metis" if self.task == "malnet" else "contiguous"
        method = train_config.segmenter if train_config.segmenter != "auto" else auto
        self.segmenter = Segmenter(method, train_config.segment_size, train_config.cache_dir, seed=train_config.seed)
        self.table = HistoryTable(model_config.embed_dim)
        self.rng = np.random.default_rng(train_config.seed)
        self.history: list[dict[str, Any]] = []
        self.epoch = 0
        self.stats_ready = False
        self.ft_configs: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ data
    def record(self, ds: GraphDataset, i: int) -> GraphRecord:
        """Graph ``i`` of ``ds``, checked against the model (task, feature width) and pruned as configured."""
        rec = ds.record(i)
        if rec.task != self.task:
            raise InvalidOption(f"{rec.name}: a {rec.task} graph, but the model is for {self.task}")
        if rec.x.shape[1] != self.mc.node_feat_dim:
            raise InvalidOption(
                f"{rec.name}: {rec.x.shape[1]} node features, the model expects {self.mc.node_feat_dim}"
            )
        if self.tc.prune_hops is not None:
            rec = prune_layout(rec, self.tc.prune_hops)
        return rec

    def _view(self, rec: GraphRecord) -> GraphView:
        return GraphView.of(rec, self.segmenter(rec))

    def _emb_configs(self, configs: np.ndarray) -> np.ndarray:
        # Only layout node states depend on the config; tile and MalNet embed once, as table config 0.
        return configs if self.task == "layout" else np.zeros(1, dtype=np.int64)

    def _table_sum(self, g: GraphView, segs: np.ndarray, cfgs: np.ndarray) -> torch.Tensor:
        total = torch.zeros(len(cfgs), self.mc.embed_dim, device=self.device)
        for start in range(0, len(segs), 64):  # bounded reads: 64 segments of rows at a time
            chunk = segs[start : start + 64]
            emb, present = self.table.get(g.rec.name, cfgs, chunk)
            for j in np.flatnonzero(~present.all(0).numpy()):
                with torch.no_grad():
                    e = self.model.embed_segment(g, int(chunk[j]), cfgs)
                self.table.put(g.rec.name, cfgs, int(chunk[j]), e)
                emb[:, j] = e.cpu()
            total += emb.sum(1).to(self.device)
        return total

    def _target(self, rec: GraphRecord, configs: np.ndarray) -> torch.Tensor:
        if self.task == "malnet":
            return torch.tensor([int(rec.label)], device=self.device)
        return to_device(np.asarray(rec.runtime)[configs], self.device, torch.float32)

    def _sample_configs(self, pool: np.ndarray) -> np.ndarray:
        if self.task == "malnet":
            return np.zeros(1, dtype=np.int64)
        return np.sort(self.rng.choice(pool, size=min(self.tc.configs_per_graph, len(pool)), replace=False))

    # ------------------------------------------------------------------ one training graph
    def _train_graph(self, rec: GraphRecord, weight: float) -> tuple[float, list]:
        """Forward + backward of one graph; returns its loss and the table writes to apply after the step."""
        g = self._view(rec)
        configs = self._sample_configs(np.arange(rec.num_configs))
        cfgs = self._emb_configs(configs)
        S, writes = g.seg.num_segments, []
        if self.tc.mode == "full":
            agg = self.model.embed_whole_graph(g, cfgs)
        else:
            k = min(self.tc.k, S)
            sampled = np.sort(self.rng.choice(S, size=k, replace=False))
            others = np.setdiff1d(np.arange(S), sampled)
            fresh = [self.model.embed_segment(g, int(s), cfgs) for s in sampled]
            dropped = 0
            if self.tc.mode == "gst":
                stale_sum = self.model.embed_fresh(g, others, cfgs)
            else:
                keep = np.ones(len(others), dtype=bool)
                if self.tc.mode == "gst+efd":
                    keep = self.rng.random(len(others)) >= self.tc.sed_p
                dropped = int((~keep).sum())
                stale_sum = self._table_sum(g, others[keep], cfgs)
                writes = [(rec.name, cfgs, int(s), f.detach()) for s, f in zip(sampled, fresh, strict=True)]
            agg = combine(torch.stack(fresh).sum(0), k, stale_sum, dropped, S, self.model.aggregate_mean)
        loss = self.loss_fn(self.model.head(agg, self.model.graph_config(rec, configs)), self._target(rec, configs))
        (loss * weight).backward()
        return float(loss.detach()), writes

    def _finetune_graph(self, rec: GraphRecord, weight: float) -> tuple[float, list]:
        """F: the head on table embeddings (all fresh from the frozen backbone), no SED."""
        configs = self._sample_configs(self.ft_configs[rec.name])
        cfgs = self._emb_configs(configs)
        S = self.segmenter(rec).num_segments
        agg = torch.zeros(len(cfgs), self.mc.embed_dim, device=self.device)
        for start in range(0, S, 64):
            emb, present = self.table.get(rec.name, cfgs, np.arange(start, min(start + 64, S)))
            if not bool(present.all()):
                raise InvalidCheckpoint(f"{rec.name}: history table misses rows after the F refresh")
            agg += emb.sum(1).to(self.device)
        agg = agg / S if self.model.aggregate_mean else agg
        loss = self.loss_fn(self.model.head(agg, self.model.graph_config(rec, configs)), self._target(rec, configs))
        (loss * weight).backward()
        return float(loss.detach()), []

    def _refresh_table(self, ds: GraphDataset) -> None:
        """F, first half: every segment of every training graph recomputed with the frozen backbone into the table."""
        self.model.eval()
        for i in range(len(ds)):
            rec = self.record(ds, i)
            g = self._view(rec)
            pool = np.arange(rec.num_configs)
            if self.task != "malnet" and len(pool) > self.tc.finetune_configs:
                pool = np.sort(self.rng.choice(pool, size=self.tc.finetune_configs, replace=False))
            self.ft_configs[rec.name] = pool
            cfgs = self._emb_configs(pool)
            with torch.no_grad():
                for s in range(g.seg.num_segments):
                    for c0 in range(0, len(cfgs), self.tc.eval_chunk):
                        chunk = cfgs[c0 : c0 + self.tc.eval_chunk]
                        self.table.put(rec.name, chunk, s, self.model.embed_segment(g, s, chunk))

    def freeze_backbone(self) -> None:
        """F: stop gradients to everything but the head, and make the head's optimizer."""
        for p in self.model.backbone_parameters():
            p.requires_grad_(False)
        if self.ft_optimizer is None:
            lr = self.tc.finetune_lr or self.tc.lr
            self.ft_optimizer = torch.optim.Adam(self.model.head_parameters(), lr=lr, weight_decay=self.tc.weight_decay)

    # ------------------------------------------------------------------ epochs
    def _epoch(self, ds: GraphDataset, finetune: bool, tick: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        optimizer = self.ft_optimizer if finetune else self.optimizer
        assert optimizer is not None
        params = self.model.head_parameters() if finetune else list(self.model.parameters())
        step_fn = self._finetune_graph if finetune else self._train_graph
        order = self.rng.permutation(len(ds))
        losses, step_mb = [], []
        for start in range(0, len(order), self.tc.graphs_per_step):
            batch = order[start : start + self.tc.graphs_per_step]
            self.model.train()
            with self._measure() as pm:
                optimizer.zero_grad(set_to_none=True)
                writes: list = []
                for i in batch:
                    with pm.paused():  # reading the file is the host's business, not the step's
                        rec = self.record(ds, int(i))
                    loss, w = step_fn(rec, 1.0 / len(batch))
                    losses.append(loss)
                    writes += w
                if self.tc.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(params, self.tc.grad_clip)
                optimizer.step()
                for name, cfgs, s, emb in writes:
                    self.table.put(name, cfgs, s, emb)
                self.table.tick()
            step_mb.append(round(pm.peak_mb, 4))
            tick({"loss": losses[-1]})
        return {"loss": float(np.mean(losses)), "peak_step_mb": max(step_mb), "step_mb": step_mb}

    def _measure(self) -> PeakMemory:
        return PeakMemory(self.device, enabled=self.tc.measure_memory)

    def prepare(self, train_ds: GraphDataset) -> None:
        """Fit the node-feature normalisation on the training graphs (reads and checks every one of them)."""
        stats = getattr(train_ds, "feature_stats", None)
        records = (self.record(train_ds, i) for i in range(len(train_ds)))
        self.model.set_feature_stats(*(stats() if callable(stats) else feature_stats(records)))
        self.stats_ready = True

    def fit(
        self,
        train_ds: GraphDataset,
        valid_ds: GraphDataset | None = None,
        run_dir: str | Path | RunDir | None = None,
        resume: bool = False,
        progress: Progress | None = None,
    ) -> list[dict[str, Any]]:
        """Train (and finetune for the F modes), validating and checkpointing after every epoch; returns history.

        History entries: epoch, phase (train | finetune), loss (mean over the epoch's graphs), peak_step_mb and
        step_mb (tensor memory of every step, see memory.py), epoch_s, and valid_<metric> when ``valid_ds`` is
        given. ``progress(done_steps, total_steps, info)`` is called after every optimizer step.
        """
        if len(train_ds) == 0:
            raise InvalidOption("the training set has no graphs")
        ckpt, save = _checkpoint_writer(run_dir)
        if resume and ckpt is not None and ckpt.exists():
            self.load_state_dict(load_checkpoint(ckpt), ckpt)
        if not self.stats_ready:
            self.prepare(train_ds)
        total = self.tc.epochs + (self.tc.finetune_epochs if self.tc.finetunes else 0)
        if self.ft_optimizer is not None and self.epoch < self.tc.epochs:
            raise InvalidCheckpoint(f"{ckpt}: this run was already finetuned; it cannot train the backbone further")
        steps_per_epoch = math.ceil(len(train_ds) / self.tc.graphs_per_step)
        done = self.epoch * steps_per_epoch
        for epoch in range(self.epoch, total):
            finetune = epoch >= self.tc.epochs
            t0 = time.perf_counter()
            if finetune and self.ft_optimizer is None:
                self._refresh_table(train_ds)
            if finetune:
                self.freeze_backbone()

            def tick(info: dict[str, Any], epoch: int = epoch, finetune: bool = finetune) -> None:
                nonlocal done
                done += 1
                if progress is not None:
                    progress(done, total * steps_per_epoch, {"epoch": epoch + 1, "finetune": finetune, **info})

            entry: dict[str, Any] = {"epoch": epoch + 1, "phase": "finetune" if finetune else "train"}
            entry |= self._epoch(train_ds, finetune, tick)
            entry["epoch_s"] = time.perf_counter() - t0
            if valid_ds is not None and len(valid_ds):
                entry |= {f"valid_{k}": v for k, v in self.evaluate(valid_ds).items()}
            self.history.append(entry)
            self.epoch = epoch + 1
            if save is not None:
                save(self.state_dict())
        return self.history

    # ------------------------------------------------------------------ evaluation (always fresh, never the table)
    def _predictions(self, ds: GraphDataset) -> Iterator[tuple[GraphRecord, np.ndarray]]:
        self.model.eval()
        for i in range(len(ds)):
            rec = self.record(ds, i)
            yield rec, self.model.predict_graph(self._view(rec), self.tc.mode == "full", self.tc.eval_chunk)

    def predict(self, ds: GraphDataset) -> dict[str, np.ndarray]:
        """Per graph: a score per config (lower = faster) or class logits, every segment computed fresh."""
        return {rec.name: pred for rec, pred in self._predictions(ds)}

    def evaluate(self, ds: GraphDataset) -> dict[str, float]:
        """Ranking metrics (opa, kendall, slowdown_top1/5/10) or classification metrics (accuracy, macro_f1)."""
        from mlsysopt.costmodel.metrics import classification_metrics, ranking_metrics

        preds, trues = [], []
        for rec, pred in self._predictions(ds):
            if self.task == "malnet":
                if rec.label is None:
                    raise InvalidOption(f"{rec.name}: has no label to evaluate against")
                preds.append(int(np.argmax(pred)))
                trues.append(int(rec.label))
            else:
                if rec.runtime is None:
                    raise InvalidOption(f"{rec.name}: has no runtimes to evaluate against")
                preds.append(pred)
                trues.append(np.asarray(rec.runtime, dtype=np.float64))
        if self.task == "malnet":
            return classification_metrics(np.asarray(preds), np.asarray(trues))
        return ranking_metrics(preds, trues)

    # ------------------------------------------------------------------ checkpoints
    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> Trainer:
        """A trainer holding the model of a checkpoint (a run directory or file), e.g. to evaluate or predict."""
        path = checkpoint_path(path)
        data = load_checkpoint(path)
        try:
            mc = ModelConfig.from_dict(data["model_config"])
            tc = TrainConfig.from_dict({**data["train_config"], **overrides})
        except (InvalidOption, TypeError) as exc:
            raise InvalidCheckpoint(f"{path}: its configuration is not this build's ({exc})") from None
        trainer = cls(mc, tc)
        trainer.load_state_dict(data, path)
        return trainer

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: configs, weights, optimizers, table, epoch, history, RNG states."""
        return {
            "model_config": self.mc.to_dict(),
            "train_config": self.tc.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "ft_optimizer": None if self.ft_optimizer is None else self.ft_optimizer.state_dict(),
            "table": self.table.state_dict(),
            "ft_configs": {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in self.ft_configs.items()},
            "epoch": self.epoch,
            "stats_ready": self.stats_ready,
            "history": self.history,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, data: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from :meth:`state_dict` output read from ``path``, after checking its model and mode match."""
        check_compatible(path, data, self.mc.to_dict(), self.tc.to_dict())
        try:
            self.model.load_state_dict(data["model"])
            self.optimizer.load_state_dict(data["optimizer"])
            if data.get("ft_optimizer") is not None:
                self.freeze_backbone()
                assert self.ft_optimizer is not None
                self.ft_optimizer.load_state_dict(data["ft_optimizer"])
            self.table.load_state_dict(data["table"])
            self.ft_configs = {k: v.numpy() for k, v in data["ft_configs"].items()}
            self.epoch, self.stats_ready = int(data["epoch"]), bool(data["stats_ready"])
            self.history = list(data["history"])
            self.rng.bit_generator.state = data["numpy_rng"]
            torch.set_rng_state(data["torch_rng"])
        except (KeyError, AttributeError, RuntimeError, ValueError, TypeError) as exc:
            raise InvalidCheckpoint(f"{path}: cannot resume from it ({type(exc).__name__}: {exc})") from None


def _checkpoint_writer(
    run_dir: str | Path | RunDir | None,
) -> tuple[Path | None, Callable[[dict[str, Any]], Path] | None]:
    """The checkpoint path of ``run_dir`` and the function that writes it atomically (None, None without one)."""
    if run_dir is None:
        return None, None
    if isinstance(run_dir, RunDir):
        return run_dir.checkpoint, lambda state: run_dir.save_checkpoint(tagged(state))
    ckpt = checkpoint_path(run_dir)
    return ckpt, lambda state: save_checkpoint(ckpt, state)
