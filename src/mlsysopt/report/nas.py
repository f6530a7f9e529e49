"""NAS plots: performance against each resource (Pareto view) and the best feasible performance so far per method.

Both take plain JSON-like data, so the CLI, the demo and the benchmark share them:

* a *point* is ``{"perf": float, "resources": {name: value}, "feasible": bool, "group": str (optional)}``;
  a point whose ``perf`` is missing or NaN (a failed evaluation) is counted in the legend but not drawn;
* *limits* are ``{resource: (limit, "max" | "min")}`` (what :class:`mlsysopt.nas.Constraints` reads);
* *background* is ``{resource: array, "perf": array}``, e.g. a whole NAS-Bench-Graph table, drawn in light grey.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import NullFormatter

from mlsysopt.report.figures import compact_ticks, integer_ticks, new_figure, save_figure

RESOURCE_LABELS = {
    "params": "parameters",
    "flops": "FLOPs",
    "latency_ms": "latency (ms)",
    "intensity": "compute intensity (FLOPs/byte)",
}
_LOG_RESOURCES = ("params", "flops")
# which way a resource is better when no constraint says so: "max" = lower is better, "min" = higher is better
_DIRECTION = {"intensity": "min"}


def _finite(v: Any) -> float:
    """``float(v)``, NaN for None or anything not a number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def pareto_front(xs: Sequence[float], ys: Sequence[float], minimize_x: bool = True) -> tuple[list[float], list[float]]:
    """The non-dominated points (lower x when ``minimize_x``, else higher x; higher y), sorted by x."""
    pts = sorted(
        ((x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(x) and math.isfinite(y)),
        key=lambda p: (p[0] if minimize_x else -p[0], -p[1]),
    )
    front: list[tuple[float, float]] = []
    for x, y in pts:
        if not front or y > front[-1][1]:
            front.append((x, y))
    front.sort()
    return [p[0] for p in front], [p[1] for p in front]


def plot_pareto(
    points: Sequence[Mapping[str, Any]],
    resources: Sequence[str],
    path: str | Path,
    limits: Mapping[str, tuple[float, str]] | None = None,
    chosen: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    background: Mapping[str, Any] | None = None,
    background_label: str = "every architecture in the table",
    perf_label: str = "validation performance",
    title: str | None = None,
) -> Path:
    """One panel per resource: evaluated architectures (filled: feasible, hollow: infeasible), the Pareto front,
    each constraint's limit (dashed, its infeasible side shaded) and the chosen architecture(s) (star).

    ``chosen`` is one point or a list of points (one per method, coloured by ``group``).
    """
    limits = dict(limits or {})
    stars = [] if chosen is None else [chosen] if isinstance(chosen, Mapping) else list(chosen)
    resources = list(resources) or ["params"]
    ncols = min(len(resources), 2)
    nrows = math.ceil(len(resources) / ncols)
    fig = new_figure(4.6 * ncols + 0.6, 3.6 * nrows + 0.4)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(resources) :]:
        ax.set_visible(False)
    groups = list(dict.fromkeys(str(p.get("group", "")) for p in points))
    colours = {g: f"C{i % 10}" for i, g in enumerate(groups)}
    perf = np.array([_finite(p.get("perf")) for p in points], dtype=np.float64)
    failed = int(np.sum(~np.isfinite(perf)))
    feasible = np.array([bool(p.get("feasible", True)) for p in points], dtype=bool)
    for k, (ax, res) in enumerate(zip(axes, resources, strict=True)):
        xs = np.array([_finite((p.get("resources") or {}).get(res)) for p in points], dtype=np.float64)
        if background is not None and res in background and "perf" in background:
            bx, by = np.asarray(background[res], dtype=np.float64), np.asarray(background["perf"], dtype=np.float64)
            ax.plot(bx, by, ".", markersize=1.5, color="0.82", alpha=0.6, rasterized=True)
            ax.scatter([], [], s=12, color="0.82", label=background_label)
        ok = np.isfinite(xs) & np.isfinite(perf)
        for g in groups:
            in_g = ok & np.array([str(p.get("group", "")) == g for p in points], dtype=bool)
            name = f"{g}: " if g else ""
            good, bad = in_g & feasible, in_g & ~feasible
            if good.any():
                label = f"{name}feasible ({int(good.sum())})"
                ax.scatter(xs[good], perf[good], s=18, color=colours[g], alpha=0.8, label=label)
            if bad.any():
                label = f"{name}infeasible ({int(bad.sum())})"
                ax.scatter(xs[bad], perf[bad], s=18, facecolors="none", edgecolors=colours[g], label=label)
        kind = limits.get(res, (None, _DIRECTION.get(res, "max")))[1]
        fx, fy = pareto_front(list(xs[ok]), list(perf[ok]), minimize_x=kind != "min")
        if len(fx) > 1:
            ax.step(fx, fy, where="post" if kind != "min" else "pre", color="0.3", linewidth=1, label="Pareto front")
        if res in _LOG_RESOURCES and _wide_positive(xs, background, res):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif res in _LOG_RESOURCES:
            compact_ticks(ax.xaxis)  # 100k 200k, not 100000200000
        if res in limits:
            _draw_limit(ax, *limits[res])
        for c in stars:
            cx, cy = _finite((c.get("resources") or {}).get(res)), _finite(c.get("perf"))
            if math.isfinite(cx) and math.isfinite(cy):
                g = str(c.get("group", ""))
                colour = colours.get(g, "gold") if len(stars) > 1 else "gold"
                label = f"chosen ({g})" if g and len(stars) > 1 else "chosen"
                ax.scatter([cx], [cy], marker="*", s=220, color=colour, edgecolors="black", linewidths=0.8, zorder=5,
                           label=label)  # fmt: skip
        ax.set_xlabel(RESOURCE_LABELS.get(res, res))
        if k % ncols == 0:
            ax.set_ylabel(perf_label)
        ax.grid(linewidth=0.3, alpha=0.6)
        if k == ncols - 1:
            if failed:
                ax.scatter([], [], marker="x", color="red", label=f"failed, not drawn ({failed})")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, framealpha=0.85, loc="best")
    if not points:
        axes[0].text(0.5, 0.5, "nothing evaluated", ha="center", va="center", transform=axes[0].transAxes)
    fig.suptitle(title or "performance vs resources (filled: feasible, hollow: infeasible, star: chosen)", fontsize=10)
    return save_figure(fig, path)


