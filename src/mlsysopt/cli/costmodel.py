"""``mlsysopt costmodel ...``: synthetic data, GST+EFD training, evaluation and prediction of graph cost models."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt import costmodel as cm
from mlsysopt.cli.common import SeedOpt, console, err_console, progress_bar
from mlsysopt.cli.costmodel_io import DataOpt, RunOpt, SplitOpt, parse_graphs, parse_range
from mlsysopt.errors import InvalidOption

costmodel_app = typer.Typer(
    help="GST+EFD: learn config rankings (TpuGraphs) or graph classes (MalNet) on huge graphs in bounded memory.",
    no_args_is_help=True,
)
MODE_HELP = "full | gst | gst+e | gst+ef | gst+efd (E: history table, F: head finetune, D: stale embedding dropout)."
OneShotOut = Annotated[Path | None, typer.Option("--out", help="Run folder for result.json (and settings.json).")]


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
    if kind not in cm.SYNTH_KINDS:
        raise InvalidOption(f"unknown kind '{kind}' (choose from: {', '.join(cm.SYNTH_KINDS)})")
    n_nodes, n_cfg, n_graphs = parse_range(nodes, "--nodes"), parse_range(configs, "--configs"), parse_graphs(graphs)
    t0 = time.perf_counter()
    with err_console.status(f"writing synthetic {kind} data to {escape(str(out))}"):
        counts = cm.synth(kind, out, graphs=n_graphs, nodes=n_nodes, configs=n_cfg, seed=seed)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    console.print(f"wrote SYNTHETIC {kind} data ({summary}) to {escape(str(out))} in {time.perf_counter() - t0:.1f} s")


@costmodel_app.command("train")
def costmodel_train(
    data: DataOpt,
    out: Annotated[Path, typer.Option("--out", help="Run folder: result.json, checkpoint.pt, plots.")],
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
    tc = cm.TrainConfig(mode=mode, segment_size=segment_size, segmenter=segmenter, k=k, sed_p=sed_p, epochs=epochs,
                        finetune_epochs=finetune_epochs, lr=lr, loss=loss, configs_per_graph=configs_per_graph,
                        prune_hops=prune_hops, device=device, seed=seed)  # fmt: skip
    bar, task = progress_bar(), None

    def started(line: str) -> None:  # the inputs are valid: show the run and start the bar
        nonlocal task
        err_console.print(escape(line))
        bar.start()
        task = bar.add_task("training", total=None)

    def on_step(done: int, total: int, info: dict[str, Any]) -> None:
        phase = "finetune" if info.get("finetune") else "train"
        bar.update(task, completed=done, total=total, description=f"{phase} epoch {info.get('epoch', '?')}")

    try:
        result = cm.train(data, out, tc, backbone=backbone, hidden=hidden, layers=layers, resume=resume,
                          threads=threads, progress=on_step, log=started)  # fmt: skip
    finally:
        bar.stop()
    held_out = "test" if result["test"] is not None else "valid"
    figures = ", ".join(f"{k} {v:.4g}" for k, v in (result[held_out] or {}).items() if isinstance(v, float))
    console.print(f"{held_out}: {figures or 'no held-out graphs'}")
    console.print(f"peak step memory {result['peak_step_mb']:.1f} MB; wrote {escape(str(out / 'result.json'))}")


@costmodel_app.command("evaluate")
def costmodel_evaluate(run: RunOpt, data: DataOpt, split: SplitOpt = "test", out: OneShotOut = None) -> None:
    """Metrics of a trained model on one split, every segment computed fresh (never the history table)."""
    with err_console.status(f"evaluating on {escape(str(data))} ({split})"):
        metrics = cm.evaluate(run, data, split, out)["metrics"]
    console.print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    if out is not None:
        console.print(f"wrote {escape(str(out / 'result.json'))}")


@costmodel_app.command("predict")
def costmodel_predict(
    run: RunOpt,
    inputs: Annotated[Path, typer.Option("--input", help="A .npz / .edgelist file, a split folder or a data root.")],
    split: SplitOpt = "test",
    out: OneShotOut = None,
) -> None:
    """Rank each graph's configurations fastest first (TpuGraphs) or give class probabilities (MalNet)."""
    rows = cm.predict(run, inputs, split, out)["graphs"]
    for name, row in list(rows.items())[:10]:
        what = f"class {row['class']}" if "class" in row else f"fastest configs {row['ranking'][:5]}"
        console.print(f"{escape(name)}: {what}")
    if len(rows) > 10:
        console.print(f"... {len(rows) - 10} more graphs")
    if out is not None:
        console.print(f"wrote {escape(str(out / 'result.json'))}")
