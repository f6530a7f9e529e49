"""``mlsysopt costmodel ...``: synthetic data, GST+EFD training, evaluation and prediction of graph cost models."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

import mlsysopt.cli.costmodel_io as o
from mlsysopt import costmodel as cm
from mlsysopt.cli.common import (
    AddressOpt,
    BackendOpt,
    OutOpt,
    SeedOpt,
    TimeoutOpt,
    WorkersOpt,
    console,
    err_console,
    progress_bar,
)
from mlsysopt.errors import InvalidOption
from mlsysopt.runtime import check_parallel, check_threads

costmodel_app = typer.Typer(
    help="GST+EFD: learn config rankings (TpuGraphs) or graph classes (MalNet) on huge graphs in bounded memory; "
    "the latency oracle (a model's predicted ms per setting).",
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


@costmodel_app.command("collect")
def costmodel_collect(
    out: Annotated[Path, typer.Option("--out", help="Data root to write (a run folder: --resume continues it).")],
    graphs: Annotated[int, typer.Option("--graphs", help="Generated graphs to measure (0: only --source).")] = 240,
    configs: Annotated[int, typer.Option("--configs", help="Configurations per graph.")] = 48,
    rounds: Annotated[
        int, typer.Option("--rounds", help="Timed rounds per configuration (the fastest kept, and the median).")
    ] = 8,
    families: Annotated[
        str, typer.Option("--families", help="Comma-separated graph families (zoo,nas,vgg,resnet,mobilenet,inception).")
    ] = "zoo,nas,vgg,resnet,mobilenet,inception",
    source: Annotated[
        list[str] | None, typer.Option("--source", help="Also measure a model: file.py:factory or model.onnx (repeat).")
    ] = None,
    threads: Annotated[
        str, typer.Option("--threads", help="Graph-level thread counts a configuration chooses from, e.g. 1,2.")
    ] = "1,2",
    timeout: TimeoutOpt = None,
    resume: o.ResumeOpt = False,
    seed: SeedOpt = 0,
) -> None:
    """Measure a REAL cost-model dataset on this machine: graphs x configurations -> runtimes (TpuGraphs layout).

    Timing-sensitive: run it on a quiet machine. Checkpointed after every graph; --timeout stops between graphs and
    --resume continues.
    """
    # deferred: mlsysopt.costmodel.collection imports torch
    from mlsysopt.costmodel.collection import collect

    fams = [f.strip() for f in families.split(",") if f.strip()]
    try:
        counts = [int(t) for t in threads.split(",") if t.strip()]
    except ValueError:
        raise InvalidOption(f"--threads '{threads}': expected comma-separated integers, e.g. 1,2") from None
    bar, task = progress_bar(), None

    def on_graph(done: int, total: int, name: str) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task("measuring", total=total)
        bar.update(task, completed=done, description=f"measured {escape(name)}")

    try:
        manifest = collect(out, graphs=graphs, configs=configs, rounds=rounds, seed=seed, families=fams,
                           sources=source or [], timeout=timeout, resume=resume, threads=counts, progress=on_graph,
                           log=lambda line: err_console.print(escape(line)))  # fmt: skip
    finally:
        bar.stop()
    done = len(manifest["graphs"])
    state = "complete" if manifest["complete"] else "stopped by --timeout: --resume continues"
    console.print(f"{escape(manifest['data'])}: {done} graphs ({state}); wrote {escape(str(out))}")


@costmodel_app.command("train")
def costmodel_train(
    data: o.DataOpt,
    out: OutOpt,
    mode: o.ModeOpt = "gst+efd",
    segment_size: o.SegSizeOpt = "auto",
    segmenter: o.SegmenterOpt = "auto",
    k: o.KOpt = "auto",
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
    cross_config_heads: o.CrossOpt = 0,
    configs_per_graph: o.ConfigsOpt = 32,
    graphs_per_step: o.GpsOpt = 1,
    validate_every: o.ValidateOpt = 1,
    prune_hops: o.PruneOpt = "auto",
    keep_best: o.KeepBestOpt = True,
    rounds: o.RoundsOpt = None,
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
    tc = cm.TrainConfig(mode=mode, segment_size=o.auto_int(segment_size, "--segment-size"), segmenter=segmenter,
                        k=o.auto_int(k, "--k"), sed_p=sed_p,
                        sed_policy=sed_policy, memory_budget_mb=memory_budget_mb, history_key=history_key,
                        refresh=refresh, sample=sample, epochs=epochs, finetune_epochs=finetune_epochs, lr=lr,
                        loss=loss, configs_per_graph=configs_per_graph, graphs_per_step=graphs_per_step,
                        validate_every=validate_every, prune_hops=o.parse_prune(prune_hops), keep_best=keep_best,
                        device=device, seed=seed, rounds=rounds)  # fmt: skip
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
                          deviation=deviation, cross_config_heads=cross_config_heads, resume=resume, threads=threads,
                          timeout=timeout, workers=workers,
                          backend=backend, address=address, progress=on_step, log=started)  # fmt: skip
    finally:
        bar.stop()
    if result["stopped"]:
        console.print(f"stopped after the --timeout of {timeout:g} s, checkpointed: --resume continues")
    chosen = f"segments of {result['segment_size']} nodes, k {result['k']}" if result.get("segment_size") else ""
    best = result.get("best")
    if chosen or best:
        where = f"; best validation epoch {best['epoch']} ({best['metric']} {best['value']:.4g})" if best else ""
        console.print(f"{escape(result['data'])}: {chosen}{where}")
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
    inputs: Annotated[
        Path,
        typer.Option(
            "--input",
            help="A .npz / .edgelist file, a split folder or a data root; with --configs, one model file "
            "(.onnx, .npz, .py).",
        ),
    ],
    split: o.SplitOpt = "test",
    out: o.OneShotOut = None,
    configs: Annotated[
        Path | None,
        typer.Option(
            "--configs",
            help="A CSV of configurations to rank for the --input model, no runtimes: one row each, the knob "
            "columns of the run's training table (a model trained on a runtime table).",
        ),
    ] = None,
) -> None:
    """Rank each graph's configurations fastest first (TpuGraphs) or give class probabilities (MalNet)."""
    rows = cm.predict(run, inputs, split, out, configs=configs)["graphs"]
    for name, row in list(rows.items())[:10]:
        what = f"class {row['class']}" if "class" in row else f"fastest configs {row['ranking'][:5]}"
        console.print(f"{escape(name)}: {what}")
    if len(rows) > 10:
        console.print(f"... {len(rows) - 10} more graphs")
    if out is not None:
        console.print(f"wrote {escape(str(out / 'result.json'))}")


