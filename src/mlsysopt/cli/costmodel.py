"""``mlsysopt costmodel ...``: synthetic data, GST+EFD training, evaluation and prediction of graph cost models."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt import costmodel as cm
from mlsysopt.cli import costmodel_io as o
from mlsysopt.cli.common import (
    AddressOpt,
    BackendOpt,
    OutOpt,
    SeedOpt,
    TimeoutOpt,
    WorkersOpt,
    check_parallel,
    check_threads,
    console,
    err_console,
    progress_bar,
)
from mlsysopt.errors import InvalidOption

costmodel_app = typer.Typer(
    help="GST+EFD: learn config rankings (TpuGraphs) or graph classes (MalNet) on huge graphs in bounded memory.",
    no_args_is_help=True,
)


@costmodel_app.command("synth")
def costmodel_synth(
    kind: Annotated[str, typer.Argument(help="layout | tile (TpuGraphs .npz) | malnet (edgelists + split files).")],
    out: Annotated[Path, typer.Option("--out", help="Data root to write (an empty folder, or --overwrite).")],
    graphs: Annotated[
        str, typer.Option("--graphs", help="Graphs: N or train=N,valid=N,test=N (malnet: per class).")
    ] = "20",
    nodes: Annotated[str, typer.Option("--nodes", help="Nodes per graph: N or lo-hi (log-uniform).")] = "1000-5000",
    configs: Annotated[str, typer.Option("--configs", help="Configurations per graph: N or lo-hi.")] = "64",
    profile: o.ProfileOpt = "realistic",
    overwrite: o.OverwriteOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Write SYNTHETIC data in the exact public formats (the real TpuGraphs/MalNet cannot be downloaded here)."""
    if kind not in cm.SYNTH_KINDS:
        raise InvalidOption(f"unknown kind '{kind}' (choose from: {', '.join(cm.SYNTH_KINDS)})")
    n_nodes, n_cfg = o.parse_range(nodes, "--nodes"), o.parse_range(configs, "--configs")
    n_graphs = o.parse_graphs(graphs)
    t0 = time.perf_counter()
    with err_console.status(f"writing synthetic {kind} data to {escape(str(out))}"):
        counts = cm.synth(kind, out, graphs=n_graphs, nodes=n_nodes, configs=n_cfg, seed=seed, profile=profile,
                          overwrite=overwrite)  # fmt: skip
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    console.print(f"wrote SYNTHETIC {kind} data ({summary}) to {escape(str(out))} in {time.perf_counter() - t0:.1f} s")


@costmodel_app.command("train")
def costmodel_train(
    data: o.DataOpt,
    out: OutOpt,
    mode: o.ModeOpt = "gst+efd",
    segment_size: o.SegSizeOpt = 1000,
    segmenter: o.SegmenterOpt = "auto",
    k: o.KOpt = 1,
    memory_budget_mb: o.BudgetOpt = None,
    sed_p: o.SedPOpt = 0.5,
    sed_policy: o.SedPolicyOpt = "uniform",
    history_key: o.HistoryKeyOpt = "signature",
    refresh: o.RefreshOpt = "varying",
    sample: o.SampleOpt = "varying",
    epochs: o.EpochsOpt = 10,
    finetune_epochs: o.FtEpochsOpt = 10,
    lr: o.LrOpt = 1e-3,
    loss: o.LossOpt = "auto",
    backbone: o.BackboneOpt = "sage",
    hidden: o.HiddenOpt = 64,
    layers: o.LayersOpt = 3,
    readout: o.ReadoutOpt = "auto",
    deviation: o.DeviationOpt = None,
    configs_per_graph: o.ConfigsOpt = 32,
    graphs_per_step: o.GpsOpt = 1,
    validate_every: o.ValidateOpt = 1,
    prune_hops: o.PruneOpt = None,
    device: o.DeviceOpt = "cpu",
    threads: o.ThreadsOpt = 1,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    timeout: TimeoutOpt = None,
    seed: SeedOpt = 0,
    resume: o.ResumeOpt = False,
) -> None:
    """Train a cost model; writes RUN_DIR/result.json, checkpoint.pt (every epoch), training.png, memory.png."""
    check_parallel(workers, backend, address)
    check_threads(threads, workers, backend)
    tc = cm.TrainConfig(mode=mode, segment_size=segment_size, segmenter=segmenter, k=k, sed_p=sed_p,
                        sed_policy=sed_policy, memory_budget_mb=memory_budget_mb, history_key=history_key,
                        refresh=refresh, sample=sample, epochs=epochs, finetune_epochs=finetune_epochs, lr=lr,
                        loss=loss, configs_per_graph=configs_per_graph, graphs_per_step=graphs_per_step,
                        validate_every=validate_every, prune_hops=prune_hops, device=device, seed=seed)  # fmt: skip
    bar, task = progress_bar(), None

    def started(line: str) -> None:  # the inputs are valid: show the run and start the bar
        nonlocal task
        err_console.print(escape(line))
        if workers == 1:
            bar.start()
            task = bar.add_task("training", total=None)

    def on_step(done: int, total: int, info: dict[str, Any]) -> None:
        phase = "finetune" if info.get("finetune") else "train"
        bar.update(task, completed=done, total=total, description=f"{phase} epoch {info.get('epoch', '?')}")

    try:
        result = cm.train(data, out, tc, backbone=backbone, hidden=hidden, layers=layers, readout=readout,
                          deviation=deviation, resume=resume, threads=threads, timeout=timeout, workers=workers,
                          backend=backend, address=address, progress=on_step, log=started)  # fmt: skip
    finally:
        bar.stop()
    if result["stopped"]:
        console.print(f"stopped after the --timeout of {timeout:g} s, checkpointed: --resume continues")
    held_out = "test" if result["test"] is not None else "valid"
    figures = ", ".join(f"{k} {v:.4g}" for k, v in (result[held_out] or {}).items() if isinstance(v, float))
    console.print(f"{held_out}: {figures or 'no held-out graphs'}")
    console.print(f"peak step memory {result['peak_step_mb']:.1f} MB; wrote {escape(str(out / 'result.json'))}")


@costmodel_app.command("evaluate")
def costmodel_evaluate(run: o.RunOpt, data: o.DataOpt, split: o.SplitOpt = "test", out: o.OneShotOut = None) -> None:
    """Metrics of a trained model on one split, every segment computed fresh (never the history table)."""
    with err_console.status(f"evaluating on {escape(str(data))} ({split})"):
        metrics = cm.evaluate(run, data, split, out)["metrics"]
    console.print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    if out is not None:
        console.print(f"wrote {escape(str(out / 'result.json'))}")


@costmodel_app.command("predict")
def costmodel_predict(
    run: o.RunOpt,
    inputs: Annotated[Path, typer.Option("--input", help="A .npz / .edgelist file, a split folder or a data root.")],
    split: o.SplitOpt = "test",
    out: o.OneShotOut = None,
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
