"""The CompGraph ``.npz`` file: the arrays :meth:`CompGraph.save <mlsysopt.graph.ir.CompGraph.save>` writes and
:meth:`~mlsysopt.graph.ir.CompGraph.load` reads, with a format version, checked headers and errors naming the file
and the key (a lying array header is an error, not a MemoryError)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidGraph, UnsupportedFormat
from mlsysopt.io import loads_json, write_atomic
from mlsysopt.io.npz import check_npz_headers

FORMAT_VERSION = 1
#: Keys every CompGraph file holds (besides ``format_version``).
NPZ_KEYS = ("names", "opcodes", "vocab", "x", "feature_names", "edge_index", "edge_bytes", "hw_type", "meta")


def write_graph_npz(path: str | Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Path:
    """Write a graph's arrays and its ``meta`` (as JSON) to a compressed ``.npz`` atomically.

    Args:
        path: The file to write.
        arrays: Every key of :data:`NPZ_KEYS` but ``meta``.
        meta: JSON-able metadata (values that are not JSON are written as strings).

    Returns:
        The path written.
    """
    buffer = io.BytesIO()
    meta_json = np.array(json.dumps(dict(meta), default=str))
    np.savez_compressed(buffer, format_version=np.array(FORMAT_VERSION), **arrays, meta=meta_json)
    return write_atomic(Path(path), buffer.getvalue())


def read_graph_npz(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read the arrays and the metadata of a graph file written by :func:`write_graph_npz`.

    Args:
        path: The ``.npz`` file.

    Returns:
        The arrays of :data:`NPZ_KEYS` (``meta`` among them, raw) and ``meta`` parsed into a dict.

    Raises:
        InvalidGraph: If the file is missing, lacks a key or its ``meta`` is not a JSON object.
        UnsupportedFormat: If it is not a readable ``.npz`` file.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidGraph(f"{path}: no such file")
    check_npz_headers(path, InvalidGraph)
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in NPZ_KEYS if k not in z.files]
            if missing:
                raise InvalidGraph(f"{path}: not a CompGraph file, missing key '{missing[0]}'")
            d = {k: z[k] for k in NPZ_KEYS}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise UnsupportedFormat(f"{path}: not a readable .npz file ({exc})") from None
    meta = loads_json(str(d["meta"]), InvalidGraph, f"{path}: key 'meta'")
    if not isinstance(meta, dict):
        raise InvalidGraph(f"{path}: key 'meta' is not a JSON object")
    return d, meta
