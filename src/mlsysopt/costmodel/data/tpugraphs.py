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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.errors import InvalidDataFile, InvalidOption, MissingSplit
from mlsysopt.graph.ir import BASE_FEATURES, CompGraph
from mlsysopt.graph.vocab import build_vocab

NODE_FEAT_DIM = 140
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


#: Largest |node feature| a file may hold: real TpuGraphs features (dims, sizes, strides) stay far below it; 3e38
#: (float32's limit) would overflow the first product the model or the tree baselines compute.
MAX_FEATURE = 1e15


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
    from mlsysopt.io.npz import check_npz_headers

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


# ---------------------------------------------------------------------------- validation helpers
def _get(a: Mapping[str, np.ndarray], key: str, where: str) -> np.ndarray:
    if key not in a:
        raise InvalidDataFile(f"{where}: missing key '{key}' (has: {', '.join(sorted(a)) or 'nothing'})")
    return np.asarray(a[key])


def _shape(arr: np.ndarray, key: str, expected: tuple[int, ...], where: str, why: str = "") -> None:
    if arr.shape != expected:
        note = f" ({why})" if why else ""
        raise InvalidDataFile(f"{where}: key '{key}' has shape {arr.shape}, expected {expected}{note}")


def _ints(arr: np.ndarray, key: str, where: str) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidDataFile(f"{where}: key '{key}' has dtype {arr.dtype}, expected integers")
    return arr.astype(np.int64, copy=False)


def _floats(arr: np.ndarray, key: str, where: str, dtype: Any = np.float32) -> np.ndarray:
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise InvalidDataFile(f"{where}: key '{key}' has dtype {arr.dtype}, expected numbers")
    out = arr.astype(dtype, copy=False)
    bad = ~np.isfinite(out)
    if bad.any():
        pos = tuple(int(v[0]) for v in np.nonzero(bad))
        raise InvalidDataFile(f"{where}: key '{key}' has a non-finite value {out[pos]} at index {pos}")
    return out


def _in_range(arr: np.ndarray, key: str, n: int, where: str, what: str) -> None:
    bad = np.argwhere((arr < 0) | (arr >= n))
    if bad.size:
        k = tuple(int(v) for v in bad[0])
        at = f"row {k[0]} ({arr[k[0]].tolist()})" if arr.ndim == 2 else f"entry {k[0]} ({int(arr[k])})"
        raise InvalidDataFile(f"{where}: key '{key}' {at} is out of range: {what} has {n} nodes (ids 0..{n - 1})")


def _positive(arr: np.ndarray, key: str, where: str) -> None:
    bad = np.flatnonzero(arr <= 0)
    if bad.size:
        k = int(bad[0])
        raise InvalidDataFile(f"{where}: key '{key}' entry {k} is {arr[k]} (runtimes must be > 0)")


