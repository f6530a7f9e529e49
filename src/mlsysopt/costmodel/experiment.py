"""The cost-model training entry point the CLI, the demo and the benchmark share, and one-step memory experiments.

:func:`train` checks its run folder (:class:`mlsysopt.io.RunDir`) and validates every input first (it reads every
graph once), and only then opens the folder, so a refused input leaves no folder and no file. It checkpoints after
every epoch (and when ``timeout`` runs out), and continues with ``resume=True``: ``epochs`` and ``finetune_epochs``
are totals (see :mod:`mlsysopt.costmodel.trainer`), and only they, the time budget and where it runs (workers,
backend, address) may change. ``mode="trees" | "lightgbm" | "xgboost"`` trains a tree baseline instead (one
shot, no checkpoint; :mod:`mlsysopt.costmodel.baselines`). ``data`` is a TpuGraphs or MalNet root, a runtime table
(:mod:`mlsysopt.costmodel.data.table`) or ``real:cpu`` (the shipped real collection).
With ``workers > 1`` the training runs data-parallel (see :mod:`mlsysopt.costmodel.distributed`). Evaluation and
prediction are in :mod:`mlsysopt.costmodel.inference`, synthetic data in :mod:`mlsysopt.costmodel.synthesis`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mlsysopt.costmodel.baselines import tree_model
from mlsysopt.costmodel.checkpoint import CHECKPOINT_NAME
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.real import resolve_data
from mlsysopt.costmodel.data.record import warn_if_unrankable
from mlsysopt.costmodel.distributed import Comm, check_workers
from mlsysopt.costmodel.limits import check_train
from mlsysopt.costmodel.train_config import AUTO_SEGMENT_CAP, TREE_MODES, TrainConfig
from mlsysopt.errors import InvalidDataFile, InvalidOption, InvalidRunDir, MissingSplit, MlsysoptError
from mlsysopt.io import RunDir, read_json, write_atomic
from mlsysopt.runtime import ExecutorLost, run_data_parallel
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.store.records import costmodel_trial, record
from mlsysopt.store.run import RunStore

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset
    from mlsysopt.costmodel.distributed import Comm
    from mlsysopt.costmodel.trainer import Progress, Trainer

#: Settings that may change when a training run is resumed (everything else must match the first start).
RESUMABLE: tuple[str, ...] = ("epochs", "finetune_epochs", "timeout", "workers", "backend", "address", "validate_every")
#: The training options recorded in settings.json (and compared on resume), in the order they are written.
SETTINGS: tuple[str, ...] = ("mode", "segment_size", "segmenter", "k", "memory_budget_mb", "sed_p", "sed_policy",
                             "sed_tau", "history_key", "refresh", "refresh_segments", "sample", "epochs",
                             "finetune_epochs", "lr", "loss", "configs_per_graph", "graphs_per_step",
                             "validate_every", "valid_configs", "prune_hops", "keep_best", "device",
                             "seed", "rounds")  # fmt: skip
MODEL_SETTINGS: tuple[str, ...] = ("backbone", "hidden", "layers", "readout", "deviation", "cross_config_heads")
PLOTS: tuple[str, ...] = ("training.png", "memory.png")


def train_settings(data: str | Path, config: TrainConfig, model: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The settings a training run records and compares on resume."""
    values = config.to_dict() | model
    values["rounds"] = config.boosting_rounds if config.mode in TREE_MODES else None  # what a tree mode trains
    return {"data": str(data)} | {k: values[k] for k in (*SETTINGS, *MODEL_SETTINGS)} | run


