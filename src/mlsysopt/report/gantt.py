"""Gantt chart of a simulated schedule: one row per device, one bar per task, the critical path outlined."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch

from mlsysopt.errors import InvalidPlacement, WriteFailed
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.simulator import Schedule
from mlsysopt.graph.units import units_of
from mlsysopt.report.figures import new_figure, save_figure, time_unit

#: Past this many tasks no bar gets a text label.
MAX_LABELLED_TASKS = 60
#: At most this many colour classes; rarer ops are merged into "(other)".
MAX_COLOURS = 20

ColourBy = Literal["auto", "op", "hw_type"]


def plot_gantt(
    graph: CompGraph,
    cluster: DeviceCluster,
    schedule: Schedule,
    path: str | Path,
    title: str | None = None,
    color_by: ColourBy = "auto",
    dpi: int = 120,
    units: str | Mapping[str, Any] | None = None,
) -> Path:
    """Draw ``schedule`` as a Gantt chart and write it atomically (format from the suffix of ``path``).

    ``units``: the graph's unit system (``dnn``, ``workflow``, ``synthetic``, or ``describe_units()``'s dict;
    default: the graph's own). Times in seconds are shown in s, ms or µs; synthetic times in time units.
    """
    n, d = graph.num_nodes, cluster.num_devices
    if color_by not in ("auto", "op", "hw_type"):
        raise ValueError(f"color_by must be 'auto', 'op' or 'hw_type', not {color_by!r}")
    if np.shape(schedule.placement) != (n,) or np.shape(schedule.start) != (n,):
        raise InvalidPlacement(f"schedule covers {np.shape(schedule.start)} tasks, the graph has {n}")
    placement = np.asarray(schedule.placement, dtype=np.int64)
    start = np.asarray(schedule.start, dtype=np.float64)
    finish = np.asarray(schedule.finish, dtype=np.float64)
    makespan = float(schedule.makespan)
    if not np.isfinite(makespan) or not np.isfinite(finish).all():
        raise InvalidPlacement(f"cannot plot a schedule whose makespan is {makespan}: its times overflow")
    system = _system(graph, units)
    scale, unit = time_unit(makespan) if system != "synthetic" else (1.0, "time units")

    keys, classes, legend_title = _colour_classes(graph, color_by)
    cmap_colours = _palette(len(classes))
    colours = np.array([cmap_colours[k] for k in keys]) if n else np.zeros((0, 4))

    legend_rows = len(classes) + 2
    height = min(max(2.2 + 0.32 * d, 1.0 + 0.15 * legend_rows), 24.0)
    fig = new_figure(11.0, height)
    ax = fig.add_subplot()
    critical = np.zeros(n, dtype=bool)
    cp = [int(i) for i in schedule.critical_path]
    critical[cp] = True

    left = start * scale
    width = np.maximum(finish - start, 0.0) * scale
    bar_h = 0.72
    edge_lw = 0.3 if n <= 2000 else 0.0
    rest = ~critical
    _bars(ax, left[rest], width[rest], placement[rest], bar_h, colours[rest], edgecolor="white", linewidth=edge_lw)
    if critical.any():
        lw = 1.4 if len(cp) <= 100 else 0.7
        sel = critical
        _bars(ax, left[sel], width[sel], placement[sel], bar_h, colours[sel], edgecolor="black", linewidth=lw)
        _bars(ax, left[sel], width[sel], placement[sel], bar_h, "none", edgecolor="black", linewidth=0, hatch="///")
        if 1 < len(cp) <= 500:
            xs, ys = [], []
            for i in cp:
                xs += [left[i], left[i] + width[i]]
                ys += [placement[i], placement[i]]
            ax.plot(xs, ys, color="black", linewidth=0.8, alpha=0.6, zorder=3)

    if n <= MAX_LABELLED_TASKS:
        span = max(makespan * scale, 1e-300)
        for i in range(n):
            if width[i] >= 0.04 * span:
                ax.text(
                    left[i] + width[i] / 2,
                    placement[i],
                    _short(_printable(graph.names[i])),
                    ha="center",
                    va="center",
                    fontsize=6,
                    clip_on=True,
                    zorder=4,
                )

    ax.axvline(makespan * scale, color="crimson", linestyle="--", linewidth=1.2, zorder=5)
    ax.set_ylim(d - 0.5, -0.5)
    tick_step = max(1, int(np.ceil(d / 40)))
    ticks = np.arange(0, d, tick_step)
    ax.set_yticks(ticks, [_printable(cluster.names[t]) for t in ticks], fontsize=8 if d <= 20 else 6)
    ax.set_xlim(0, max(makespan * scale, 1e-12) * 1.02)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("device")
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    ax.set_axisbelow(True)
    busy = ", ".join(
        [
            f"{n} tasks on {len(np.unique(placement)) if n else 0}/{d} devices",
            f"makespan {makespan * scale:.4g} {unit}",
        ]
    )
    ax.set_title(f"{_printable(title)}\n{busy}" if title else busy, fontsize=10)

    handles = [Patch(facecolor=cmap_colours[k], label=_printable(c)) for k, c in enumerate(classes)]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="critical path"))
    handles.append(Patch(facecolor="crimson", label="makespan"))
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
        frameon=False,
        title=legend_title,
        title_fontsize=7,
    )
    try:
        return save_figure(fig, path, dpi=dpi)
    except OSError as exc:  # disk full, read-only, ...: name the chart, not matplotlib's temp file
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from None


def _system(graph: CompGraph, units: str | Mapping[str, Any] | None) -> str:

    if isinstance(units, Mapping):
        return str(units.get("system", "synthetic"))
    return units if isinstance(units, str) else units_of(graph)


def _bars(
    ax: Any,
    left: np.ndarray,
    width: np.ndarray,
    rows: np.ndarray,
    height: float,
    facecolors: Any,
    **kwargs: Any,
) -> None:
    """All bars as one PolyCollection (one artist, fast for tens of thousands of tasks)."""
    if left.size == 0:
        return
    x0, x1 = left, left + width
    y0, y1 = rows - height / 2, rows + height / 2
    verts = np.stack([np.c_[x0, y0], np.c_[x0, y1], np.c_[x1, y1], np.c_[x1, y0]], axis=1)
    ax.add_collection(PolyCollection(verts, facecolors=facecolors, zorder=2, **kwargs), autolim=False)


def _colour_classes(graph: CompGraph, color_by: ColourBy) -> tuple[np.ndarray, list[str], str]:
    """Per-task colour-class index, the class labels (most common first) and the legend title."""
    if color_by == "auto":
        color_by = "op" if len(np.unique(graph.opcodes)) > 1 else "hw_type"
    if color_by == "hw_type":
        types = np.unique(graph.hw_type)
        lookup = {int(t): k for k, t in enumerate(types)}
        keys = np.array([lookup[int(t)] for t in graph.hw_type], dtype=np.int64)
        return keys, [f"type {int(t)}" for t in types], "hardware type"
    hist = list(graph.op_histogram())
    if len(hist) > MAX_COLOURS:
        kept = hist[: MAX_COLOURS - 1]
        labels = [*kept, "(other)"]
    else:
        kept = labels = hist
    lookup = {op: k for k, op in enumerate(kept)}
    other = len(labels) - 1
    return np.array([lookup.get(op, other) for op in graph.ops], dtype=np.int64), list(labels), "op"


def _palette(k: int) -> np.ndarray:
    """``k`` distinct RGBA colours (tab10 up to 10, tab20 up to 20)."""
    from matplotlib import colormaps  # deferred: matplotlib loads only when a chart is drawn

    if k <= 10:
        return np.asarray(colormaps["tab10"](np.arange(max(k, 1))))
    return np.asarray(colormaps["tab20"](np.arange(k) % 20))


def _printable(name: str) -> str:
    """A name from a file as plain text for matplotlib: ``$`` would start mathtext, control characters show."""
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(name))
    return out.replace("$", r"\$")


def _short(name: str, limit: int = 14) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"
