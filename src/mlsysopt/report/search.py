"""Search and training curves: best makespan vs simulator evaluations per method, and GiPH training progress."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from mlsysopt.report.figures import integer_ticks, new_figure, save_figure, time_unit


def plot_search(curves: Mapping[str, Sequence[float]], path: str | Path, title: str | None = None) -> Path:
    """Best makespan vs simulator evaluations, one line per method; a one-evaluation method is a dashed level."""
    fig = new_figure(8.0, 4.2)
    ax = fig.add_subplot()
    finite = [v for c in curves.values() for v in c if np.isfinite(v)]
    scale, unit = time_unit(max(finite) if finite else 1.0)
    longest = max((len(c) for c in curves.values()), default=1)
    colours = _colours(len(curves))
    for k, (label, curve) in enumerate(curves.items()):
        y = np.asarray(curve, dtype=np.float64) * scale
        if y.size == 0:
            continue
        if y.size == 1:
            text = f"{label} ({y[0]:.4g} {unit}, 1 evaluation)"
            ax.axhline(y[0], color=colours[k], linestyle="--", linewidth=1.3, label=text)
            continue
        x = np.arange(1, y.size + 1)
        ax.plot(x, y, color=colours[k], linewidth=1.6, label=f"{label} ({y[-1]:.4g} {unit})")
    ax.set_xlim(0, max(longest, 2) + 1)  # not from 1: the left axis would hide each curve's first drop
    integer_ticks(ax.xaxis)
    ax.set_xlabel("simulator evaluations")
    ax.set_ylabel(f"best makespan ({unit})")
    ax.grid(linewidth=0.3, alpha=0.6)
    ax.set_title(title or "best makespan vs evaluations", fontsize=10)
    if curves:
        ax.legend(fontsize=8, framealpha=0.8, loc="best")
    return save_figure(fig, path)


def plot_training(history: Sequence[Mapping[str, float]], path: str | Path, title: str | None = None) -> Path:
    """Mean relative makespan improvement per episode and policy entropy, per update.

    A training with an imitation stage (updates whose ``agreement`` is set) shows the teacher agreement (%) of its
    epochs in the right panel instead of the entropy it does not measure.
    """
    fig = new_figure(9.0, 3.6)
    left, right = fig.subplots(1, 2)
    x = np.array([h.get("update", i) for i, h in enumerate(history)], dtype=np.float64) + 1
    improvement = np.array([h.get("improvement", np.nan) for h in history], dtype=np.float64) * 100
    entropy = np.array([h.get("entropy", np.nan) for h in history], dtype=np.float64)
    right_label = "policy entropy (nats)"
    if any("agreement" in h for h in history):
        entropy = np.array([h.get("agreement", np.nan) for h in history], dtype=np.float64) * 100
        right_label = "imitation: agreement with the teacher's best move (%)"
    for ax, y, label, colour in (
        (left, improvement, "mean improvement over the start placement (%)", "tab:blue"),
        (right, entropy, right_label, "tab:orange"),
    ):
        marker = "o" if len(history) <= 30 else None
        ax.plot(x, y, color=colour, linewidth=1.4, marker=marker, markersize=3)
        if len(history) >= 8:
            k = max(2, len(history) // 8)
            smooth = np.convolve(y, np.ones(k) / k, mode="valid")
            ax.plot(x[k - 1 :], smooth, color="black", linewidth=1.0, alpha=0.7, label=f"{k}-update mean")
            ax.legend(fontsize=7, frameon=False)
        ax.set_xlabel("update")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(label, fontsize=9)
        ax.grid(linewidth=0.3, alpha=0.6)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def _colours(k: int) -> list[tuple[float, ...]]:
    from matplotlib import colormaps  # deferred: matplotlib loads only when a chart is drawn

    cmap = colormaps["tab10" if k <= 10 else "tab20"]
    return [tuple(cmap(i % cmap.N)) for i in range(max(k, 1))]