def train(
    data: str | Path,
    out: str | Path | None = None,
    config: TrainConfig | None = None,
    *,
    backbone: str = "sage",
    hidden: int = 64,
    layers: int = 3,
    readout: str = "auto",
    deviation: bool | None = None,
    cross_config_heads: int = 0,
    resume: bool = False,
    threads: int = 1,
    timeout: float | None = None,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train on ``data``'s train split (validated on valid, tested on test when present).

    With ``out``, a run folder: ``checkpoint.pt`` (every epoch), ``settings.json``, ``result.json``,
    ``training.png`` and ``memory.png`` (``trees.txt`` and ``trees.json`` for the trees baseline); ``resume``
    continues its checkpoint exactly. Returns the result dict (settings, history, valid and test metrics, peak
    step memory in MB, wall seconds, ``stopped`` when the time budget ran out).

    Args:
        data: a TpuGraphs or MalNet data root (see :func:`~mlsysopt.costmodel.data.load_dataset`).
        config: every training option (default :class:`TrainConfig`); validated before anything is written.
        backbone, hidden, layers, readout, deviation, cross_config_heads: the model (``auto`` readout: scalar for
            layout and tile, embedding for MalNet; ``deviation`` None: on for layout, where it lifts held-out OPA
            on the synthetic benchmark data by ~0.1; ``cross_config_heads`` > 0: cross-configuration attention);
            other sizes follow from the data's task.
        threads: PyTorch CPU threads while training (per worker).
        timeout: wall-clock seconds; the run stops, checkpointed, when they are spent (``resume`` continues).
        workers, backend, address: data-parallel ranks, ``local`` processes or ``ray`` actors (at ``address``).
        progress: ``progress(done_steps, total_steps, info)`` after every optimizer step (one process only).
        log: receives one line describing the run once the inputs are validated.
    """

    tc = config if config is not None else TrainConfig()
    tc.validate()
    if timeout is not None and not (0 < timeout < float("inf")):
        raise InvalidOption(f"--timeout must be a positive number of seconds, got {timeout}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidOption(f"--workers must be an integer >= 1, got {workers!r}")
    check_train(
        hidden,
        layers,
        tc.segment_size if tc.segment_size != "auto" else AUTO_SEGMENT_CAP,
        tc.configs_per_graph,
        tc.graphs_per_step,
        tc.k if tc.k != "auto" else 1,
    )
    if workers > 1:
        check_workers(workers, tc.graphs_per_step)
    run_opts = {"timeout": timeout, "workers": workers, "backend": backend, "address": address}
    trees = tc.mode in TREE_MODES
    if trees and (resume or workers > 1):
        raise InvalidOption(f"--mode {tc.mode} trains in one shot in one process: no --resume, no --workers")
    train_ds, valid_ds, test_ds = _splits(data)
    warn_if_unrankable(train_ds)
    model = _model_options(train_ds.task, backbone, hidden, layers, readout, deviation, cross_config_heads)
    settings = train_settings(data, tc, model, run_opts)
    checkpoint = None if trees else CHECKPOINT_NAME
    run = _run_folder(out, settings, resume=resume, resumable=RESUMABLE, checkpoint=checkpoint)
    if trees:
        return _train_trees(data, run, settings, tc, train_ds, valid_ds, test_ds, threads, log)
    trainer = _trainer(train_ds, tc, model)
    for ds in (valid_ds, test_ds):  # read and check every held-out graph before anything is written
        for i in range(len(ds) if ds is not None else 0):
            trainer.record(ds, i)
    if log is not None:
        where = f" on {workers} {backend} workers" if workers > 1 else ""
        log(f"{tc.mode} on {data} ({train_ds.task}, {len(train_ds)} training graphs){where}")
    payload = {"data": str(data), "train": tc.to_dict(), "model": model, "settings": settings,
               "ckpt": None if run is None else str(run.checkpoint), "resume": resume, "timeout": timeout,
               "threads": threads}  # fmt: skip
    with run if run is not None else contextlib.nullcontext():
        if workers > 1:
            result = _data_parallel(payload, workers, backend, address, run)
        else:
            with torch_threads(threads):
                result = fit_run(None, trainer=trainer, datasets=(train_ds, valid_ds, test_ds), run=run,
                                 progress=progress, **payload)  # fmt: skip
        if run is not None:
            # the training as a trial of the run's study, each epoch's validation metric an intermediate value
            record(costmodel_trial(settings, result["history"], result["stopped"] is None, result), "maximize", True)
            _write_train_outputs(run, settings, result)
    return result


def _model_options(task: str, backbone: str, hidden: int, layers: int, readout: str, deviation: bool | None,
                   cross_config_heads: int = 0) -> dict[str, Any]:  # fmt: skip
    if readout == "auto":
        readout = "embedding" if task == "malnet" else "scalar"
    return {"backbone": backbone, "hidden": hidden, "layers": layers, "readout": readout,
            "deviation": task == "layout" if deviation is None else bool(deviation),
            "cross_config_heads": int(cross_config_heads)}  # fmt: skip


def _trainer(train_ds: GraphDataset, tc: TrainConfig, model: dict[str, Any]) -> Trainer:
    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.model import ModelConfig

    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.trainer import Trainer

    extra: dict[str, Any] = {"num_classes": len(train_ds.classes)} if train_ds.task == "malnet" else {}
    if model["deviation"] and train_ds.task != "layout":
        raise InvalidOption("--deviation describes layout configurations: it is for layout graphs only")
    trainer = Trainer(ModelConfig.for_task(train_ds.task, **model, **extra), tc)
    trainer.prepare(train_ds)  # reads and checks every training graph; a resumed run restores its own statistics
    return trainer


def fit_run(comm: Comm | None = None, *, trainer: Trainer | None = None, datasets: tuple | None = None,
            run: RunDir | None = None, progress: Progress | None = None, **payload: Any) -> dict[str, Any]:  # fmt: skip
    """Fit, then test: the body of :func:`train` in one process or in every data-parallel rank.

    ``payload`` is what a rank needs to rebuild the run on its own: data path, train and model options,
    settings, checkpoint path, resume flag, timeout.
    """
    tc = TrainConfig.from_dict(payload["train"])
    if datasets is None:
        datasets = _splits(payload["data"])
    train_ds, valid_ds, test_ds = datasets
    if trainer is None:
        trainer = _trainer(train_ds, tc, payload["model"])
    where: Any = run if run is not None else payload.get("ckpt")
    t0 = time.perf_counter()
    history = trainer.fit(train_ds, valid_ds, run_dir=where, resume=payload["resume"], progress=progress,
                          timeout=payload.get("timeout"), comm=comm)  # fmt: skip
    wall = time.perf_counter() - t0
    test, test_s, per_graph = None, 0.0, None
    if test_ds is not None and not trainer.stopped:
        # deferred: imports pandas, psutil, pyarrow, torch_geometric
        from mlsysopt.costmodel.evaluation import metrics_of, per_graph_opa, predictions

        t_ev = time.perf_counter()
        rows = predictions(trainer, test_ds, comm)
        test = metrics_of(trainer.task, rows)
        per_graph = per_graph_opa(rows) if trainer.task != "malnet" else None
        test_s = time.perf_counter() - t_ev
    label = data_label(payload["data"], train_ds)
    result = _train_result(payload["settings"], trainer, history, test, wall, label, plots=where is not None)
    result["runtime_unit"] = runtime_unit(payload["data"])
    return result | _slots(train_ds) | {"test_eval_s": test_s, "test_opa_per_graph": per_graph}


def _slots(ds: GraphDataset) -> dict[str, Any]:
    """A runtime table's knob slots (what ``predict --configs`` maps a grid's knobs onto), else nothing."""
    slots = getattr(ds, "slots", None)
    return {"config_slots": dict(slots)} if slots else {}


def _data_parallel(payload: dict[str, Any], workers: int, backend: str, address: str | None,
                   run: RunDir | None) -> dict[str, Any]:  # fmt: skip

    try:
        results = run_data_parallel(train_rank, workers, {"fit": payload, "threads": payload["threads"]},
                                    backend=backend, address=address)  # fmt: skip
    except ExecutorLost as exc:
        kept = run is not None and run.has_checkpoint
        what = f"the checkpoint {run.checkpoint} is kept: --resume continues" if kept else "no checkpoint yet"
        raise MlsysoptError(f"data-parallel training stopped: {exc}; {what}") from None
    return results[0]


def train_rank(rank: int, world: int, payload: dict[str, Any]) -> dict[str, Any] | None:
    """One data-parallel rank of :func:`train` (rank 0 returns the result); see :mod:`.distributed`."""

    torch.set_num_threads(max(1, int(payload.get("threads", 1))))
    result = fit_run(comm=Comm(), **payload["fit"])
    return result if rank == 0 else None


def _collection(data: str | Path) -> dict[str, Any]:
    """The ``collection.json`` of a ``costmodel collect`` data root (or of a split folder's root), else {}."""

    try:
        root = resolve_data(data)
    except MlsysoptError:
        root = Path(data)
    for folder in (root, root.parent):
        manifest = folder / "collection.json"
        if manifest.is_file():
            with contextlib.suppress(MlsysoptError):
                found = read_json(manifest, InvalidDataFile)
                if isinstance(found, dict):
                    return found
    return {}


def data_label(data: str | Path, ds: GraphDataset) -> str:
    """What the data is: a collection's own words (``collection.json``: *real, measured on <machine>*),
    SYNTHETIC when its graph names say so, else "as given"."""
    label = _collection(data).get("data")
    if isinstance(label, str):
        return label
    if any("synthetic" in name.lower() for name in ds.names):
        return "SYNTHETIC"
    return "as given (file names do not mark it synthetic)"


def runtime_unit(data: str | Path) -> str | None:
    """The unit of the runtimes of ``data`` when it says (a collection: ``ns``), else None."""
    units = _collection(data).get("units", {})
    text = units.get("config_runtime") if isinstance(units, dict) else None
    return str(text).split()[0] if text else None


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


def _train_result(settings: dict[str, Any], trainer: Any, history: list[dict[str, Any]], test: dict | None,
                  wall: float, label: str, plots: bool) -> dict[str, Any]:  # fmt: skip
    last = history[-1] if history else {}
    return {
        "command": "costmodel train",
        "data": label,
        "task": trainer.task,
        "settings": settings,
        "model_config": trainer.mc.to_dict() if hasattr(trainer, "mc") else None,
        "train_config": trainer.tc.to_dict() if hasattr(trainer, "tc") else None,
        "k": getattr(trainer, "k", None),
        "segment_size": getattr(trainer, "segment_size", None),
        "prune_hops": getattr(trainer, "prune_hops", None),
        "k_probe": getattr(trainer, "probe", None),
        "best": {k: v for k, v in trainer.best.items() if k != "model"} if getattr(trainer, "best", None) else None,
        "history": history,
        "valid": {k[6:]: v for k, v in last.items() if k.startswith("valid_")},
        "test": test,
        "stopped": "timeout" if getattr(trainer, "stopped", False) else None,
        "stopped_by": "timeout" if getattr(trainer, "stopped", False) else "epochs",  # as every search says it
        "peak_step_mb": max((h.get("peak_step_mb", 0.0) for h in history), default=0.0),
        "table_mb": trainer.table.nbytes / 2**20 if hasattr(trainer, "table") else 0.0,
        "train_s": sum(h.get("epoch_s", 0.0) for h in history) + getattr(trainer, "refresh_s", 0.0),
        "eval_s": sum(h.get("eval_s", 0.0) for h in history),
        "wall_s": wall,
        "plots": list(PLOTS) if plots else [],
    }


def _train_trees(data: str | Path, run: RunDir | None, settings: dict[str, Any], tc: TrainConfig,
                 train_ds: GraphDataset, valid_ds: GraphDataset | None, test_ds: GraphDataset | None,
                 threads: int, log: Callable[[str], None] | None) -> dict[str, Any]:  # fmt: skip

    model = tree_model(tc.mode, train_ds.task, seed=tc.seed, rounds=tc.boosting_rounds, threads=threads)
    # every graph read and checked once, before the folder is made: the training rows, the held-out graphs' features
    t0 = time.perf_counter()
    rows, valid, test_graphs = model.rows(train_ds), model.graphs(valid_ds), model.graphs(test_ds)
    if log is not None:
        log(
            f"{tc.mode} ({model.description.split(' on ')[0]}) on {data} ({train_ds.task}, {len(train_ds)} training "
            "graphs)"
        )
    with run if run is not None else contextlib.nullcontext():
        history = model.fit_rows(rows, valid, t0)
        test, per_graph = model.evaluate_graphs(test_graphs) if test_ds is not None else (None, None)
        label = data_label(data, train_ds)
        result = _train_result(settings, model, history, test, time.perf_counter() - t0, label, plots=False)
        result["test_opa_per_graph"] = per_graph
        result["model"] = model.description
        result |= _slots(train_ds)
        if run is not None:
            record(costmodel_trial(settings, history, True, result), "maximize", True)  # a tree baseline's trial too
            model.save(run.path, lambda name, text: write_atomic(run.file(name), text))
            run.write_json("result.json", result)
    return result


def _write_train_outputs(run: RunDir, settings: dict[str, Any], result: dict[str, Any]) -> None:
    # deferred: imports PIL, matplotlib
    from mlsysopt.report.costmodel import plot_step_memory, plot_training

    label, history = settings["mode"], result["history"]
    plot_training({label: history}, run.file(PLOTS[0]), title=f"{label} on {settings['data']}")
    plot_step_memory({label: history}, run.file(PLOTS[1]), title=f"{label}: peak tensor memory per training step")
    run.write_json("result.json", result)


def _run_folder(out: str | Path | None, settings: dict[str, Any], **kw: Any) -> RunDir | None:
    """The checked run folder of ``out`` (None without one); a one-shot job never writes into a training run."""
    if out is None:
        if kw.get("resume"):
            raise InvalidOption("resume needs the run folder to continue (out)")
        return None
    kw.setdefault("checkpoint", None)
    if kw["checkpoint"] is None and (Path(out) / CHECKPOINT_NAME).exists():
        raise InvalidRunDir(f"--out {out} holds a training run ({CHECKPOINT_NAME}): choose another folder")
    return RunDir(out, settings, **kw, sink=RunStore).check()
