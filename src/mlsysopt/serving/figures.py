"""Serving plots: values per tuning step, a heatmap of the space, a fitted profile, the latency-throughput curve
and the confirmation of a tune. A value that missed the SLO is drawn and labelled "SLO missed", never as a number.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.ticker import FuncFormatter

from mlsysopt.report.figures import integer_ticks, new_figure, plain_log_ticks, save_figure

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Measurement
    from mlsysopt.serving.confirmation import Confirmation
    from mlsysopt.serving.objective import Objective
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample

SLO_MISSED = "SLO missed"


def _num(v: object) -> float:
    return float("nan") if v is None else float(v)  # type: ignore[arg-type]


def plot_steps(
    runs: Mapping[str, Sequence[Mapping[str, float]]],
    path: str | Path,
    slo_ms: float | None = None,
    ylabel: str = "latency (ms)",
    title: str | None = None,
) -> Path:
    """Per tuner: the measured value at each step (dots) and the best so far (line); the SLO as a dashed level.

    Each run is a list of ``{"value": measured, "best": best so far, "shift": 1 if the workload changed here}``;
    a value of None missed the SLO: it is drawn as a red x on the top edge, labelled "SLO missed".
    """
    fig = new_figure(8.5, 4.2)
    ax = fig.add_subplot()
    colours = [f"C{i % 10}" for i in range(len(runs))]
    missed_any = False
    for colour, (name, steps) in zip(colours, runs.items(), strict=True):
        if not steps:
            continue
        x = np.arange(1, len(steps) + 1)
        value = np.array([_num(s["value"]) for s in steps], dtype=np.float64)
        best = np.array([_num(s["best"]) for s in steps], dtype=np.float64)
        ok = np.isfinite(value)
        if ok.any():
            ax.scatter(x[ok], np.clip(value[ok], None, _clip(best, value[ok])), s=9, color=colour, alpha=0.35)
        if (~ok).any():
            missed_any = True
            ax.scatter(x[~ok], np.ones((~ok).sum()), transform=ax.get_xaxis_transform(), marker="x", s=14,
                       color="red", clip_on=False)  # fmt: skip
        last = f"best {best[-1]:.3g}" if np.isfinite(best[-1]) else f"best: {SLO_MISSED}"
        ax.step(x, best, where="post", color=colour, linewidth=1.8, label=f"{name} ({last})")
        for i, s in enumerate(steps):
            if s.get("shift") and i > 0:
                ax.axvline(i + 0.5, color="grey", linestyle=":", linewidth=1)
    if slo_ms is not None and "latency" in ylabel:
        ax.axhline(slo_ms, color="red", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
    if missed_any:
        ax.scatter([], [], marker="x", color="red", label=f"{SLO_MISSED} (top edge)")
    finite = [
        v for steps in runs.values() for s in steps for v in (_num(s["value"]), _num(s["best"])) if np.isfinite(v)
    ]
    if not finite:
        ax.text(0.5, 0.5, f"every measurement: {SLO_MISSED}", ha="center", transform=ax.transAxes)
        ax.set_yticks([])
    elif min(finite) > 0:
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
    if not finite.size:
        return 1.0
    top = float(np.percentile(finite, 90)) if finite.size else 1.0
    return max(top, float(np.nanmax(best[np.isfinite(best)])) if np.isfinite(best).any() else top) * 3


def plot_heatmap(
    values: Mapping[tuple[int, int], float | None],
    rows: Sequence[int],
    cols: Sequence[int],
    path: str | Path,
    row_label: str = "instances",
    col_label: str = "max batch",
    measured: Sequence[tuple[int, int]] = (),
    best: tuple[int, int] | None = None,
    title: str | None = None,
    unit: str = "ms",
    better: str = "lower",
) -> Path:
    """A (rows x cols) heatmap of the best value over the other knobs; measured cells dotted, the best starred.

    The colour scale is logarithmic, its colour bar labelled in ``unit`` itself (not in log10 units), and yellow is
    always the better end (``better``: ``lower`` for ms and cores, ``higher`` for req/s). A cell whose value is None
    missed the SLO and says so.
    """

    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
    grid = np.full((len(rows), len(cols)), np.nan)
    missed = []
    for (r, c), v in values.items():
        if r in rows and c in cols:
            if v is None:
                missed.append((list(rows).index(r), list(cols).index(c)))
            else:
                grid[list(rows).index(r), list(cols).index(c)] = v
    fig = new_figure(max(5.5, 1.1 + 0.75 * len(cols)), max(3.0, 1.2 + 0.55 * len(rows)))
    ax = fig.add_subplot()
    finite = grid[np.isfinite(grid) & (grid > 0)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 10.0)
    if hi <= lo:
        lo, hi = lo / 1.5, hi * 1.5
    shown = np.where(np.isfinite(grid) & (grid > 0), grid, np.nan)
    cmap = "viridis_r" if better == "lower" else "viridis"
    im = ax.imshow(shown, cmap=cmap, norm=LogNorm(vmin=lo, vmax=hi), aspect="auto", origin="lower")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", fontsize=7, color="white")
    for i, j in missed:
        ax.text(j, i, "SLO\nmissed", ha="center", va="center", fontsize=6, color="red")
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
    plain = FuncFormatter(lambda v, _pos: f"{v:.3g}")
    bar.ax.yaxis.set_major_formatter(plain)
    bar.ax.yaxis.set_minor_formatter(plain)
    bar.ax.tick_params(labelsize=7)
    bar.set_label(f"{unit} (log scale; {better} is better, yellow)")
    heading = title or f"best {unit} over the other knobs (red: measured, star: chosen)"
    ax.set_title("\n".join(textwrap.wrap(heading, 80)), fontsize=8)
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


def plot_curve(rows: Sequence[Measurement], path: str | Path, slo_ms: float | None = None, title: str = "") -> Path:
    """Latency (mean and p99, 95% intervals) against achieved throughput, one point per offered rate.

    The SLO is a dashed level; a saturated point (throughput < 95% of offered, drops, a growing queue) is a red
    ring labelled "saturated"; a p99 above the SLO is labelled "SLO missed".
    """
    fig = new_figure(7.5, 4.4)
    ax = fig.add_subplot()
    order = sorted(rows, key=lambda m: m.workload.rate)
    x = np.array([m.throughput for m in order])
    for key, label, colour in (("mean_ms", "mean", "C0"), ("p99_ms", "p99", "C1")):
        y = np.array([getattr(m, key) for m in order], dtype=np.float64)
        err = np.array([[y[i] - m.ci[key][0], m.ci[key][1] - y[i]] if key in m.ci else [0.0, 0.0]
                        for i, m in enumerate(order)]).T  # fmt: skip
        ok = np.isfinite(y)
        ax.errorbar(x[ok], y[ok], yerr=np.clip(err[:, ok], 0, None), fmt="o-", color=colour, capsize=3,
                    label=f"{label} latency (95% interval)")  # fmt: skip
    for m in order:
        if m.saturated:
            ax.scatter([m.throughput], [m.p99_ms], s=120, facecolors="none", edgecolors="red")
            ax.annotate(f"saturated\n(offered {m.workload.rate:g})", (m.throughput, m.p99_ms), fontsize=7, color="red",
                        textcoords="offset points", xytext=(6, 6))  # fmt: skip
        elif slo_ms is not None and not m.p99_ms <= slo_ms:
            ax.annotate(SLO_MISSED, (m.throughput, m.p99_ms), fontsize=7, color="red", textcoords="offset points",
                        xytext=(6, -10))  # fmt: skip
    if slo_ms is not None:
        ax.axhline(slo_ms, color="red", linestyle="--", linewidth=1, label=f"SLO (p99) {slo_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("achieved throughput (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.grid(linewidth=0.3, alpha=0.6, which="both")
    ax.legend(fontsize=8)
    ax.set_title(title or "latency vs throughput", fontsize=9)
    return save_figure(fig, path)


def plot_confirmation(conf: Confirmation, objective: Objective, path: str | Path) -> Path:
    """Each candidate's confirmed median with its 95% interval (bars) and its search-time value (x), pick starred."""
    fig = new_figure(7.5, 3.8)
    ax = fig.add_subplot()
    for i, c in enumerate(conf.candidates):
        v = objective.value(c.value)
        lo, hi = (objective.value(e) for e in c.interval)
        name = c.config.label() + (" (default)" if c.is_default else "")
        if v is None:
            ax.text(i, 0.5, SLO_MISSED, transform=ax.get_xaxis_transform(), ha="center", color="red", fontsize=8)
        else:
            ends = sorted(e for e in (lo, hi) if e is not None) or [v]
            ax.errorbar([i], [v], yerr=[[max(v - ends[0], 0)], [max(ends[-1] - v, 0)]], fmt="o", color="C0",
                        capsize=4)  # fmt: skip
        s = None if c.search_value is None else objective.value(c.search_value)
        if s is not None:
            ax.scatter([i], [s], marker="x", color="C1")
        if c is conf.pick:
            ax.scatter([i], [v if v is not None else 0], marker="*", s=160, color="orange", zorder=3)
        ax.text(i, -0.02, name, transform=ax.get_xaxis_transform(), rotation=20, ha="right", va="top", fontsize=7)
    ax.set_xticks([])
    ax.set_xlim(-0.6, len(conf.candidates) - 0.4)
    ax.set_ylabel(objective.label)
    ax.scatter([], [], marker="x", color="C1", label="search-time value")
    ax.errorbar([], [], yerr=[], fmt="o", color="C0", label=f"confirmed median, 95% interval ({conf.rounds} rounds)")
    ax.legend(fontsize=7)
    ax.grid(linewidth=0.3, alpha=0.6)
    ax.set_title(f"confirmation at {conf.workload.rate:g} req/s (star: pick)", fontsize=9)
    return save_figure(fig, path)


