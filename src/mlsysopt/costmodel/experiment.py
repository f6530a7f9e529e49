"""The cost-model entry points the CLI, the demo and the benchmark share: train, evaluate, predict, synth.

Each one checks its run folder (:class:`mlsysopt.io.RunDir`) and validates every input first (``train`` reads
every graph once), and only then opens the folder, so a refused input leaves no folder and no file. ``train``
checkpoints into the folder after every epoch and continues it with ``resume=True`` (only ``epochs`` and
``finetune_epochs`` may change); ``evaluate`` and ``predict`` are one-shot and write ``result.json``. Every
function also runs without a folder (``out=None``) and returns the same result dict, which is what the demo and
the benchmark use.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.costmodel.checkpoint import CHECKPOINT_NAME
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.train_config import TrainConfig
from mlsysopt.errors import InvalidCheckpoint, InvalidDataFile, InvalidOption, InvalidRunDir, MissingSplit
from mlsysopt.io import RunDir

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
    from mlsysopt.costmodel.trainer import Progress, Trainer

#: What ``synth`` writes: TpuGraphs layout or tile ``.npz`` splits, or MalNet edgelists with split files.
SYNTH_KINDS: tuple[str, ...] = ("layout", "tile", "malnet")
#: Settings that may change when a training run is resumed (everything else must match the first start).
RESUMABLE: tuple[str, ...] = ("epochs", "finetune_epochs")
#: The training options recorded in settings.json (and compared on resume), in the order they are written.
SETTINGS: tuple[str, ...] = ("mode", "segment_size", "segmenter", "k", "sed_p", "epochs", "finetune_epochs", "lr",
                             "loss", "backbone", "hidden", "layers", "configs_per_graph", "prune_hops", "device",
                             "seed")  # fmt: skip
PLOTS: tuple[str, ...] = ("training.png", "memory.png")


# ---------------------------------------------------------------------------- train
def train_settings(data: str | Path, config: TrainConfig, backbone: str, hidden: int, layers: int) -> dict[str, Any]:
    """The settings a training run records and compares on resume."""
    values = config.to_dict() | {"backbone": backbone, "hidden": hidden, "layers": layers}
    return {"data": str(data)} | {k: values[k] for k in SETTINGS}


def train(
    data: str | Path,
    out: str | Path | None = None,
    config: TrainConfig | None = None,
    *,
    backbone: str = "sage",
    hidden: int = 64,
    layers: int = 3,
    resume: bool = False,
    threads: int = 1,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train on ``data``'s train split (validated every epoch on valid, tested on test when present).

    With ``out``, a run folder: ``checkpoint.pt`` after every epoch, ``settings.json``, ``result.json``,
    ``training.png`` and ``memory.png``; ``resume`` continues its checkpoint exactly. Returns the result dict
    (settings, configs, per-epoch history, valid and test metrics, peak step memory in MB, wall seconds).

    Args:
        data: a TpuGraphs or MalNet data root (see :func:`~mlsysopt.costmodel.data.load_dataset`).
        config: every training option (default :class:`TrainConfig`); validated before anything is written.
        backbone, hidden, layers: the model (the other model sizes follow from the data's task).
        threads: PyTorch CPU threads while training.
        progress: ``progress(done_steps, total_steps, info)`` after every optimizer step.
        log: receives one line describing the run once the inputs are validated.
    """
    from mlsysopt.costmodel.model import ModelConfig
    from mlsysopt.costmodel.trainer import Trainer
    from mlsysopt.runtime.threads import torch_threads

    tc = config if config is not None else TrainConfig()
    settings = train_settings(data, tc, backbone, hidden, layers)
    run = _run_folder(out, settings, resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT_NAME)
    tc.validate()
    train_ds, valid_ds, test_ds = _splits(data)
    extra: dict[str, Any] = {"num_classes": len(train_ds.classes)} if train_ds.task == "malnet" else {}
    mc = ModelConfig.for_task(train_ds.task, backbone=backbone, hidden=hidden, layers=layers, **extra)
    trainer = Trainer(mc, tc)
    trainer.prepare(train_ds)  # reads and checks every training graph; a resumed run restores its own statistics
    for ds in (valid_ds, test_ds):
        for i in range(len(ds) if ds is not None else 0):
            trainer.record(ds, i)
    if log is not None:
        log(f"{tc.mode} on {data} ({train_ds.task}, {len(train_ds)} training graphs)")
    with run if run is not None else contextlib.nullcontext(), torch_threads(threads):
        t0 = time.perf_counter()
        history = trainer.fit(train_ds, valid_ds, run_dir=run, resume=resume, progress=progress)
        wall = time.perf_counter() - t0
        test = trainer.evaluate(test_ds) if test_ds is not None else None
        synthetic = any("synthetic" in name.lower() for name in train_ds.names)
        result = _train_result(settings, trainer, history, test, wall, synthetic, plots=run is not None)
        if run is not None:
            _write_train_outputs(run, settings, history, result)
    return result


