"""The ``costmodel`` section of ``mlsysopt demo``: GST memory on SYNTHETIC graphs, ranking quality on REAL runtimes.

Registered in :data:`mlsysopt.demo.BUILDERS` as ``"mlsysopt.demo.costmodel:demo_section"``. About a minute:

1. Memory: one training step on a synthetic layout graph of :data:`MEM_NODES` nodes each, full-graph vs GST
   (segments of :data:`MEM_SEGMENT` nodes); peak tensor memory from PyTorch's own accounting.
2. Quality: a subset of the REAL collection shipped with mlsysopt (``real:cpu``: CNNs x convolution memory formats
   x threads, runtimes measured on this project's machine). GST+EFD and full-graph training with the library's
   defaults and the SAME number of epochs in total (GST+EFD's head-finetune epochs count), and LightGBM
   lambdarank (the field's baseline), ranked on held-out graphs; OPA 0.5 is a random ranking.
3. The cost model as serving's oracle (:mod:`mlsysopt.demo.costmodel_oracle`): predicted vs measured op-level
   ONNX Runtime settings of the zoo CNN, and what ``serving tune --cost-model`` keeps.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.costmodel import TrainConfig, layout_record, one_step, synth_layout_graph, train
from mlsysopt.costmodel.data.real import manifest, real_root
from mlsysopt.demo.costmodel_oracle import oracle_section
from mlsysopt.report.costmodel import plot_memory_scaling, plot_training
from mlsysopt.report.html import Section
from mlsysopt.runtime.threads import torch_threads

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext

MEM_NODES = (2_000, 20_000)
MEM_SEGMENT = 500
MEM_CONFIGS = 2
#: graphs of the real collection per split (the first ones, by name)
SUBSET = {"train": 48, "valid": 12, "test": 24}
EPOCHS = 4
FINETUNE_EPOCHS = 2
MODES = ("full", "gst+efd", "lightgbm")
#: the summary row's baseline: the field's own ranking model
BASELINE = "lightgbm"


def demo_section(ctx: DemoContext) -> list[Section]:
    """Memory per step (full vs GST) and held-out ranking quality (full vs gst+efd) on synthetic layout graphs."""

    with torch_threads(1):
        return [_memory(ctx), _quality(ctx), oracle_section(ctx, ctx.out / "costmodel" / "data")]


def _memory(ctx: DemoContext) -> Section:

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
    ctx.step("costmodel: a subset of the real collection (runtimes measured on this project's machine)")
    root, src = ctx.out / "costmodel" / "data", real_root()
    if root.exists():
        shutil.rmtree(root)  # the demo copies its subset afresh on every run
    for split, n in SUBSET.items():
        (root / split).mkdir(parents=True)
        for f in sorted((src / split).glob("*.npz"))[:n]:
            shutil.copy(f, root / split / f.name)
    shutil.copy(src / "collection.json", root / "collection.json")
    label = manifest()["data"]
    histories: dict[str, list[dict[str, Any]]] = {}
    rows: list[list[Any]] = []
    res: dict[str, Any] = {}
    total = EPOCHS + FINETUNE_EPOCHS
    for mode in MODES:
        ctx.step(f"costmodel: training {mode}")
        if mode == "full":  # the same epochs in total as gst+efd's training + head finetuning
            tc = TrainConfig(mode=mode, epochs=total, seed=ctx.seed)
        else:
            tc = TrainConfig(mode=mode, epochs=EPOCHS, finetune_epochs=FINETUNE_EPOCHS, seed=ctx.seed)
        result = train(root, config=tc)
        m, peak = result["test"], result["peak_step_mb"]
        if mode != BASELINE:
            histories[mode] = result["history"]
        epoch_s = float(np.mean([h["epoch_s"] for h in result["history"] if h["phase"] == "train"]))
        rows.append([mode, m["opa"], m["kendall"], m["slowdown_top1"], peak, epoch_s])
        res[mode] = {"test": m, "peak_step_mb": peak, "epoch_s": epoch_s}
    plot_training(histories, ctx.out / "costmodel" / "training.png", title="real layout collection (subset)")
    best = max(MODES, key=lambda k: res[k]["test"]["opa"])
    ctx.results["costmodel_quality"] = {
        "data": label,
        "settings": {
            "subset": SUBSET,
            "epochs_total": total,
            "gst_efd": {"epochs": EPOCHS, "finetune_epochs": FINETUNE_EPOCHS},
        },
        "modes": res,
        "baseline": BASELINE,
        "chance_opa": 0.5,
        "winner": best,
        "headline": {f"{mode} held-out OPA": f"{res[mode]['test']['opa']:.3f}" for mode in MODES},
    }
    n = SUBSET
    text = (
        f"{label[:1].upper()}{label[1:]}. {n['train']} training and {n['test']} held-out graphs of the shipped "
        "collection: PyTorch CNNs whose configurations set every convolution's memory format (contiguous or "
        "channels-last: neighbours that disagree pay a layout conversion) and the thread count. GST+EFD and "
        f"full-graph training use the library's defaults and {total} epochs each in total (GST+EFD: {EPOCHS} + "
        f"{FINETUNE_EPOCHS} head-only); LightGBM lambdarank is the field's tree baseline. OPA is the fraction of "
        f"configuration pairs ranked right: 0.5 is chance. Best here: {best}. A small budget on a subset: see "
        "BENCHMARKS.md for the full comparison over 3 seeds."
    )
    return Section(
        heading="Cost model: ranking configurations by measured runtime (GST+EFD, full graph, LightGBM)",
        text=text,
        table=rows,
        columns=["mode", "OPA", "Kendall τ", "top-1 slowdown", "peak step MB", "s / epoch"],
        images=["costmodel/training.png"],
        captions=["training loss and validation OPA per epoch"],
        anchor="costmodel-quality",
    )
