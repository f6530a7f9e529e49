"""Figure helpers every system's plots share: a headless figure factory and an atomic save."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure


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