def _splits(data: str | Path) -> tuple[GraphDataset, GraphDataset | None, GraphDataset | None]:
    """train (required), valid and test (optional) of a data root, all of one task."""
    try:
        train_ds = load_dataset(data, "train")
    except MissingSplit:
        raise InvalidDataFile(
            f"--data {data}: no training graphs (expected {data}/train/*.npz or split_info/train.txt)"
        ) from None
    held_out = []
    for split in ("valid", "test"):
        try:
            ds = load_dataset(data, split)
        except MissingSplit:
            ds = None
        if ds is not None and ds.task != train_ds.task:
            raise InvalidDataFile(f"--data {data}: split '{split}' holds {ds.task} graphs, 'train' {train_ds.task}")
        held_out.append(ds)
    return train_ds, held_out[0], held_out[1]


def _train_result(
    settings: dict[str, Any],
    trainer: Trainer,
    history: list[dict[str, Any]],
    test: dict[str, float] | None,
    wall: float,
    synthetic: bool,
    plots: bool,
) -> dict[str, Any]:
    last = history[-1] if history else {}
    return {
        "command": "costmodel train",
        "data": "SYNTHETIC" if synthetic else "as given (file names do not mark it synthetic)",
        "task": trainer.task,
        "settings": settings,
        "model_config": trainer.mc.to_dict(),
        "train_config": trainer.tc.to_dict(),
        "history": history,
        "valid": {k[6:]: v for k, v in last.items() if k.startswith("valid_")},
        "test": test,
        "peak_step_mb": max((h.get("peak_step_mb", 0.0) for h in history), default=0.0),
        "table_mb": trainer.table.nbytes / 2**20,
        "wall_s": wall,
        "plots": list(PLOTS) if plots else [],
    }


def _write_train_outputs(run: RunDir, settings: dict[str, Any], history: list, result: dict[str, Any]) -> None:
    from mlsysopt.report.costmodel import plot_step_memory, plot_training

    label = settings["mode"]
    plot_training({label: history}, run.file(PLOTS[0]), title=f"{label} on {settings['data']}")
    plot_step_memory({label: history}, run.file(PLOTS[1]), title=f"{label}: peak tensor memory per training step")
    run.write_json("result.json", result)


def one_step(record: GraphRecord, mode: str, segment_size: int, seed: int = 0) -> Trainer:
    """A trainer after ONE training step on ``record`` with all its configurations (memory experiments).

    ``trainer.history[0]["peak_step_mb"]`` is the step's peak tensor memory; the model has the task's defaults.
    """
    from mlsysopt.costmodel.data.record import InMemoryDataset
    from mlsysopt.costmodel.model import ModelConfig
    from mlsysopt.costmodel.trainer import Trainer

    tc = TrainConfig(mode=mode, segment_size=segment_size, epochs=1, finetune_epochs=0, seed=seed)
    tc.configs_per_graph = max(2, record.num_configs)
    trainer = Trainer(ModelConfig.for_task(record.task), tc)
    trainer.fit(InMemoryDataset([record]))
    return trainer


# ---------------------------------------------------------------------------- evaluate / predict
def load_trainer(run: str | Path) -> Trainer:
    """The trained model of a run folder (or of its checkpoint file), ready to evaluate or predict."""
    from mlsysopt.costmodel.trainer import Trainer

    run = Path(run)
    if not (run / CHECKPOINT_NAME).is_file() and not run.is_file():
        raise InvalidCheckpoint(f"--run {run}: no {CHECKPOINT_NAME} (train one with 'mlsysopt costmodel train')")
    return Trainer.load(run)


