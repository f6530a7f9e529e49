"""Serving plots: latency and best-so-far per tuning step, a heatmap of the space, and a fitted service profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlsysopt.report.figures import integer_ticks, new_figure, plain_log_ticks, save_figure

if TYPE_CHECKING:
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample


def plot_steps(
    runs: Mapping[str, Sequence[Mapping[str, float]]],
    path: str | Path,
    slo_ms: float | None = None,
    ylabel: str = "latency (ms)",
    title: str | None = None,
) -> Path:
    """Per tuner: the measured value at each step (dots) and the best so far (line); the SLO as a dashed level.

    Each run is a list of ``{"value": measured, "best": best so far, "shift": 1 if the workload changed here}``.
    """
    fig = new_figure(8.5, 4.2)
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(runs))]
    for colour, (name, steps) in zip(colours, runs.items(), strict=True):
        if not steps:
            continue
        x = np.arange(1, len(steps) + 1)
        value = np.array([s["value"] for s in steps], dtype=np.float64)
        best = np.array([s["best"] for s in steps], dtype=np.float64)
        ax.scatter(x, np.clip(value, None, _clip(best, value)), s=9, color=colour, alpha=0.35)
        ax.step(x, best, where="post", color=colour, linewidth=1.8, label=f"{name} (best {best[-1]:.3g})")
        for i, s in enumerate(steps):
            if s.get("shift") and i > 0:
                ax.axvline(i + 0.5, color="grey", linestyle=":", linewidth=1)
    if slo_ms is not None and ylabel.startswith("latency"):
        ax.axhline(slo_ms, color="red", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("measurement")
    ax.set_ylabel(ylabel)
    ax.grid(linewidth=0.3, alpha=0.6, which="both")
    plain_log_ticks(ax.yaxis)  # 6, 20, 100 rather than 6×10^0
    integer_ticks(ax.xaxis)
    ax.set_title(title or "tuning: measured (dots) and best so far (line)", fontsize=10)
    ax.legend(fontsize=8, framealpha=0.8, loc="upper right")
    return save_figure(fig, path)


def _clip(best: np.ndarray, value: np.ndarray) -> float:
    """An upper display limit so a few saturated measurements do not flatten the plot."""
    finite = value[np.isfinite(value)]
    top = float(np.percentile(finite, 90)) if finite.size else 1.0
    return max(top, float(np.nanmax(best[np.isfinite(best)])) if np.isfinite(best).any() else top) * 3


def plot_heatmap(
    values: Mapping[tuple[int, int], float],
    rows: Sequence[int],
    cols: Sequence[int],
    path: str | Path,
    row_label: str = "workers",
    col_label: str = "max batch",
    measured: Sequence[tuple[int, int]] = (),
    best: tuple[int, int] | None = None,
    title: str | None = None,
    unit: str = "ms",
) -> Path:
    """A (rows x cols) heatmap of the best value over the other knobs; measured cells dotted, the best starred."""
    grid = np.full((len(rows), len(cols)), np.nan)
    for (r, c), v in values.items():
        if r in rows and c in cols:
            grid[list(rows).index(r), list(cols).index(c)] = v
    fig = new_figure(max(5.5, 1.1 + 0.75 * len(cols)), max(3.0, 1.2 + 0.55 * len(rows)))
    ax = fig.add_subplot()
    shown = np.log10(np.clip(grid, 1e-9, None))
    im = ax.imshow(shown, cmap="viridis_r", aspect="auto", origin="lower")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=7, color="white")
    for r, c in measured:
        if r in rows and c in cols:
            ax.plot(list(cols).index(c), list(rows).index(r) - 0.3, "o", color="red", markersize=3)
    if best is not None and best[0] in rows and best[1] in cols:
        ax.plot(list(cols).index(best[1]), list(rows).index(best[0]) + 0.3, "*", color="orange", markersize=11)
    ax.set_xticks(range(len(cols)), [f"{c:g}" for c in cols])
    ax.set_yticks(range(len(rows)), [f"{r:g}" for r in rows])
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    bar = fig.colorbar(im, ax=ax)
    bar.set_label(f"log10 {unit}")
    ax.set_title(title or f"best {unit} over the other knobs (red: measured, star: chosen)", fontsize=9)
    return save_figure(fig, path)


def plot_profile(profile: ServiceProfile, samples: Sequence[ServiceSample], path: str | Path) -> Path:
    """Measured batch times (dots) and the fitted service-time model (lines) per (intra, inter) thread setting."""
    fig = new_figure(7.0, 4.0)
    ax = fig.add_subplot()
    pairs = sorted({(s.intra, s.inter) for s in samples})
    for k, (i, o) in enumerate(pairs):
        pts = sorted((s.rows, s.ms) for s in samples if (s.intra, s.inter) == (i, o))
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o", color=f"C{k}", label=f"measured intra {i} inter {o}")
        ax.plot(xs, [profile.service_ms(x, i, o) for x in xs], "-", color=f"C{k}", alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows per batch")
    ax.set_ylabel("service time (ms)")
    ax.grid(linewidth=0.3, alpha=0.6)
    ax.legend(fontsize=8)
    ax.set_title("one batch through ONNX Runtime: measured (dots) and fitted model (lines)", fontsize=9)
    return save_figure(fig, path)
