"""Cost-model plots: loss and validation quality per epoch, training-step memory per step, memory vs graph size.

Inputs are the trainer's plain history (a list of per-epoch dicts with ``loss``, ``phase``, ``step_mb`` and
``valid_<metric>`` keys), so the CLI, the demo and the benchmark share them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlsysopt.report.figures import integer_ticks, new_figure, plain_log_ticks, save_figure

QUALITY_KEYS = ("valid_opa", "valid_kendall", "valid_accuracy", "valid_macro_f1")


def plot_training(
    histories: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "training"
) -> Path:
    """Loss (left) and validation quality (right) per epoch, one line per run; finetune epochs dashed."""
    fig = new_figure(11, 4)
    ax_loss, ax_q = fig.subplots(1, 2)
    for label, hist in histories.items():
        epochs = [h["epoch"] for h in hist]
        line = ax_loss.plot(epochs, [h.get("loss", math.nan) for h in hist], marker="o", ms=3, label=label)[0]
        ft = [h["epoch"] for h in hist if h.get("phase") == "finetune"]
        if ft:
            ax_loss.axvline(min(ft) - 0.5, color=line.get_color(), ls=":", lw=1)
        for key in QUALITY_KEYS:
            ys = [h.get(key, math.nan) for h in hist]
            if any(isinstance(y, float) and math.isfinite(y) for y in ys):
                ax_q.plot(epochs, ys, marker="o", ms=3, color=line.get_color(), label=f"{label} {key[6:]}")
                break
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="loss (dotted: finetune starts)")
    ax_q.set(xlabel="epoch", ylabel="validation metric (unitless)", title="validation quality (computed fresh)")
    integer_ticks(ax_loss.xaxis, ax_q.xaxis)
    for ax in (ax_loss, ax_q):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_step_memory(
    histories: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "training-step memory"
) -> Path:
    """Peak tensor memory of every training step (MB), one line per run."""
    fig = new_figure(9, 4)
    ax = fig.subplots()
    for label, hist in histories.items():
        ys = [float(v) for h in hist for v in h.get("step_mb", [])]
        if ys:
            ax.plot(range(1, len(ys) + 1), ys, lw=1, label=label)
    ax.set(xlabel="training step", ylabel="peak step tensor memory (MB)", title=title)
    integer_ticks(ax.xaxis)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_memory_scaling(
    nodes: Sequence[int], series: Mapping[str, Sequence[float]], path: str | Path, title: str = "memory vs graph size"
) -> Path:
    """Peak training-step memory against graph size, log-log, one line per mode."""
    fig = new_figure(7, 4.5)
    ax = fig.subplots()
    for label, ys in series.items():
        ax.plot(list(nodes), list(ys), marker="o", label=label)
    ax.set(xscale="log", yscale="log", xlabel="nodes", ylabel="peak step tensor memory (MB)", title=title)
    ax.grid(alpha=0.3, which="both")
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    ax.legend()
    return save_figure(fig, path)


def plot_ensemble_weights(rows: Sequence[Mapping[str, Any]], chosen: Sequence[float], labels: Sequence[str],
                          path: str | Path) -> Path:  # fmt: skip
    """Validation OPA and top-1 slowdown against the first member's weight (a two-member rank ensemble).

    Args:
        rows: The weight grid's rows ``{"weights", "opa", "slowdown_top1"}``.
        chosen: The chosen weights (marked).
        labels: The members' names.
        path: PNG to write.

    Returns:
        Path: The written PNG.
    """
    rows = sorted(rows, key=lambda r: r["weights"][0])
    xs = [r["weights"][0] for r in rows]
    fig = new_figure(9, 4)
    ax_opa, ax_slow = fig.subplots(1, 2)
    for ax, key, name in ((ax_opa, "opa", "validation OPA (higher is better)"),
                          (ax_slow, "slowdown_top1", "validation top-1 slowdown (lower is better)")):  # fmt: skip
        ax.plot(xs, [r[key] for r in rows], marker="o", ms=3)
        ax.axvline(chosen[0], color="tab:red", ls=":", lw=1, label=f"chosen: {chosen[0]:.2f}")
        ax.set(xlabel=f"weight of {labels[0]} (rest: {labels[1]})", ylabel=name.split(" (")[0], title=name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"rank ensemble {' + '.join(labels)}: weight chosen on validation")
    return save_figure(fig, path)
