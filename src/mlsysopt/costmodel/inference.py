"""Evaluating and predicting with a trained cost model (a GNN run folder or the trees baseline's).

``evaluate`` and ``predict`` are one-shot: with ``out`` they write a run folder with ``result.json`` and
``settings.json`` (never into a training run's folder). Every segment is computed fresh (never the history table).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.costmodel.baselines import load_trees
from mlsysopt.costmodel.checkpoint import CHECKPOINT_NAME
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.grid import grid_dataset
from mlsysopt.costmodel.experiment import _run_folder
from mlsysopt.costmodel.trees import META_NAME
from mlsysopt.errors import InvalidCheckpoint, InvalidOption, MissingSplit
from mlsysopt.io import read_json
from mlsysopt.runtime.threads import torch_threads

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset
    from mlsysopt.costmodel.trainer import Trainer
    from mlsysopt.costmodel.trees import TreeRanker


def load_trainer(run: str | Path) -> Trainer | TreeRanker:
    """The trained model of a run folder (a GNN checkpoint, or the trees baseline), ready to evaluate or predict.

    Args:
        run: A training run folder (GNN checkpoint or tree baseline) or a checkpoint file.

    Returns:
        Trainer | TreeRanker: The trained model.

    Raises:
        InvalidCheckpoint: If there is no readable model.
    """
    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.trainer import Trainer

    run = Path(run)
    if run.is_dir() and (run / META_NAME).is_file():
        return load_trees(run)
    if not (run / CHECKPOINT_NAME).is_file() and not run.is_file():
        raise InvalidCheckpoint(f"--run {run}: no {CHECKPOINT_NAME} (train one with 'mlsysopt costmodel train')")
    return Trainer.load(run)


def evaluate(run: str | Path, data: str | Path, split: str = "test", out: str | Path | None = None,
             threads: int = 1) -> dict[str, Any]:  # fmt: skip
    """Metrics of the model in ``run`` on ``data`` (a data root's ``split``, a split folder or one file).

    Every segment is computed fresh (never the history table), on ``threads`` PyTorch threads. With ``out``, a run
    folder with ``result.json``.

    Args:
        run: The training run folder.
        data: A data root, a split folder or one graph file.
        split: Split read from a data root.
        out: Run folder to write ``result.json`` into (None: write nothing).
        threads: PyTorch threads.

    Returns:
        dict[str, Any]: ``command``, ``split`` and ``metrics`` (ranking or classification metrics).

    Raises:
        InvalidCheckpoint: If the run has no readable model.
        MissingSplit: If the data or split is missing.
        InvalidOption: If the data's task is not the model's.
    """

    folder = _run_folder(out, {"run": str(run), "data": str(data), "split": split})
    trainer = load_trainer(run)
    ds = _dataset_for(trainer, data, split, "--data")
    with folder if folder is not None else contextlib.nullcontext(), torch_threads(threads):
        result = {"command": "costmodel evaluate", "split": split, "metrics": trainer.evaluate(ds)}
        if folder is not None:
            folder.write_json("result.json", result)
    return result


def predict(run: str | Path, inputs: str | Path, split: str = "test", out: str | Path | None = None,
            threads: int = 1, configs: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Per graph of ``inputs``: configurations ranked fastest first (TpuGraphs) or class probabilities (MalNet).

    ``inputs`` is a data root (its ``split``), a split folder, or one ``.npz`` / ``.edgelist`` file; with
    ``configs``, one model file whose configurations the grid lists, no runtimes needed
    (:mod:`~mlsysopt.costmodel.data.grid`). With ``out``, a run folder with ``result.json``. Returns
    ``{"task", "graphs": {name: row}}``.

    Args:
        run: The training run folder.
        inputs: A data root, a split folder or one ``.npz`` / ``.edgelist`` file; with ``configs``, a model file
            (``.onnx``, ``.npz``, ``.py``).
        split: Split read from a data root.
        out: Run folder to write ``result.json`` into (None: write nothing).
        threads: PyTorch threads.
        configs: A CSV of configurations (knob columns of the run's training table) to rank for the model
            ``inputs`` (None: the configurations are in ``inputs``).

    Returns:
        dict[str, Any]: ``command``, ``task`` and ``graphs``: per graph ``scores`` and ``ranking`` (fastest first),
        or ``probabilities`` and ``class`` (MalNet).

    Raises:
        InvalidCheckpoint: If the run has no readable model.
        MissingSplit: If the inputs or split are missing.
        InvalidOption: If the inputs' task is not the model's.
    """

    trainer = load_trainer(run)
    ds = _dataset_for(trainer, inputs, split, "--input") if configs is None else _grid_for(trainer, run, inputs,
                                                                                          configs)  # fmt: skip
    folder = _run_folder(out, {"run": str(run), "input": str(inputs), "split": split}
                         | ({"configs": str(configs)} if configs is not None else {}))  # fmt: skip
    with folder if folder is not None else contextlib.nullcontext(), torch_threads(threads):
        rows: dict[str, Any] = {}
        for name, pred in trainer.predict(ds).items():
            if trainer.task == "malnet":
                p = np.exp(pred - pred.max())
                rows[name] = {"probabilities": (p / p.sum()).tolist(), "class": int(np.argmax(pred))}
            else:
                rows[name] = {"scores": pred.tolist(), "ranking": ranking_of(pred)}
        result = {"command": "costmodel predict", "task": trainer.task, "graphs": rows}
        if folder is not None:
            folder.write_json("result.json", result)
    return result


def ranking_of(pred: Any) -> list[int]:
    """Configuration indices from predicted fastest to slowest (lower score = faster).

    Args:
        pred: Predicted scores, one per configuration (lower = faster).

    Returns:
        list[int]: Configuration indices, fastest first (ties in index order).

    Shapes:
        pred: (num_configs,) float
    """
    return [int(i) for i in np.argsort(np.asarray(pred), kind="stable")]


def _grid_for(trainer: Trainer | TreeRanker, run: str | Path, model: str | Path, grid: str | Path) -> GraphDataset:
    """The grid's configurations on ``model``, each knob in the slot the run's training table gave it."""
    folder = Path(run) if Path(run).is_dir() else Path(run).parent
    trained = read_json(folder / "result.json", InvalidCheckpoint) if (folder / "result.json").is_file() else {}
    slots = trained.get("config_slots")
    if trainer.task != "layout" or not slots:
        raise InvalidOption(f"--configs: the model of --run {run} was not trained on a runtime table (its "
                            "result.json names no knobs), so it cannot read a grid of knobs; rank a data root or "
                            "a .npz with --input alone")  # fmt: skip
    return grid_dataset(model, grid, {str(k): int(v) for k, v in slots.items()})


def _dataset_for(trainer: Trainer | TreeRanker, path: str | Path, split: str, option: str) -> GraphDataset:
    try:
        ds = load_dataset(path, split)
    except MissingSplit as exc:
        where = f"{exc}" if not Path(path).exists() else f"{path}: no graphs in split '{split}' ({exc})"
        raise MissingSplit(f"{option} {where}") from None
    if ds.task != trainer.task:
        raise InvalidOption(f"{option} {path}: {ds.task} graphs, but the model is for {trainer.task}")
    return ds
