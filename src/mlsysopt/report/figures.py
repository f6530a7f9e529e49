"""Figure helpers every system's plots share: a headless figure factory and an atomic save."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, LogFormatter, MaxNLocator


def new_figure(width: float = 10.0, height: float = 4.0, **kwargs: Any) -> Figure:
    """A pyplot-free Figure (Agg canvas, no global state, nothing to close) with constrained layout."""
    kwargs.setdefault("layout", "constrained")
    return Figure(figsize=(width, height), **kwargs)


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Render ``fig`` to a temp file beside ``path`` and rename it into place (never a half-written image)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".{fmt}.tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format=fmt, dpi=dpi)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def time_unit(seconds: float) -> tuple[float, str]:
    """A (scale, label) pair so that ``seconds * scale`` reads well: s, ms or µs."""
    if seconds > 0 and seconds < 1e-3:
        return 1e6, "µs"
    if seconds > 0 and seconds < 1.0:
        return 1e3, "ms"
    return 1.0, "s"


def integer_ticks(*axes: Any) -> None:
    """Whole-number ticks only on each axis (epochs, evaluations, measurements): never 1.5 epochs."""
    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def compact_ticks(axis: Any, unit: str = "") -> None:
    """Short labels for large linear values (``200k``, ``1.5M``) and at most 6 ticks, so labels never run together."""
    axis.set_major_locator(MaxNLocator(nbins=6))
    axis.set_major_formatter(EngFormatter(unit=unit, sep=""))
    axis.get_offset_text().set_visible(False)


def plain_log_ticks(axis: Any) -> None:
    """Log-axis labels as plain numbers (``0.5``, ``6``, ``2,000``), not ``6×10^0``; a linear axis is left as is."""
    if axis.get_scale() != "log":
        return
    axis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1.0, 0.4)))


class _PlainLogFormatter(LogFormatter):
    """matplotlib's choice of which log ticks to label, written as plain numbers."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:,.6g}" if super().__call__(x, pos) else ""
