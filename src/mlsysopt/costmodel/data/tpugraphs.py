"""TpuGraphs layout and tile ``.npz`` files: strict, lazy loading into :class:`GraphRecord`, and atomic writing.

Published layout (``npz_layout_{source}_{search}_{split}.tar`` and ``npz_tile_xla_{split}.tar``): one graph per
``{train,valid,test}/<name>.npz``. Keys and shapes:

* both: ``node_feat`` (n, 140) float32, ``node_opcode`` (n,) integer, ``edge_index`` (m, 2) integer where the row
  ``[u, v]`` means node ``u`` consumes the output of node ``v``;
* layout: ``node_config_ids`` (nc,) integer, ``node_config_feat`` (c, nc, 18) float32, ``config_runtime`` (c,),
  optional ``node_splits`` (any shape, flattened as the reference loader does);
* tile: ``config_feat`` (c, 24) float32, ``config_runtime`` (c,), ``config_runtime_normalizers`` (c,).

Loading flips ``edge_index`` into the library's ``(2, m)`` producer -> consumer form, casts to the record's dtypes
and validates everything: a missing key, a wrong shape or dtype, an empty graph, zero configurations, an edge or a
configurable-node id out of range, a non-finite feature or runtime, a feature beyond ``MAX_FEATURE`` (1e15), a
self-loop or a cycle in ``edge_index`` (HLO graphs are DAGs), or a runtime <= 0 raises
:class:`~mlsysopt.errors.InvalidDataFile` naming the file and the key. The tile target is
``config_runtime / config_runtime_normalizers`` (as in the TpuGraphs tile baseline).

``node_splits`` values are segment *starts*; 0 and n (no-op boundaries) are dropped, duplicates merged.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.malnet import MalNetDataset
from mlsysopt.costmodel.data.npz_checks import (
    as_floats,
    as_ints,
    check_in_range,
    check_positive,
    check_shape,
    graph_arrays,
    node_splits_array,
    require_key,
    runtime_array,
)
from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.errors import InvalidDataFile, InvalidOption, MissingSplit
from mlsysopt.io.npz import check_npz_headers

LAYOUT_CONFIG_DIM = 18
TILE_CONFIG_DIM = 24
LAYOUT_KEYS: tuple[str, ...] = (
    "node_feat",
    "node_opcode",
    "edge_index",
    "node_config_ids",
    "node_config_feat",
    "config_runtime",
)
TILE_KEYS: tuple[str, ...] = (
    "node_feat",
    "node_opcode",
    "edge_index",
    "config_feat",
    "config_runtime",
    "config_runtime_normalizers",
)


def save_npz(path: str | Path, arrays: Mapping[str, np.ndarray], compress: bool = True) -> Path:
    """Write ``arrays`` as one ``.npz`` atomically (temp file in the same folder, then ``os.replace``).

    Args:
        path: Output ``.npz`` path (parent folders are created).
        arrays: Array name to array.
        compress: Whether to write with ``np.savez_compressed``.

    Returns:
        Path: The written file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".npz")
    os.close(fd)
    try:
        (np.savez_compressed if compress else np.savez)(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """All arrays of one ``.npz`` (no pickles); an unreadable file raises InvalidDataFile naming it.

    Args:
        path: A ``.npz`` file.

    Returns:
        dict[str, np.ndarray]: Every array of the file, by name.

    Raises:
        InvalidDataFile: If the file is missing, unreadable or has a malformed array header.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidDataFile(f"{path}: no such file")

    check_npz_headers(path, InvalidDataFile)  # a lying array header: an error naming the file, not a MemoryError
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidDataFile(f"{path}: not a readable .npz file ({e})") from e


def npz_task(path: str | Path) -> str:
    """'layout' or 'tile', from the keys of the file (reads only the zip directory)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            keys = set(f.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise InvalidDataFile(f"{path}: not a readable .npz file ({e})") from e
    if "node_config_feat" in keys:
        return "layout"
    if "config_feat" in keys:
        return "tile"
    raise InvalidDataFile(f"{path}: neither a layout file (key 'node_config_feat') nor a tile file (key 'config_feat')")


# ---------------------------------------------------------------------------- loaders
def layout_record(a: Mapping[str, np.ndarray], name: str, where: str | None = None) -> GraphRecord:
    """Validate layout arrays (as stored in a ``.npz``) into a GraphRecord; errors name ``where`` and the key.

    Args:
        a: Layout arrays: ``node_feat`` (n, 140), ``node_opcode`` (n,), ``edge_index`` (m, 2) consumer -> producer
            as TpuGraphs stores it, ``node_config_ids`` (nc,), ``node_config_feat`` (c, nc, 18), ``config_runtime``
            (c,) and optionally ``node_splits``.
        name: Record name.
        where: What errors name (None: ``name``).

    Returns:
        GraphRecord: A ``layout`` record with edges flipped to producer -> consumer.

    Raises:
        InvalidDataFile: For a missing key or a bad shape, dtype or value.
    """
    where = where or name
    x, op, ei = graph_arrays(a, where)
    n = x.shape[0]
    ids = require_key(a, "node_config_ids", where)
    if ids.ndim != 1:
        raise InvalidDataFile(f"{where}: key 'node_config_ids' has shape {ids.shape}, expected (nc,)")
    if ids.shape[0] == 0:
        raise InvalidDataFile(f"{where}: key 'node_config_ids' is empty: the graph has no configurable node")
    ids = as_ints(ids, "node_config_ids", where)
    check_in_range(ids, "node_config_ids", n, where, "the graph")
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InvalidDataFile(f"{where}: key 'node_config_ids' lists node {int(uniq[counts > 1][0])} more than once")
    rt = runtime_array(a, "config_runtime", where)
    c, nc = rt.shape[0], ids.shape[0]
    ncf = require_key(a, "node_config_feat", where)
    why = f"config_runtime has {c} entries, node_config_ids has {nc}"
    check_shape(ncf, "node_config_feat", (c, nc, LAYOUT_CONFIG_DIM), where, why)
    ncf = as_floats(ncf, "node_config_feat", where)
    return GraphRecord(
        name=name,
        task="layout",
        x=x,
        edge_index=ei,
        opcode=op,
        node_splits=node_splits_array(a, n, where),
        config_node_ids=ids,
        node_config_feat=ncf,
        runtime=rt,
    )


def tile_record(a: Mapping[str, np.ndarray], name: str, where: str | None = None) -> GraphRecord:
    """Validate tile arrays into a GraphRecord whose runtime is config_runtime / config_runtime_normalizers.

    Args:
        a: Tile arrays: ``node_feat`` (n, 140), ``node_opcode`` (n,), ``edge_index`` (m, 2), ``config_feat``
            (c, 24), ``config_runtime`` (c,) and ``config_runtime_normalizers`` (c,), all > 0.
        name: Record name.
        where: What errors name (None: ``name``).

    Returns:
        GraphRecord: A ``tile`` record whose runtime is normalized.

    Raises:
        InvalidDataFile: For a missing key or a bad shape, dtype or value.
    """
    where = where or name
    x, op, ei = graph_arrays(a, where)
    rt = runtime_array(a, "config_runtime", where)
    c = rt.shape[0]
    norm = require_key(a, "config_runtime_normalizers", where)
    check_shape(norm, "config_runtime_normalizers", (c,), where, f"config_runtime has {c} entries")
    norm = as_floats(norm, "config_runtime_normalizers", where, np.float64)
    check_positive(norm, "config_runtime_normalizers", where)
    cf = require_key(a, "config_feat", where)
    check_shape(cf, "config_feat", (c, TILE_CONFIG_DIM), where, f"config_runtime has {c} entries")
    cf = as_floats(cf, "config_feat", where)
    return GraphRecord(name=name, task="tile", x=x, edge_index=ei, opcode=op, graph_config_feat=cf, runtime=rt / norm)


def load_layout_npz(path: str | Path) -> GraphRecord:
    """Read and validate one TpuGraphs layout ``.npz`` (record name = file stem).

    Args:
        path: A TpuGraphs layout ``.npz`` file.

    Returns:
        GraphRecord: The validated ``layout`` record.

    Raises:
        InvalidDataFile: If the file is unreadable or malformed.
    """
    path = Path(path)
    return layout_record(read_npz(path), path.stem, str(path))


def load_tile_npz(path: str | Path) -> GraphRecord:
    """Read and validate one TpuGraphs tile ``.npz`` (record name = file stem).

    Args:
        path: A TpuGraphs tile ``.npz`` file.

    Returns:
        GraphRecord: The validated ``tile`` record.

    Raises:
        InvalidDataFile: If the file is unreadable or malformed.
    """
    path = Path(path)
    return tile_record(read_npz(path), path.stem, str(path))


class TpuGraphsDataset(GraphDataset):
    """TpuGraphs files ``{root}/{split}/*.npz`` (sorted by name), read one at a time on ``record(i)``.

    ``task`` is 'layout' or 'tile'; ``None`` detects it from the keys of the first file.

    Args:
        root: Dataset folder holding ``train/``, ``valid/`` and ``test/``.
        split: Split folder to read, e.g. ``"train"``.
        task: ``"layout"``, ``"tile"`` or None (detected from the first file).

    Raises:
        MissingSplit: If ``root/split`` is missing or holds no ``.npz`` file.
        InvalidOption: For an unknown ``task``.
    """

    def __init__(self, root: str | Path, split: str, task: str | None = None) -> None:
        self.root = Path(root)
        self.split = split
        folder = self.root / split
        if not folder.is_dir():
            raise MissingSplit(f"{folder}: no such folder (expected {self.root}/{{train,valid,test}}/*.npz)")
        self.paths = sorted(folder.glob("*.npz"))
        if not self.paths:
            raise MissingSplit(f"{folder}: no .npz files")
        if task is not None and task not in ("layout", "tile"):
            raise InvalidOption(f"unknown TpuGraphs task '{task}' (choose layout or tile)")
        self.task = task or npz_task(self.paths[0])
        self._names = [p.stem for p in self.paths]

    @property
    def names(self) -> list[str]:
        """File stems, sorted."""
        return self._names

    def record(self, i: int) -> GraphRecord:
        """Read and validate graph ``i``."""
        path = self.paths[i]
        return load_layout_npz(path) if self.task == "layout" else load_tile_npz(path)

    def __repr__(self) -> str:
        return f"TpuGraphsDataset({str(self.root)!r}, {self.split!r}, task={self.task!r}, graphs={len(self)})"


def open_dataset(root: str | Path, split: str) -> GraphDataset:
    """TpuGraphs if ``root/split`` holds ``.npz`` files, else MalNet (``root`` with ``split_info/``).

    Raises MissingSplit when ``root`` has no such split, InvalidDataFile when what it has is malformed.

    Args:
        root: Dataset folder (TpuGraphs or MalNet layout).
        split: Split name, e.g. ``"train"``.

    Returns:
        GraphDataset: A :class:`TpuGraphsDataset` or a :class:`MalNetDataset`.

    Raises:
        MissingSplit: If ``root`` has no such split.
        InvalidDataFile: If what it has is malformed.
    """

    root = Path(root)
    if (root / split).is_dir() and any((root / split).glob("*.npz")):
        return TpuGraphsDataset(root, split)
    if (root / "split_info").is_dir():
        return MalNetDataset(root, split)
    raise MissingSplit(
        f"{root}: neither TpuGraphs ({root}/{split}/*.npz) nor MalNet ({root}/split_info/{split}.txt) data"
    )
