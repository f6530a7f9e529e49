"""``mlsysopt runs compare``'s figure: the runs' table beside their best-so-far curves, in one image."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from mlsysopt.report.figures import integer_ticks, new_figure, save_figure


def plot_compare(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    curves: Mapping[str, Sequence[float]],
    path: str | Path,
    ylabel: str = "best value so far",
    title: str | None = None,
) -> Path:
    """A table (one column per run) on the left, each run's best value after every trial on the right."""
    width = 6.0 + 1.6 * max(len(columns) - 1, 1)
    fig = new_figure(min(width + 6.0, 22.0), max(3.8, 0.32 * len(rows) + 1.4))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [width / 6.0, 1.2]})
    left.axis("off")
    cells = [[str(c)[:40] for c in row] for row in rows]
    table = left.table(cellText=cells, colLabels=[str(c)[:24] for c in columns], loc="center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.scale(1.0, 1.25)
    for (r, c), cell in table.get_celld().items():
        cell.set_linewidth(0.3)
        if r == 0 or c == 0:
            cell.set_text_props(fontweight="bold")
    longest = 1
    for label, curve in curves.items():
        y = np.asarray(curve, dtype=np.float64)
        if y.size == 0 or not np.isfinite(y).any():
            continue
        longest = max(longest, y.size)
        last = y[np.isfinite(y)][-1]
        right.plot(np.arange(1, y.size + 1), y, linewidth=1.5, label=f"{label} ({last:.4g})")
    right.set_xlim(0, longest + 1)
    integer_ticks(right.xaxis)
    right.set_xlabel("trial")
    right.set_ylabel(ylabel)
    right.grid(linewidth=0.3, alpha=0.6)
    if curves:
        right.legend(fontsize=7, framealpha=0.8, loc="best")
    fig.suptitle(title or "runs compared", fontsize=10)
    return save_figure(fig, path)
