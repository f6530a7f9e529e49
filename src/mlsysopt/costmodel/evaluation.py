"""Evaluation of a trained cost model: every segment computed fresh (never the history table), fast.

Fast because each distinct sub-configuration of a segment is computed once (configuration signatures), only the
configuration region of a segment is computed per configuration (the rest once for all), and up to
``eval_chunk`` configurations run as one batch. With a data-parallel group the graphs are split over the ranks and
the predictions gathered, so every rank computes the same metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidOption

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
    from mlsysopt.costmodel.distributed import Comm
    from mlsysopt.costmodel.trainer import Trainer


def _local(trainer: Trainer, ds: GraphDataset, comm: Comm | None) -> Iterator[tuple[int, GraphRecord, np.ndarray]]:
    trainer.model.eval()
    rank, world = (0, 1) if comm is None else (comm.rank, comm.world)
    for i in range(rank, len(ds), world):
        rec = trainer.record(ds, i)
        pred = trainer.model.predict_graph(trainer.plan(rec), trainer.tc.mode == "full", trainer.tc.eval_chunk)
        yield i, rec, pred


def predictions(trainer: Trainer, ds: GraphDataset, comm: Comm | None = None) -> list[tuple[str, Any, np.ndarray]]:
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


def evaluate(trainer: Trainer, ds: GraphDataset, comm: Comm | None = None) -> dict[str, float]:
    """Ranking metrics (opa, kendall, slowdown_top1/5/10) or classification metrics (accuracy, macro_f1)."""
    return metrics_of(trainer.task, predictions(trainer, ds, comm))


def metrics_of(task: str, rows: list[tuple[str, Any, np.ndarray]]) -> dict[str, float]:
    """The metrics of :func:`predictions` rows ``(name, truth, prediction)`` of a ``task``."""
    from mlsysopt.costmodel.metrics import classification_metrics, ranking_metrics

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
    from mlsysopt.costmodel.metrics import opa

    return {name: opa(pred, truth) for name, truth, pred in rows}
