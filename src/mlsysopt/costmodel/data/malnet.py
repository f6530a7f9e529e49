"""MalNet function-call graphs: ``*.edgelist`` files, split files, and local-degree-profile node features.

Published layout (MalNet ``malnet-graphs[-tiny]`` + ``split_info[_tiny]``)::

    root/<type>/<family>/<sha256>.edgelist     header lines starting with '#', then one "src dst" pair per line
    split_dir/{train,val,test}.txt             one graph per line: "<type>/<family>/<sha256>" (no extension)

The class of a graph is its ``<type>`` folder; ``classes`` is the sorted list of type folders under ``root``
(the 5 MalNet types: addisplay, adware, benign, downloader, trojan), so labels are the same in every split.
``split_dir`` defaults to ``root/split_info`` (or ``root/split_info/type`` when the files sit there, as in the
published ``split_info_tiny`` archive); split "valid" reads ``val.txt`` when there is no ``valid.txt``.
A line with a trailing ``.edgelist`` is accepted too.

Graphs are directed call graphs; edges are kept as read (src -> dst), ``num_nodes = max id + 1`` (as PyG's
MalNetTiny does). Node features are the 5 statistics of PyG's ``LocalDegreeProfile`` over that directed edge
list (degree = out-degree, neighbours = out-neighbours): [deg, min, max, mean, std of neighbours' degrees],
0 where a node has no neighbour. They are computed with numpy (sort + ``reduceat``) because graphs reach
1M nodes; memory stays O(edges). Reading is lazy: the constructor checks only that every listed file exists.

SYNTHETIC MalNet-like graphs live in :mod:`mlsysopt.costmodel.data.malnet_synthetic`.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.costmodel.limits import max_nodes
from mlsysopt.errors import InvalidDataFile, MissingSplit

MALNET_CLASSES: tuple[str, ...] = ("addisplay", "adware", "benign", "downloader", "trojan")
DEGREE_PROFILE = ("degree", "min_neighbor_degree", "max_neighbor_degree", "mean_neighbor_degree", "std_neighbor_degree")


def read_edgelist(path: str | Path) -> tuple[np.ndarray, int]:
    """Edges ``(2, m)`` int64 (src -> dst) and ``num_nodes`` of one edgelist; errors name the file and the line.

    Args:
        path: A MalNet edgelist: ``src dst`` per line, ``#`` comments.

    Returns:
        tuple[np.ndarray, int]: Edges and the number of nodes (largest id + 1).

    Shapes:
        edges: (2, num_edges) int64

    Raises:
        InvalidDataFile: If the file is missing, malformed, empty, has negative ids or an id too large for memory.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidDataFile(f"{path}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": reported below instead
            e = np.loadtxt(path, dtype=np.int64, comments="#", ndmin=2)
    except ValueError as err:
        raise InvalidDataFile(f"{path}: malformed edge line ({err}); expected 'src dst' per line") from err
    if e.size == 0:
        raise InvalidDataFile(f"{path}: no edges: the graph is empty")
    if e.shape[1] != 2:
        raise InvalidDataFile(f"{path}: lines have {e.shape[1]} columns, expected 2 ('src dst')")
    if (e < 0).any():
        k = int(np.flatnonzero((e < 0).any(axis=1))[0])
        raise InvalidDataFile(f"{path}: edge {k} ({e[k, 0]} {e[k, 1]}) has a negative node id")

    limit = max_nodes()
    if int(e.max()) >= limit:  # node ids size the feature arrays: bound them before allocating
        k = int(np.flatnonzero((e >= limit).any(axis=1))[0])
        raise InvalidDataFile(
            f"{path}: edge {k} ({e[k, 0]} {e[k, 1]}) names node id {int(e.max()):,}: at most {limit - 1:,} here "
            "(a graph's arrays must fit in half the memory)"
        )
    return np.ascontiguousarray(e.T), int(e.max()) + 1


def write_edgelist(path: str | Path, edge_index: np.ndarray, header: list[str] | None = None) -> Path:
    """Write ``(2, m)`` edges as a MalNet-style edgelist (``# `` header lines, tab-separated), atomically.

    Args:
        path: Output path (parent folders are created).
        edge_index: Edges, ``edge_index[0] -> edge_index[1]``.
        header: Comment lines written first, each prefixed by ``# `` (None: none).

    Returns:
        Path: The written file.

    Shapes:
        edge_index: (2, num_edges) int
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    e = np.ascontiguousarray(np.asarray(edge_index, dtype=np.int64).T)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".edgelist")
    try:
        with os.fdopen(fd, "w") as f:
            for line in header or []:
                f.write(f"# {line}\n")
            step = 1 << 19  # bounded chunks: formatting never holds more than ~0.5M lines at once
            for k in range(0, e.shape[0], step):
                chunk = e[k : k + step]
                f.write(("%d\t%d\n" * chunk.shape[0]) % tuple(chunk.ravel().tolist()))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_split_file(path: str | Path, names: list[str]) -> Path:
    """Write a split file (one graph name per line) atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("".join(f"{s}\n" for s in names))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def degree_profile(edge_index: np.ndarray, num_nodes: int) -> np.ndarray:
    """PyG ``LocalDegreeProfile`` features ``(n, 5)`` float32 of a directed edge list (see the module docstring)."""
    src, dst = np.asarray(edge_index[0], np.int64), np.asarray(edge_index[1], np.int64)
    deg = np.bincount(src, minlength=num_nodes).astype(np.float64)
    out = np.zeros((num_nodes, 5))
    out[:, 0] = deg
    if src.size == 0:
        return out.astype(np.float32)
    order = np.argsort(src, kind="stable")
    nd = deg[dst[order]]
    has = np.flatnonzero(deg > 0)
    starts = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(deg.astype(np.int64), out=starts[1:])
    out[has, 1] = np.minimum.reduceat(nd, starts[has])
    out[has, 2] = np.maximum.reduceat(nd, starts[has])
    mean = np.bincount(src, weights=deg[dst], minlength=num_nodes)[has] / deg[has]
    sq = np.bincount(src, weights=deg[dst] ** 2, minlength=num_nodes)[has] / deg[has]
    out[has, 3] = mean
    out[has, 4] = np.sqrt(np.maximum(sq - mean**2, 0.0))
    return out.astype(np.float32)


def load_malnet_graph(path: str | Path, label: int | None, name: str | None = None) -> GraphRecord:
    """One edgelist as a classification GraphRecord with degree-profile features (``label`` None: unknown class).

    Args:
        path: The edgelist file.
        label: Class id (None: unknown class).
        name: Record name (None: the file stem).

    Returns:
        GraphRecord: A ``malnet`` record with 5 degree-profile features per node.

    Raises:
        InvalidDataFile: If the edgelist is missing or malformed.
    """
    path = Path(path)
    ei, n = read_edgelist(path)
    label = None if label is None else int(label)
    return GraphRecord(name=name or path.stem, task="malnet", x=degree_profile(ei, n), edge_index=ei, label=label)


def _split_file(root: Path, split: str, split_dir: Path | None) -> Path:
    names = [split] + (["val"] if split == "valid" else [])
    dirs = [split_dir] if split_dir is not None else [root / "split_info", root / "split_info" / "type"]
    for d in dirs:
        for s in names:
            if (d / f"{s}.txt").is_file():
                return d / f"{s}.txt"
    raise MissingSplit(f"{dirs[0] / f'{split}.txt'}: no such split file")


class MalNetDataset(GraphDataset):
    """MalNet graphs listed in one split file; ``record(i)`` reads one edgelist (see the module docstring).

    Args:
        root: MalNet folder: one subfolder per class, plus ``split_info/``.
        split: ``"train"``, ``"valid"`` (also read from ``val.txt``) or ``"test"``.
        split_dir: Folder holding the split files (None: ``root/split_info`` or ``root/split_info/type``).

    Raises:
        InvalidDataFile: If ``root`` is missing, the split file is not text, or a line names a missing graph, an
            unknown class or a path outside its class folder.
        MissingSplit: If no split file is found.
    """

    task = "malnet"

    def __init__(self, root: str | Path, split: str, split_dir: str | Path | None = None) -> None:
        self.root = Path(root)
        self.split = split
        if not self.root.is_dir():
            raise InvalidDataFile(f"{self.root}: no such folder")
        self.split_file = _split_file(self.root, split, None if split_dir is None else Path(split_dir))
        skip = {self.split_file.parent.name, "split_info"}
        self.classes = sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith(".") and d.name not in skip
        )
        index = {c: i for i, c in enumerate(self.classes)}
        self._names: list[str] = []
        self.labels: list[int] = []
        self.paths: list[Path] = []
        try:
            lines = self.split_file.read_bytes().decode("utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise InvalidDataFile(
                f"{self.split_file}: not a text split file (byte {err.start} is not UTF-8); expected one "
                "'class/name' per line"
            ) from None
        root = self.root.resolve()
        for lineno, raw in enumerate(lines, start=1):
            rel = raw.strip().removesuffix(".edgelist")
            if not rel:
                continue
            where = f"{self.split_file}: line {lineno}"
            parts = rel.split("/")
            cls = parts[0]
            if cls not in index:
                raise InvalidDataFile(f"{where}: '{rel}' names class '{cls}', not a folder under {self.root}")
            path = self.root / f"{rel}.edgelist"
            if any(p in ("", ".", "..") for p in parts) or not path.resolve().is_relative_to(root / cls):
                raise InvalidDataFile(
                    f"{where}: '{rel}' leaves its class folder {self.root / cls} "
                    "(a split line is 'class/name', without '..' or empty parts)"
                )
            if not path.is_file():
                raise InvalidDataFile(f"{where}: graph '{rel}' is missing ({path} does not exist)")
            self._names.append(rel)
            self.labels.append(index[cls])
            self.paths.append(path)
        if not self._names:
            raise InvalidDataFile(f"{self.split_file}: lists no graph")

    @property
    def names(self) -> list[str]:
        """Graph paths relative to ``root`` without extension, in split-file order."""
        return self._names

    @property
    def num_classes(self) -> int:
        """Number of classes (type folders)."""
        return len(self.classes)

    def record(self, i: int) -> GraphRecord:
        """Read graph ``i`` and compute its degree-profile features."""
        return load_malnet_graph(self.paths[i], self.labels[i], self._names[i])

    def __repr__(self) -> str:
        return f"MalNetDataset({str(self.root)!r}, {self.split!r}, graphs={len(self)}, classes={self.num_classes})"
