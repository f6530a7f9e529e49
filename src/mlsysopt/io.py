"""Small file helpers shared by every package: atomic writes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it into place (never a half file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON atomically."""
    return write_atomic(path, json.dumps(data, indent=2, default=_default))


def _default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def save_torch_atomic(path: str | Path, obj: Any) -> Path:
    """``torch.save`` ``obj`` to ``path`` via a temp file and a rename (never a half-written checkpoint)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return write_atomic(path, buf.getvalue())


def load_torch(path: str | Path, error: type[Exception]) -> Any:
    """``torch.load`` (weights only, onto the CPU), raising ``error`` that says why a file is missing or unreadable."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such checkpoint file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a truncated or foreign file
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise error(f"{path}: not a readable checkpoint ({type(exc).__name__}: {first})") from None
