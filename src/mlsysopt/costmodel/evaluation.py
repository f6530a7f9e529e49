"""Evaluation of a trained cost model: every segment computed fresh (never the history table), fast.

Fast because each distinct sub-configuration of a segment is computed once (configuration signatures), only the
configuration region of a segment is computed per configuration (the rest once for all), and up to
``eval_chunk`` configurations run as one batch. With a data-parallel group the graphs are split over the ranks and
the predictions gathered, so every rank computes the same metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from mlsysopt.costmodel.metrics import classification_metrics, opa, ranking_metrics
from mlsysopt.costmodel.model import CostModel, NodeStates
from mlsysopt.errors import InvalidOption

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
    from mlsysopt.costmodel.distributed import Comm
    from mlsysopt.costmodel.plan import GraphPlan


class Predictor(Protocol):
    """What evaluation needs of a trainer: its model and task, its (cached, pruned) records and their plans."""

    model: CostModel
    task: str

    @property
    def whole_graph(self) -> bool:
        """True for full-graph models (evaluated with every edge kept)."""

    @property
    def eval_chunk(self) -> int:
        """Configurations scored per batch."""

    def record(self, ds: GraphDataset, i: int) -> GraphRecord:
        """Graph ``i`` of ``ds`` as the model reads it."""

    def plan(self, rec: GraphRecord) -> GraphPlan:
        """The plan (segments, signatures, regions) of a record."""


def _local(trainer: Predictor, ds: GraphDataset, comm: Comm | None) -> Iterator[tuple[int, GraphRecord, np.ndarray]]:
    trainer.model.eval()
    rank, world = (0, 1) if comm is None else (comm.rank, comm.world)
    for i in range(rank, len(ds), world):
        rec = trainer.record(ds, i)
        yield i, rec, predict_graph(trainer.model, trainer.plan(rec), trainer.whole_graph, trainer.eval_chunk)


def predictions(trainer: Predictor, ds: GraphDataset, comm: Comm | None = None) -> list[tuple[str, Any, np.ndarray]]:
    """``(name, truth, prediction)`` per graph in dataset order; truth = runtimes (ranking) or label (MalNet)."""
    rows = []
    for i, rec, pred in _local(trainer, ds, comm):
        truth: Any
        if trainer.task == "malnet":
            truth = None if rec.label is None else int(rec.label)
        else:
            truth = None if rec.runtime is None else np.asarray(rec.runtime, dtype=np.float64)
        rows.append((i, rec.name, truth, pred))
    if comm is not None:
        rows = [r for part in comm.gather(rows) for r in part]
    return [(name, truth, pred) for _, name, truth, pred in sorted(rows, key=lambda r: r[0])]


def evaluate(trainer: Predictor, ds: GraphDataset, comm: Comm | None = None) -> dict[str, float]:
    """Ranking metrics (opa, kendall, slowdown_top1/5/10) or classification metrics (accuracy, macro_f1)."""
    return metrics_of(trainer.task, predictions(trainer, ds, comm))


def metrics_of(task: str, rows: list[tuple[str, Any, np.ndarray]]) -> dict[str, float]:
    """The metrics of :func:`predictions` rows ``(name, truth, prediction)`` of a ``task``."""

    preds, trues = [], []
    for name, truth, pred in rows:
        if truth is None:
            what = "label" if task == "malnet" else "runtimes"
            raise InvalidOption(f"{name}: has no {what} to evaluate against")
        preds.append(int(np.argmax(pred)) if task == "malnet" else pred)
        trues.append(truth)
    if task == "malnet":
        return classification_metrics(np.asarray(preds), np.asarray(trues))
    return ranking_metrics(preds, trues)


def per_graph_opa(rows: list[tuple[str, Any, np.ndarray]]) -> dict[str, float]:
    """OPA of every graph of :func:`predictions` rows (ranking tasks), by name; NaN where a graph has no pair."""

    return {name: opa(pred, truth) for name, truth, pred in rows}


def _layout_block(model: CostModel, plan: GraphPlan, block: Any, c_all: int, chunk: int) -> torch.Tensor:
    """Units ``(C, unit_dim)`` of one block of segments summed, for every configuration of a layout graph.

    The block's distinct sub-configurations (signature rows, :meth:`GraphPlan.signature_rows`) are computed once:
    its configuration-free node states once for all of them, its configuration region ``chunk`` rows at a time.
    Without cross-configuration attention each row's units are summed per configuration directly (memory: rows x
    segments scalars); with it the rows' embeddings are kept and the units computed per chunk of configurations
    (the attention's context).
    """
    c_idx = np.arange(c_all)
    if block.region is None:  # no configurable node: one value for every configuration
        emb = model.block_embeddings(plan, block, c_idx[:1])
        return model.sum_units(emb).expand(c_all, -1)
    rep, rows = plan.signature_rows(block, c_idx)
    ids = torch.as_tensor(np.array(block.seg_ids, np.int64), device=model.device)
    inp = plan.block_inputs(block, rep, model.device)
    shared = model.shared_states(inp)
    affected = torch.from_numpy(block.region.final).to(model.device)
    parts = []
    for r0 in range(0, rep.shape[0], chunk):
        sub = inp.select(np.arange(r0, min(r0 + chunk, rep.shape[0])))
        if model.config.backbone == "gcn":  # dense: every node per configuration
            st = model.node_states(sub, None)
        else:
            st = NodeStates(shared[-1], model.config_states(sub, block.region, shared), affected, sub.num_configs)
        emb = model.pool(st, ids, block.num_segments)  # (rows, segments, d)
        parts.append(emb if model.cross is not None else model.units_per_segment(emb))
    per_row = torch.cat(parts)  # (R, segments, d or unit)
    cols = torch.arange(block.num_segments, device=model.device)[None, :]
    rows_t = torch.from_numpy(rows).to(model.device)
    if model.cross is None:
        return per_row[rows_t, cols].sum(1)
    out = torch.zeros(c_all, model.config.unit_dim, device=model.device)
    for c0 in range(0, c_all, chunk):
        c = slice(c0, min(c0 + chunk, c_all))
        out[c] = model.sum_units(per_row[rows_t[c], cols])
    return out


@torch.no_grad()
def predict_graph(model: CostModel, plan: GraphPlan, whole_graph: bool = False, chunk: int = 256) -> np.ndarray:
    """Scores of every config (or class logits), every segment fresh, ``chunk`` configs at a time.

    GST models compute segments in blocks of whole segments (edges
    between segments dropped, so the same as one segment at a time); full models the whole graph. Each block's
    configuration-independent states are computed once for all configurations, the configuration region once per
    configuration.
    """
    rec = plan.rec
    layout = model.config.task == "layout"
    c_all = rec.num_configs if model.config.task != "malnet" else 1
    total = torch.zeros(c_all, model.config.unit_dim, device=model.device)
    chunks = [np.arange(c, min(c + chunk, c_all)) for c in range(0, c_all, chunk)]
    gcfs = [model.graph_config(plan, c) for c in chunks]
    for block in [] if whole_graph else plan.blocks():
        if layout:
            total += _layout_block(model, plan, block, c_all, chunk)
            continue
        emb = model.block_embeddings(plan, block, np.zeros(1, np.int64))  # tile, MalNet: config-free
        if model.aggregate_mean:
            total += emb.sum(1)
            continue
        for c, gcf in zip(chunks, gcfs, strict=True):
            total[c] += model.sum_units(emb, gcf)
    for block in [plan.whole()] if whole_graph else []:
        inp = plan.block_inputs(block, np.arange(c_all) if layout else np.zeros(1, np.int64), model.device)
        ids = torch.as_tensor(np.array(block.seg_ids, np.int64), device=model.device)
        shared = model.shared_states(inp)
        free = NodeStates(shared[-1])
        if not (layout and model.has_config(inp) and block.region is not None and model.config.backbone != "gcn"):
            if layout and model.has_config(inp):  # GCN: dense, chunk by chunk
                for c, gcf in zip(chunks, gcfs, strict=True):
                    st = model.node_states(inp.select(c), None)
                    total[c] += model.sum_units(model.pool(st, ids, block.num_segments), gcf)
                continue
            emb = model.pool(free, ids, block.num_segments)
            if model.aggregate_mean:
                total += emb.sum(1)
                continue
            for c, gcf in zip(chunks, gcfs, strict=True):
                total[c] += model.sum_units(emb, gcf)
            continue
        affected = torch.from_numpy(block.region.final).to(model.device)
        for c, gcf in zip(chunks, gcfs, strict=True):
            sub = inp.select(c)
            st = NodeStates(shared[-1], model.config_states(sub, block.region, shared), affected, len(c))
            total[c] += model.sum_units(model.pool(st, ids, block.num_segments), gcf)
    if model.aggregate_mean:
        return model.readout(total / plan.num_segments)[0].cpu().numpy()
    scores = [model.readout(total[c], gcf) for c, gcf in zip(chunks, gcfs, strict=True)]
    return torch.cat(scores).cpu().numpy().astype(np.float64)
