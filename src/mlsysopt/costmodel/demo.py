"""The ``costmodel`` section of ``mlsysopt demo``: GST+EFD vs full-graph training on SYNTHETIC layout graphs.

Registered in :data:`mlsysopt.demo.BUILDERS` as ``"mlsysopt.costmodel.demo:demo_section"``. Under a minute:

1. Memory: one training step on a synthetic layout graph of :data:`MEM_NODES` nodes each, full-graph vs GST
   (segments of :data:`MEM_SEGMENT` nodes); peak tensor memory from PyTorch's own accounting.
2. Quality: a small synthetic TpuGraphs-like layout dataset (written in the published ``.npz`` format); full and
   gst+efd trained with the same budget, then ranked on held-out graphs with every segment computed fresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.report.html import Section

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext

MEM_NODES = (2_000, 20_000)
MEM_SEGMENT = 500
MEM_CONFIGS = 2
DATA = {"num_graphs": {"train": 8, "valid": 2, "test": 3}, "nodes": (400, 1200), "configs": 24}
SEGMENT = 200
EPOCHS = 3
FINETUNE_EPOCHS = 2
MODES = ("full", "gst+efd")


def demo_section(ctx: DemoContext) -> list[Section]:
    """Memory per step (full vs GST) and held-out ranking quality (full vs gst+efd) on synthetic layout graphs."""
    from mlsysopt.runtime.threads import torch_threads

    with torch_threads(1):
        return [_memory(ctx), _quality(ctx)]


def _memory(ctx: DemoContext) -> Section:
    from mlsysopt.costmodel import layout_record, one_step, synth_layout_graph
    from mlsysopt.report.costmodel import plot_memory_scaling

    series: dict[str, list[float]] = {"full": [], "gst": []}
    for n in MEM_NODES:
        ctx.step(f"costmodel: one training step on a {n:,}-node synthetic graph (full and GST)")
        rec = layout_record(synth_layout_graph(n, MEM_CONFIGS, ctx.rng(60 + n), splits=False), f"synthetic_{n}")
        for mode in series:
            series[mode].append(one_step(rec, mode, MEM_SEGMENT, seed=ctx.seed).history[0]["peak_step_mb"])
    plot_memory_scaling(MEM_NODES, series, ctx.out / "costmodel" / "memory.png", title="peak training-step memory")
    rows = [[f"{n:,}", series["full"][i], series["gst"][i]] for i, n in enumerate(MEM_NODES)]
    ctx.results["costmodel_memory"] = {
        "data": "SYNTHETIC TpuGraphs-like layout graphs",
        "nodes": list(MEM_NODES),
        "peak_step_mb": series,
        "headline": {
            f"full step memory {MEM_NODES[0]:,} -> {MEM_NODES[-1]:,} nodes": _growth(series["full"]),
            f"GST step memory {MEM_NODES[0]:,} -> {MEM_NODES[-1]:,} nodes": _growth(series["gst"]),
        },
    }
    text = (
        "SYNTHETIC data. Peak tensor memory of one training step (inputs copied to the compute device, activations, "
        f"gradients) measured with PyTorch's own accounting. Full-graph training grows with the graph; GST "
        f"backpropagates through one sampled segment of at most {MEM_SEGMENT} nodes and computes the others "
        "without gradients one at a time, so its memory stays flat."
    )
    return Section(
        heading="Cost model: memory of a training step (GST vs full graph)",
        text=text,
        table=rows,
        columns=["nodes", "full (MB)", "GST (MB)"],
        images=["costmodel/memory.png"],
        captions=["peak training-step tensor memory vs graph size"],
        anchor="costmodel-memory",
    )


def _growth(values: list[float]) -> str:
    return f"{values[0]:.1f} -> {values[-1]:.1f} MB ({values[-1] / values[0]:.1f}x)"


def _quality(ctx: DemoContext) -> Section:
    from mlsysopt.costmodel import TrainConfig, synth, train
    from mlsysopt.report.costmodel import plot_training

    root = ctx.out / "costmodel" / "data"
    ctx.step("costmodel: writing synthetic TpuGraphs-like layout files")
    # the demo regenerates its own data on every run (overwrite removes only files an earlier synth wrote)
    synth("layout", root, DATA["num_graphs"], DATA["nodes"], DATA["configs"], seed=ctx.seed, overwrite=True)
    histories: dict[str, list[dict[str, Any]]] = {}
    rows: list[list[Any]] = []
    res: dict[str, Any] = {}
    for mode in MODES:
        ctx.step(f"costmodel: training {mode} ({EPOCHS} epochs)")
        tc = TrainConfig(mode=mode, segment_size=SEGMENT, epochs=EPOCHS, finetune_epochs=FINETUNE_EPOCHS, seed=ctx.seed)
        result = train(root, config=tc)
        histories[mode], m, peak = result["history"], result["test"], result["peak_step_mb"]
        epoch_s = float(np.mean([h["epoch_s"] for h in histories[mode] if h["phase"] == "train"]))
        rows.append([mode, m["opa"], m["kendall"], m["slowdown_top1"], peak, epoch_s])
        res[mode] = {"test": m, "peak_step_mb": peak, "epoch_s": epoch_s}
    plot_training(histories, ctx.out / "costmodel" / "training.png", title="synthetic layout graphs")
    ctx.results["costmodel_quality"] = {
        "data": "SYNTHETIC TpuGraphs-like layout graphs (critical-path runtimes from the shared simulator)",
        "settings": {"data": DATA, "segment_size": SEGMENT, "epochs": EPOCHS, "finetune_epochs": FINETUNE_EPOCHS},
        "modes": res,
        "headline": {f"{mode} held-out OPA": f"{res[mode]['test']['opa']:.3f}" for mode in MODES},
    }
    n = DATA["num_graphs"]
    text = (
        f"SYNTHETIC TpuGraphs-like layout graphs in the published .npz format ({n['train']} training, "
        f"{n['test']} held-out graphs of {DATA['nodes'][0]}-{DATA['nodes'][1]} nodes, {DATA['configs']} layout "
        "configurations each; runtime = critical path of per-node costs that depend on each node's layout and its "
        f"producers'). Segments of {SEGMENT} nodes; a tiny budget, so figures are noisy. Held-out metrics are "
        "computed fresh over every segment."
    )
    return Section(
        heading="Cost model: ranking layout configurations (full vs GST+EFD)",
        text=text,
        table=rows,
        columns=["mode", "OPA", "Kendall τ", "top-1 slowdown", "peak step MB", "s / epoch"],
        images=["costmodel/training.png"],
        captions=["training loss and validation OPA per epoch"],
        anchor="costmodel-quality",
    )