def _wide_positive(xs: np.ndarray, background: Mapping[str, Any] | None, res: str) -> bool:
    """Whether every value is positive and they span more than a decade (a log axis then reads better)."""
    vals = xs[np.isfinite(xs)]
    if background is not None and res in background:
        bx = np.asarray(background[res], dtype=np.float64)
        vals = np.concatenate([vals, bx[np.isfinite(bx)]])
    return vals.size > 0 and bool((vals > 0).all()) and float(vals.max()) > 10.0 * float(vals.min())


def _draw_limit(ax: Any, limit: float, kind: str) -> None:
    """A dashed red line at ``limit``; the side that violates it shaded."""
    label = f"{'min' if kind == 'min' else 'max'} {limit:.4g}"
    ax.axvline(limit, color="red", linestyle="--", linewidth=1.2, label=label)
    lo, hi = ax.get_xlim()
    if kind == "min":
        ax.axvspan(min(lo, limit), limit, color="red", alpha=0.06)
    else:
        ax.axvspan(limit, max(hi, limit), color="red", alpha=0.06)
    ax.set_xlim(min(lo, limit), max(hi, limit))


def plot_best_so_far(
    runs: Mapping[str, Sequence[float]],
    path: str | Path,
    reference: float | None = None,
    reference_label: str = "best feasible in the table",
    ylabel: str = "best feasible validation performance",
    title: str | None = None,
) -> Path:
    """Per method: the best feasible performance after each evaluation (NaN until the first feasible one)."""
    fig = new_figure(7.5, 4.0)
    ax = fig.add_subplot()
    drawn = 0
    for i, (name, values) in enumerate(runs.items()):
        y = np.array([_finite(v) for v in values], dtype=np.float64)
        if not np.isfinite(y).any():
            ax.plot([], [], color=f"C{i % 10}", label=f"{name} (no feasible architecture)")
            continue
        x = np.arange(1, len(y) + 1)
        last = float(y[np.isfinite(y)][-1])
        ax.step(x, y, where="post", color=f"C{i % 10}", linewidth=1.8, label=f"{name} ({last:.4g})")
        drawn += 1
    if reference is not None and math.isfinite(reference):
        ax.axhline(reference, color="black", linestyle=":", linewidth=1.2, label=f"{reference_label} ({reference:.4g})")
    if not drawn:
        ax.text(0.5, 0.5, "no feasible architecture evaluated", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("evaluation")
    integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    ax.grid(linewidth=0.3, alpha=0.6)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, framealpha=0.85, loc="lower right")
    ax.set_title(title or "best feasible performance so far", fontsize=10)
    return save_figure(fig, path)