def evaluate(run: str | Path, data: str | Path, split: str = "test", out: str | Path | None = None) -> dict[str, Any]:
    """Metrics of the model in ``run`` on ``data`` (a data root's ``split``, a split folder or one file).

    Every segment is computed fresh (never the history table). With ``out``, a run folder with ``result.json``.
    """
    folder = _run_folder(out, {"run": str(run), "data": str(data), "split": split})
    trainer = load_trainer(run)
    ds = _dataset_for(trainer, data, split, "--data")
    with folder if folder is not None else contextlib.nullcontext():
        result = {"command": "costmodel evaluate", "split": split, "metrics": trainer.evaluate(ds)}
        if folder is not None:
            folder.write_json("result.json", result)
    return result


def predict(run: str | Path, inputs: str | Path, split: str = "test", out: str | Path | None = None) -> dict[str, Any]:
    """Per graph of ``inputs``: configurations ranked fastest first (TpuGraphs) or class probabilities (MalNet).

    ``inputs`` is a data root (its ``split``), a split folder, or one ``.npz`` / ``.edgelist`` file. With
    ``out``, a run folder with ``result.json``. Returns ``{"task", "graphs": {name: row}}``.
    """
    folder = _run_folder(out, {"run": str(run), "input": str(inputs), "split": split})
    trainer = load_trainer(run)
    ds = _dataset_for(trainer, inputs, split, "--input")
    with folder if folder is not None else contextlib.nullcontext():
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
    """Configuration indices from predicted fastest to slowest (lower score = faster)."""
    return [int(i) for i in np.argsort(np.asarray(pred), kind="stable")]


def _dataset_for(trainer: Trainer, path: str | Path, split: str, option: str) -> GraphDataset:
    try:
        ds = load_dataset(path, split)
    except MissingSplit as exc:
        where = f"{exc}" if not Path(path).exists() else f"{path}: no graphs in split '{split}' ({exc})"
        raise MissingSplit(f"{option} {where}") from None
    if ds.task != trainer.task:
        raise InvalidOption(f"{option} {path}: {ds.task} graphs, but the model is for {trainer.task}")
    return ds


def _run_folder(out: str | Path | None, settings: dict[str, Any], **kw: Any) -> RunDir | None:
    """The checked run folder of ``out`` (None without one); a one-shot job never writes into a training run."""
    if out is None:
        if kw.get("resume"):
            raise InvalidOption("resume needs the run folder to continue (out)")
        return None
    kw.setdefault("checkpoint", None)
    if kw["checkpoint"] is None and (Path(out) / CHECKPOINT_NAME).exists():
        raise InvalidRunDir(f"--out {out} holds a training run ({CHECKPOINT_NAME}): choose another folder")
    return RunDir(out, settings, **kw).check()


# ---------------------------------------------------------------------------- synthetic data
def synth(
    kind: str,
    out: str | Path,
    graphs: int | Mapping[str, int] = 20,
    nodes: int | tuple[int, int] = (1000, 5000),
    configs: int | tuple[int, int] = 64,
    seed: int = 0,
) -> dict[str, int]:
    """Write a SYNTHETIC data root in the published format of ``kind``; returns the graphs written per split.

    ``graphs``: a count or {split: count} for layout and tile; graphs per class for malnet (split 70/10/20).
    """
    from mlsysopt.costmodel.data import synth_layout, synth_malnet, synth_tile

    if kind not in SYNTH_KINDS:
        raise InvalidOption(f"unknown kind '{kind}' (choose from: {', '.join(SYNTH_KINDS)})")
    if kind == "malnet":
        if not isinstance(graphs, int):
            raise InvalidOption("--graphs for malnet is a count per class (splits are 70/10/20)")
        written: Mapping[str, list] = synth_malnet(out, graphs_per_class=graphs, nodes=nodes, seed=seed)
    else:
        make = synth_layout if kind == "layout" else synth_tile
        written = make(out, num_graphs=graphs, nodes=nodes, configs=configs, seed=seed)
    return {split: len(names) for split, names in written.items()}
