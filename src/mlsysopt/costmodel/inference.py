"""Evaluating and predicting with a trained cost model (a GNN run folder or the trees baseline's).

``evaluate`` and ``predict`` are one-shot: with ``out`` they write a run folder with ``result.json`` and
``settings.json`` (never into a training run's folder). Every segment is computed fresh (never the history table).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.costmodel.baselines import load_trees
from mlsysopt.costmodel.checkpoint import CHECKPOINT_NAME
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.grid import grid_dataset
from mlsysopt.costmodel.experiment import _run_folder
from mlsysopt.costmodel.metrics import opa, ranking_metrics
from mlsysopt.costmodel.rank_ensemble import (
    ENSEMBLE_NAME,
    MAX_MEMBERS,
    RankEnsemble,
    check_weights,
    choose_weights,
    combine,
    runtimes_by_name,
)
from mlsysopt.costmodel.trees import META_NAME
from mlsysopt.errors import InvalidCheckpoint, InvalidOption, MissingSplit
from mlsysopt.io import read_json
from mlsysopt.runtime.threads import torch_threads

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset
    from mlsysopt.costmodel.trainer import Trainer
    from mlsysopt.costmodel.trees import TreeRanker


def load_trainer(run: str | Path, option: str = "--run") -> Trainer | TreeRanker | RankEnsemble:
    """The trained model of a run folder (a GNN checkpoint, the trees baseline or a rank ensemble), ready to
    evaluate or predict.

    Args:
        run: A training run folder (GNN checkpoint or tree baseline), an ensemble's folder or a checkpoint file.
        option: The option that named ``run``, for the error.

    Returns:
        Trainer | TreeRanker | RankEnsemble: The trained model.

    Raises:
        InvalidCheckpoint: If there is no readable model.
    """
    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.trainer import Trainer

    run = Path(run)
    if run.is_dir() and (run / META_NAME).is_file():
        return load_trees(run)
    if run.is_dir() and (run / ENSEMBLE_NAME).is_file():
        return RankEnsemble.from_folder(run, lambda member: load_trainer(member, "member"))
    if not (run / CHECKPOINT_NAME).is_file() and not run.is_file():
        raise InvalidCheckpoint(f"{option} {run}: no {CHECKPOINT_NAME} (train one with 'mlsysopt costmodel train')")
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


def ensemble(members: Sequence[str | Path], data: str | Path, out: str | Path | None = None,
             weights: Sequence[float] | None = None, threads: int = 1) -> dict[str, Any]:  # fmt: skip
    """A rank ensemble of trained runs (:mod:`~mlsysopt.costmodel.rank_ensemble`), its weights chosen on ``data``'s
    validation split, then every member and the ensemble scored on its test split (where there is one).

    With ``out``, a run folder with ``ensemble.json`` (what ``evaluate``/``predict --run`` read back),
    ``result.json`` and, for two members, ``weights.png`` (validation OPA and top-1 slowdown per weight).

    Args:
        members: 2 to 4 training run folders of one ranking task (any modes: GST+EFD, full, trees, LightGBM, ...).
        data: The data root the members were trained on (its ``valid`` split chooses the weights).
        out: Run folder to write (None: write nothing).
        weights: Fixed weights, one per member (None: chosen on validation).
        threads: PyTorch threads.

    Returns:
        dict[str, Any]: ``mode``, ``members`` (run, mode, valid and test metrics), ``weights``, ``chosen_on``,
        ``valid_grid``, ``valid``, ``test`` and ``test_opa_per_graph`` (the ensemble's), ``config_slots``.

    Raises:
        InvalidOption: For a wrong member count, a member named twice, mixed tasks or bad weights.
        InvalidCheckpoint: If a member has no readable model.
        MissingSplit: If ``data`` has no validation split and no ``weights`` are given.
    """
    if not 2 <= len(members) <= MAX_MEMBERS:
        raise InvalidOption(f"--member: an ensemble has 2 to {MAX_MEMBERS} members, not {len(members)}")
    runs = [str(Path(m).resolve()) for m in members]
    if len(set(runs)) < len(runs):
        raise InvalidOption(f"--member: a run is named twice ({', '.join(map(str, members))})")
    loaded = [load_trainer(m, "--member") for m in members]
    modes = [str(getattr(t, "mode", None) or t.tc.mode) for t in loaded]
    if weights is not None:
        weights = check_weights(weights, len(members))
    model = RankEnsemble(loaded, weights or [1.0] * len(members), runs, modes)
    slots = _member_slots(members)
    splits = {split: _optional_split(model, data, split) for split in ("valid", "test")}
    if weights is None and splits["valid"] is None:
        raise MissingSplit(f"--data {data}: no 'valid' split to choose the weights on (or give --weights)")
    settings = {"members": runs, "data": str(data), "weights": None if weights is None else list(weights)}
    folder = _run_folder(out, settings)
    with folder if folder is not None else contextlib.nullcontext(), torch_threads(threads):
        preds = {split: [m.predict(ds) for m in loaded] for split, ds in splits.items() if ds is not None}
        truths = {split: runtimes_by_name(ds) for split, ds in splits.items() if ds is not None}
        grid: list[dict[str, Any]] = []
        if weights is None:
            weights, grid = choose_weights(preds["valid"], truths["valid"])
        model.weights = tuple(weights)
        result: dict[str, Any] = {"command": "costmodel ensemble", "mode": model.mode, "task": model.task,
                                  "weights": list(model.weights), "chosen_on": "valid" if grid else "given",
                                  "valid_grid": grid, "members": [], "config_slots": slots}  # fmt: skip
        for i, (run, mode) in enumerate(zip(runs, modes, strict=True)):
            result["members"].append({"run": run, "mode": mode} | {split: _scored([preds[split][i]], [1.0],
                                      truths[split])[0] for split in preds})  # fmt: skip
        for split in ("valid", "test"):
            scored = _scored(preds[split], model.weights, truths[split]) if split in preds else (None, {})
            result[split] = scored[0]
            if split == "test":
                result["test_opa_per_graph"] = scored[1]
        if folder is not None:
            folder.write_json(ENSEMBLE_NAME, model.description())
            folder.write_json("result.json", result)
            if grid and len(members) == 2:
                from mlsysopt.report.costmodel import plot_ensemble_weights  # deferred: imports matplotlib

                plot_ensemble_weights(grid, model.weights, modes, folder.path / "weights.png")
    return result


def _optional_split(model: RankEnsemble, data: str | Path, split: str) -> GraphDataset | None:
    try:
        return _dataset_for(model, data, split, "--data")
    except MissingSplit:
        return None


def _scored(member_preds: list[dict[str, np.ndarray]], weights: Sequence[float], truths: dict[str, np.ndarray]
            ) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    """Ranking metrics and per-graph OPA of the weighted combination of ``member_preds``."""
    names = [n for n in truths if all(n in p for p in member_preds)]
    preds = {n: combine([p[n] for p in member_preds], weights) for n in names}
    metrics = ranking_metrics([preds[n] for n in names], [truths[n] for n in names])
    return metrics, {n: opa(preds[n], truths[n]) for n in names}


def _member_slots(members: Sequence[str | Path]) -> dict[str, int] | None:
    """The knob slots every member was trained with (runs on a runtime table), or None; refused if they differ."""
    found = []
    for m in members:
        res = Path(m) / "result.json"
        found.append((read_json(res, InvalidCheckpoint) if res.is_file() else {}).get("config_slots"))
    if all(s is None for s in found):
        return None
    if any(s != found[0] for s in found):
        raise InvalidOption("--member: the members were trained on different runtime tables (their knob slots "
                            "differ), so their scores rank different configurations")  # fmt: skip
    return found[0]