@costmodel_app.command("ensemble")
def costmodel_ensemble(
    members: Annotated[
        list[Path],
        typer.Option("--member", help="A training run folder; give 2 to 4 (e.g. a gst+efd run and a lightgbm run)."),
    ],
    data: o.DataOpt,
    out: o.OneShotOut = None,
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="Fixed weights, one per --member (e.g. 0.5,0.5) [default: chosen on the "
            "validation split: best OPA, ties by top-1 slowdown].",
        ),
    ] = None,
) -> None:
    """Combine trained rankers: per graph, standardised scores in a weighted mean (weights chosen on validation)."""
    fixed = None
    if weights is not None:
        try:
            fixed = [float(w) for w in weights.split(",")]
        except ValueError:
            raise InvalidOption(f"--weights {weights}: numbers separated by commas, one per --member") from None
    with err_console.status(f"weighing {len(members)} members on {escape(str(data))}"):
        result = cm.ensemble(members, data, out, fixed)
    w = ", ".join(f"{m['mode']} {x:.2f}" for m, x in zip(result["members"], result["weights"], strict=True))
    console.print(f"{result['mode']}: weights {w} ({'chosen on valid' if result['chosen_on'] == 'valid' else 'given'})")
    for label, row in [(m["mode"], m) for m in result["members"]] + [("ensemble", result)]:
        figures = [f"{split} opa {row[split]['opa']:.4f} top-1 slowdown {row[split]['slowdown_top1']:.4f}"
                   for split in ("valid", "test") if row.get(split)]  # fmt: skip
        console.print(f"  {escape(label)}: {'; '.join(figures) or 'no measured split'}")
    if out is not None:
        console.print(f"wrote {escape(str(out / 'result.json'))}; evaluate or predict with --run {escape(str(out))}")
