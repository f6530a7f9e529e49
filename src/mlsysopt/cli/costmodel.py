"""``mlsysopt costmodel ...``: synthetic data, GST+EFD training, evaluation and prediction of graph cost models."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import SeedOpt, console, err_console, progress_bar
from mlsysopt.cli.costmodel_io import (
    DataOpt,
    OutOpt,
    check_run_state,
    dataset_or_none,
    json_ready,
    parse_graphs,
    parse_range,
    ranking_of,
)
from mlsysopt.errors import InvalidOption, MlsysoptError

costmodel_app = typer.Typer(
    help="GST+EFD: learn config rankings (TpuGraphs) or graph classes (MalNet) on huge graphs in bounded memory.",
    no_args_is_help=True,
)

KINDS = ("layout", "tile", "malnet")
MODE_HELP = "full | gst | gst+e | gst+ef | gst+efd (E: history table, F: head finetune, D: stale embedding dropout)."


# ---------------------------------------------------------------------------- synth
@costmodel_app.command("synth")
def costmodel_synth(
    kind: Annotated[str, typer.Argument(help="layout | tile (TpuGraphs .npz) | malnet (edgelists + split files).")],
    out: Annotated[Path, typer.Option("--out", help="Data root to write.")],
    graphs: Annotated[
        str, typer.Option("--graphs", help="Graphs: N or train=N,valid=N,test=N (malnet: per class).")
    ] = "20",
    nodes: Annotated[str, typer.Option("--nodes", help="Nodes per graph: N or lo-hi (log-uniform).")] = "1000-5000",
    configs: Annotated[str, typer.Option("--configs", help="Configurations per graph: N or lo-hi.")] = "64",
    seed: SeedOpt = 0,
) -> None:
    """Write SYNTHETIC data in the exact public formats (the real TpuGraphs/MalNet cannot be downloaded here)."""
    if kind not in KINDS:
        raise InvalidOption(f"unknown kind '{kind}' (choose from: {', '.join(KINDS)})")
    n_nodes, n_cfg, n_graphs = parse_range(nodes, "--nodes"), parse_range(configs, "--configs"), parse_graphs(graphs)
    from mlsysopt.costmodel.data import synth_layout, synth_malnet, synth_tile

    t0 = time.perf_counter()
    with err_console.status(f"writing synthetic {kind} data to {escape(str(out))}"):
        if kind == "malnet":
            if not isinstance(n_graphs, int):
                raise InvalidOption("--graphs for malnet is a count per class (splits are 70/10/20)")
            written = synth_malnet(out, graphs_per_class=n_graphs, nodes=n_nodes, seed=seed)
        else:
            make = synth_layout if kind == "layout" else synth_tile
            written = make(out, num_graphs=n_graphs, nodes=n_nodes, configs=n_cfg, seed=seed)
    counts = {k: len(v) for k, v in written.items()} if isinstance(written, dict) else {"graphs": len(written)}
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    console.print(f"wrote SYNTHETIC {kind} data ({summary}) to {escape(str(out))} in {time.perf_counter() - t0:.1f} s")


# ---------------------------------------------------------------------------- train
@costmodel_app.command("train")
def costmodel_train(
    data: DataOpt,
    out: OutOpt,
    mode: Annotated[str, typer.Option("--mode", help=MODE_HELP)] = "gst+efd",
    segment_size: Annotated[int, typer.Option("--segment-size", help="Most nodes per segment.")] = 1000,
    segmenter: Annotated[
        str, typer.Option("--segmenter", help="auto (contiguous for TpuGraphs, METIS for MalNet) | contiguous | metis.")
    ] = "auto",
    k: Annotated[int, typer.Option("--k", help="Segments per graph that get gradients each step.")] = 1,
    sed_p: Annotated[float, typer.Option("--sed-p", help="Stale Embedding Dropout probability (gst+efd).")] = 0.5,
    epochs: Annotated[int, typer.Option("--epochs", help="Training epochs.")] = 10,
    finetune_epochs: Annotated[int, typer.Option("--finetune-epochs", help="Head-only epochs (F modes).")] = 10,
    lr: Annotated[float, typer.Option("--lr", help="Adam learning rate.")] = 1e-3,
    loss: Annotated[str, typer.Option("--loss", help="auto | hinge | listmle | mse | ce.")] = "auto",
    backbone: Annotated[str, typer.Option("--backbone", help="sage | gcn | gin.")] = "sage",
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden width.")] = 64,
    layers: Annotated[int, typer.Option("--layers", help="GNN layers.")] = 3,
    configs_per_graph: Annotated[int, typer.Option("--configs-per-graph", help="Configs sampled per step.")] = 32,
    prune_hops: Annotated[
        int | None, typer.Option("--prune-hops", help="Layout: keep configurable nodes + k-hop neighbours.")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu | cuda.")] = "cpu",
    threads: Annotated[
        int, typer.Option("--threads", min=1, help="PyTorch CPU threads (1 is fastest for small segments).")
    ] = 1,
    seed: SeedOpt = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue RUN_DIR/checkpoint.pt after a stop.")] = False,
) -> None:
    """Train a cost model; writes RUN_DIR/result.json, checkpoint.pt (every epoch), training.png, memory.png."""
    settings = {"data": str(data), "mode": mode, "segment_size": segment_size, "segmenter": segmenter, "k": k}
    settings |= {"sed_p": sed_p, "epochs": epochs, "finetune_epochs": finetune_epochs, "lr": lr, "loss": loss}
    settings |= {"backbone": backbone, "hidden": hidden, "layers": layers, "configs_per_graph": configs_per_graph}
    settings |= {"prune_hops": prune_hops, "device": device, "seed": seed}
    check_run_state(out, resume, settings)
    from mlsysopt.costmodel.model import ModelConfig
    from mlsysopt.costmodel.train import TrainConfig, Trainer

    tc = TrainConfig(mode=mode, segment_size=segment_size, segmenter=segmenter, k=k, sed_p=sed_p, epochs=epochs)
    tc.finetune_epochs, tc.lr, tc.loss, tc.configs_per_graph = finetune_epochs, lr, loss, configs_per_graph
    tc.prune_hops, tc.device, tc.seed = prune_hops, device, seed
    tc.validate()
    train_ds = dataset_or_none(data, "train")
    if train_ds is None or len(train_ds) == 0:
        raise MlsysoptError(f"--data {data}: no training graphs (expected {data}/train/*.npz or split_info/train.txt)")
    valid_ds, test_ds = dataset_or_none(data, "valid"), dataset_or_none(data, "test")
    extra: dict[str, Any] = {"num_classes": len(train_ds.classes)} if train_ds.task == "malnet" else {}
    mc = ModelConfig.for_task(train_ds.task, backbone=backbone, hidden=hidden, layers=layers, **extra)
    from mlsysopt.io import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "settings.json", settings)
    trainer = Trainer(mc, tc)
    err_console.print(f"{mode} on {escape(str(data))} ({train_ds.task}, {len(train_ds)} training graphs)")
    from mlsysopt.runtime.threads import torch_threads

    t0 = time.perf_counter()
    with progress_bar() as bar, torch_threads(threads):
        task = bar.add_task("training", total=None)

        def on_step(done: int, total: int, info: dict[str, Any]) -> None:
            phase = "finetune" if info.get("finetune") else "train"
            bar.update(task, completed=done, total=total, description=f"{phase} epoch {info.get('epoch', '?')}")

        history = trainer.fit(train_ds, valid_ds, run_dir=out, resume=resume, progress=on_step)
        wall = time.perf_counter() - t0
        test = trainer.evaluate(test_ds) if test_ds is not None and len(test_ds) else None
    synthetic = any("synthetic" in name.lower() for name in train_ds.names)
    _write_train_outputs(out, settings, trainer, history, test, wall, train_ds.task, synthetic)


def _write_train_outputs(
    out: Path,
    settings: dict[str, Any],
    trainer: Any,
    history: list[dict[str, Any]],
    test: Any,
    wall: float,
    task: str,
    synthetic: bool,
) -> None:
    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.costmodel import plot_step_memory, plot_training

    label = settings["mode"]
    plot_training({label: history}, out / "training.png", title=f"{label} on {settings['data']}")
    plot_step_memory({label: history}, out / "memory.png", title=f"{label}: peak tensor memory per training step")
    last = history[-1] if history else {}
    result = {
        "command": "costmodel train",
        "data": "SYNTHETIC" if synthetic else "as given (file names do not mark it synthetic)",
        "task": task,
        "settings": settings,
        "model_config": trainer.mc.to_dict(),
        "train_config": trainer.tc.to_dict(),
        "history": history,
        "valid": {k[6:]: v for k, v in last.items() if k.startswith("valid_")},
        "test": test,
        "peak_step_mb": max((h.get("peak_step_mb", 0.0) for h in history), default=0.0),
        "table_mb": trainer.table.nbytes / 2**20,
        "wall_s": wall,
        "plots": ["training.png", "memory.png"],
    }
    write_json_atomic(out / "result.json", json_ready(result))
    shown = test if test is not None else result["valid"]
    figures = ", ".join(f"{k} {v:.4g}" for k, v in (shown or {}).items() if isinstance(v, float))
    console.print(f"{'test' if test is not None else 'valid'}: {figures or 'no held-out graphs'}")
    console.print(f"peak step memory {result['peak_step_mb']:.1f} MB; wrote {escape(str(out / 'result.json'))}")


# ---------------------------------------------------------------------------- evaluate / predict
def _load_trainer(run: Path) -> Any:
    from mlsysopt.costmodel.train import Trainer

    if not (run / "checkpoint.pt").is_file() and not run.is_file():
        raise MlsysoptError(f"--run {run}: no checkpoint.pt (train one with 'mlsysopt costmodel train')")
    return Trainer.load(run)


@costmodel_app.command("evaluate")
def costmodel_evaluate(
    run: Annotated[Path, typer.Option("--run", help="A training run directory (or its checkpoint.pt).")],
    data: DataOpt,
    split: Annotated[str, typer.Option("--split", help="train | valid | test.")] = "test",
    out: Annotated[Path | None, typer.Option("--out", help="Write the metrics as JSON here.")] = None,
) -> None:
    """Metrics of a trained model on one split, every segment computed fresh (never the history table)."""
    trainer = _load_trainer(run)
    ds = dataset_or_none(data, split)
    if ds is None or len(ds) == 0:
        raise MlsysoptError(f"--data {data}: no graphs in split '{split}'")
    with err_console.status(f"evaluating on {len(ds)} graphs"):
        metrics = trainer.evaluate(ds)
    from mlsysopt.io import write_json_atomic

    if out is not None:
        write_json_atomic(out, json_ready({"command": "costmodel evaluate", "split": split, "metrics": metrics}))
    console.print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))


@costmodel_app.command("predict")
def costmodel_predict(
    run: Annotated[Path, typer.Option("--run", help="A training run directory (or its checkpoint.pt).")],
    inputs: Annotated[Path, typer.Option("--input", help="A .npz / .edgelist file, or a data root.")],
    split: Annotated[str, typer.Option("--split", help="Split to read when --input is a data root.")] = "test",
    out: Annotated[Path | None, typer.Option("--out", help="Write the predictions as JSON here.")] = None,
) -> None:
    """Rank each graph's configurations fastest first (TpuGraphs) or give class probabilities (MalNet)."""
    trainer = _load_trainer(run)
    ds = _input_dataset(inputs, split, trainer)
    preds = trainer.predict(ds)
    rows: dict[str, Any] = {}
    for name, pred in preds.items():
        if trainer.task == "malnet":
            import numpy as np

            p = np.exp(pred - pred.max())
            rows[name] = {"probabilities": (p / p.sum()).tolist(), "class": int(np.argmax(pred))}
        else:
            rows[name] = {"scores": pred.tolist(), "ranking": ranking_of(pred)}
    if out is not None:
        from mlsysopt.io import write_json_atomic

        write_json_atomic(out, json_ready({"command": "costmodel predict", "task": trainer.task, "graphs": rows}))
    for name, row in list(rows.items())[:10]:
        what = f"class {row['class']}" if "class" in row else f"fastest configs {row['ranking'][:5]}"
        console.print(f"{escape(name)}: {what}")
    if len(rows) > 10:
        console.print(f"... {len(rows) - 10} more graphs")


def _input_dataset(inputs: Path, split: str, trainer: Any) -> Any:
    """A dataset from one file (.npz or .edgelist) or from a data root."""
    from mlsysopt.costmodel.data.record import GraphDataset

    if inputs.is_dir():
        ds = dataset_or_none(inputs, split)
        if ds is None:
            raise MlsysoptError(f"--input {inputs}: no graphs in split '{split}'")
        return ds
    if not inputs.is_file():
        raise MlsysoptError(f"--input {inputs}: no such file or folder")
    from mlsysopt.costmodel.data import load_layout_npz, load_malnet_graph, load_tile_npz

    if inputs.suffix == ".edgelist":
        rec = load_malnet_graph(inputs, label=0)
    elif inputs.suffix == ".npz":
        rec = load_layout_npz(inputs) if trainer.task == "layout" else load_tile_npz(inputs)
    else:
        raise MlsysoptError(f"--input {inputs}: expected a .npz or .edgelist file, or a data folder")

    class _One(GraphDataset):
        task = rec.task

        @property
        def names(self) -> list[str]:
            return [rec.name]

        def record(self, i: int) -> Any:
            return rec

    return _One()