def plot_study(result: Mapping, path: str | Path) -> Path:
    """Per tuner, the measurements each seed needed to get within 5% of the optimum (dots) and their median (bar)."""
    fig = new_figure(7.5, 3.8)
    ax = fig.add_subplot()
    names = list(result["evals_to_5pct"])
    cap = result["cap"]
    for i, name in enumerate(names):
        for k, key in enumerate(("evals_to_5pct", "shift")):
            vals = [r[key] if r[key] is not None else cap + 1 for r in result["per_seed"] if r["tuner"] == name]
            x = i + (k - 0.5) * 0.35
            label = ("first rate" if key == "evals_to_5pct" else "after the rate change") if i == 0 else None
            ax.bar([x], [result[key][name]], width=0.33, color=f"C{k}", alpha=0.5, label=label)
            ax.scatter(np.full(len(vals), x), vals, s=8, color=f"C{k}")
    ax.set_xticks(range(len(names)), names)
    ax.set_yscale("log")
    ax.set_ylabel("measurements to within 5% of the optimum")
    ax.grid(linewidth=0.3, alpha=0.6, axis="y")
    ax.legend(fontsize=8)
    ax.set_title(f"simulated study: {result['space_size']:,} configurations, {result['seeds']} seeds (median bars)",
                 fontsize=9)  # fmt: skip
    return save_figure(fig, path)