def _graph(a: Mapping[str, np.ndarray], where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """node_feat, node_opcode and the flipped (2, m) edge_index, validated."""
    nf = _get(a, "node_feat", where)
    if nf.ndim != 2:
        raise InvalidDataFile(f"{where}: key 'node_feat' has shape {nf.shape}, expected (n, {NODE_FEAT_DIM})")
    n = nf.shape[0]
    if n == 0:
        raise InvalidDataFile(f"{where}: key 'node_feat' has 0 rows: the graph is empty")
    _shape(nf, "node_feat", (n, NODE_FEAT_DIM), where)
    x = _floats(nf, "node_feat", where)
    op = _ints(_get(a, "node_opcode", where), "node_opcode", where)
    _shape(op, "node_opcode", (n,), where, f"node_feat has {n} rows")
    if (op < 0).any():
        k = int(np.flatnonzero(op < 0)[0])
        raise InvalidDataFile(f"{where}: key 'node_opcode' entry {k} is negative ({op[k]})")
    ei = _get(a, "edge_index", where)
    if ei.size == 0:
        ei = ei.reshape(0, 2)
    if ei.ndim != 2 or ei.shape[1] != 2:
        raise InvalidDataFile(f"{where}: key 'edge_index' has shape {ei.shape}, expected (m, 2)")
    ei = _ints(ei, "edge_index", where)
    _in_range(ei, "edge_index", n, where, "the graph")
    big = np.abs(x) > MAX_FEATURE
    if big.any():
        r, c = (int(v[0]) for v in np.nonzero(big))
        raise InvalidDataFile(
            f"{where}: key 'node_feat' row {r} column {c} is {x[r, c]:.3g}, beyond the {MAX_FEATURE:.0e} no TpuGraphs "
            "feature (dims, sizes, strides) comes near: a corrupt file"
        )
    loops = np.flatnonzero(ei[:, 0] == ei[:, 1])
    if loops.size:
        k = int(loops[0])
        raise InvalidDataFile(
            f"{where}: key 'edge_index' row {k} ({ei[k].tolist()}) is a self-loop: HLO graphs are DAGs"
        )
    _acyclic(ei, n, where)
    # TpuGraphs row [u, v]: u consumes v, i.e. data flows v -> u.
    return x, op, np.ascontiguousarray(ei[:, ::-1].T)


def _acyclic(ei: np.ndarray, n: int, where: str) -> None:
    """InvalidDataFile naming a node on a cycle of ``edge_index`` (rows ``[consumer, producer]``)."""
    from mlsysopt.graph.topology import build_csr, kahn_levels

    indptr, child, _ = build_csr(ei[:, 1], ei[:, 0], n)
    indeg = np.bincount(ei[:, 0], minlength=n).astype(np.int64)
    _, ordered = kahn_levels(indptr, child, indeg)
    if ordered < n:
        node = int(np.flatnonzero(indeg > 0)[0])
        raise InvalidDataFile(
            f"{where}: key 'edge_index' has a cycle through node {node} ({n - ordered} nodes on or after cycles): "
            "HLO graphs are DAGs"
        )


def _runtime(a: Mapping[str, np.ndarray], key: str, where: str) -> np.ndarray:
    rt = _get(a, key, where)
    if rt.ndim != 1:
        raise InvalidDataFile(f"{where}: key '{key}' has shape {rt.shape}, expected (c,)")
    if rt.shape[0] == 0:
        raise InvalidDataFile(f"{where}: key '{key}' has 0 entries: the graph has zero configurations")
    rt = _floats(rt, key, where, np.float64)
    _positive(rt, key, where)
    return rt


def _splits(a: Mapping[str, np.ndarray], n: int, where: str) -> np.ndarray | None:
    if "node_splits" not in a:
        return None
    s = _ints(np.asarray(a["node_splits"]).reshape(-1), "node_splits", where)
    bad = np.flatnonzero((s < 0) | (s > n))
    if bad.size:
        k = int(bad[0])
        raise InvalidDataFile(
            f"{where}: key 'node_splits' entry {k} is {s[k]}, outside 0..{n} (the graph has {n} nodes)"
        )
    s = np.unique(s)
    return s[(s > 0) & (s < n)]


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
    x, op, ei = _graph(a, where)
    n = x.shape[0]
    ids = _get(a, "node_config_ids", where)
    if ids.ndim != 1:
        raise InvalidDataFile(f"{where}: key 'node_config_ids' has shape {ids.shape}, expected (nc,)")
    if ids.shape[0] == 0:
        raise InvalidDataFile(f"{where}: key 'node_config_ids' is empty: the graph has no configurable node")
    ids = _ints(ids, "node_config_ids", where)
    _in_range(ids, "node_config_ids", n, where, "the graph")
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InvalidDataFile(f"{where}: key 'node_config_ids' lists node {int(uniq[counts > 1][0])} more than once")
    rt = _runtime(a, "config_runtime", where)
    c, nc = rt.shape[0], ids.shape[0]
    ncf = _get(a, "node_config_feat", where)
    why = f"config_runtime has {c} entries, node_config_ids has {nc}"
    _shape(ncf, "node_config_feat", (c, nc, LAYOUT_CONFIG_DIM), where, why)
    ncf = _floats(ncf, "node_config_feat", where)
    return GraphRecord(
        name=name,
        task="layout",
        x=x,
        edge_index=ei,
        opcode=op,
        node_splits=_splits(a, n, where),
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
    x, op, ei = _graph(a, where)
    rt = _runtime(a, "config_runtime", where)
    c = rt.shape[0]
    norm = _get(a, "config_runtime_normalizers", where)
    _shape(norm, "config_runtime_normalizers", (c,), where, f"config_runtime has {c} entries")
    norm = _floats(norm, "config_runtime_normalizers", where, np.float64)
    _positive(norm, "config_runtime_normalizers", where)
    cf = _get(a, "config_feat", where)
    _shape(cf, "config_feat", (c, TILE_CONFIG_DIM), where, f"config_runtime has {c} entries")
    cf = _floats(cf, "config_feat", where)
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
    from mlsysopt.costmodel.data.malnet import MalNetDataset

    root = Path(root)
    if (root / split).is_dir() and any((root / split).glob("*.npz")):
        return TpuGraphsDataset(root, split)
    if (root / "split_info").is_dir():
        return MalNetDataset(root, split)
    raise MissingSplit(
        f"{root}: neither TpuGraphs ({root}/{split}/*.npz) nor MalNet ({root}/split_info/{split}.txt) data"
    )


# ---------------------------------------------------------------------------- into the shared IR
def to_compgraph(record: GraphRecord, durations: Any = None, op_names: Sequence[str] | None = None) -> CompGraph:
    """A :class:`CompGraph` of a TpuGraphs (or MalNet) record, so it enters the shared IR.

    Node features become columns ``f0..f{F-1}`` next to the base features (all zero, except ``compute`` =
    ``durations`` when given, e.g. per-node costs of one configuration). Opcode ``k`` is named ``op_names[k]``
    when given (the synthetic vocabulary), else ``tpu_op_k``. Raises InvalidGraph if the edges form a cycle.
    Memory: the feature matrix is copied as float64 (n x (F + 6)).

    Args:
        record: A TpuGraphs or MalNet record.
        durations: Per-node ``compute`` values (e.g. costs of one configuration); None: zeros.
        op_names: Name of each opcode id (None: ``tpu_op_<k>``).

    Returns:
        CompGraph: The graph in the shared IR.

    Shapes:
        durations: (num_nodes,) float

    Raises:
        InvalidGraph: If the edges form a cycle.
    """
    n = record.num_nodes
    op = np.zeros(n, np.int64) if record.opcode is None else record.opcode
    k = int(op.max()) + 1
    names = [str(s) for s in op_names][:k] if op_names is not None else []
    names += [f"tpu_op_{j}" for j in range(len(names), k)]
    vocab, ids = build_vocab(names)  # names already in the canonical vocabulary keep its ids
    f = record.x.shape[1]
    x = np.zeros((n, len(BASE_FEATURES) + f))
    if durations is not None:
        x[:, BASE_FEATURES.index("compute")] = np.asarray(durations, dtype=np.float64)
    x[:, len(BASE_FEATURES) :] = record.x
    cols = list(BASE_FEATURES) + [f"f{j}" for j in range(f)]
    meta = {"name": record.name, "task": record.task, "source": "tpugraphs" if record.is_ranking else "malnet"}
    return CompGraph([f"n{i}" for i in range(n)], ids[op], x, cols, record.edge_index, vocab=vocab, meta=meta)


def layout_to_compgraph(record: GraphRecord, durations: Any = None) -> CompGraph:
    """:func:`to_compgraph` for a layout record (InvalidOption for another task)."""
    if record.task != "layout":
        raise InvalidOption(f"record '{record.name}' is a {record.task} record, not layout")
    return to_compgraph(record, durations)


def tile_to_compgraph(record: GraphRecord, durations: Any = None) -> CompGraph:
    """:func:`to_compgraph` for a tile record (InvalidOption for another task)."""
    if record.task != "tile":
        raise InvalidOption(f"record '{record.name}' is a {record.task} record, not tile")
    return to_compgraph(record, durations)
