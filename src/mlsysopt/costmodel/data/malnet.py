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

SYNTHETIC MalNet-like data (:func:`synth_malnet`, :func:`malnet_like_graph`): one generative family per type:
addisplay = preferential attachment (hubs call many functions), adware = power-law cluster (attachment + triangle
closure), benign = recursive call tree plus calls into shared utility functions, downloader = small world
(rewired ring), trojan = communities of uneven size and density; 2 families (parameter variants) per type.
10-60% of each graph's calls go to random functions (the types overlap), and every graph is thinned to a random
1.4-1.9 edges per node from the same size range, so size and density alone say nothing (measured: a GBDT on
(n, m/n) is at chance, one on degree-profile aggregates gets ~0.9). Node ids are shuffled; everything is
vectorised numpy, so memory is O(edges) and 1M-node graphs take seconds.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.errors import InvalidDataFile, InvalidOption, MissingSplit

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
    from mlsysopt.costmodel.limits import max_nodes

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


# ---------------------------------------------------------------------------- SYNTHETIC MalNet-like families
def draw_size(spec: int | tuple[int, int], rng: np.random.Generator, what: str) -> int:
    """``spec`` if an int, else log-uniform in the range ``(lo, hi)``; InvalidOption below 2."""
    lo, hi = (spec, spec) if isinstance(spec, int) else (int(spec[0]), int(spec[1]))
    if lo < 2 or hi < lo:
        raise InvalidOption(f"{what} must be an int >= 2 or a range (lo, hi) with 2 <= lo <= hi, got {spec}")
    return int(np.exp(rng.uniform(np.log(lo), np.log(hi + 1)))) if hi > lo else lo


MALNET_GENERATORS: dict[str, str] = {
    "addisplay": "preferential",
    "adware": "clustered",
    "benign": "call_tree",
    "downloader": "small_world",
    "trojan": "communities",
}


def _oriented(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    flip = rng.random(a.shape[0]) < 0.5
    return np.stack([np.where(flip, b, a), np.where(flip, a, b)])


def malnet_like_graph(cls: str, num_nodes: int, rng: np.random.Generator, variant: int = 0) -> np.ndarray:
    """SYNTHETIC directed call graph ``(2, m)`` of MalNet type ``cls`` (ids shuffled, no self-loops or duplicates).

    Args:
        cls: MalNet type: ``addisplay``, ``adware``, ``benign``, ``downloader`` or ``trojan``.
        num_nodes: Number of nodes, >= 3.
        rng: Random generator.
        variant: Generator variant (its parity changes the parameters).

    Returns:
        np.ndarray: Directed caller -> callee edges.

    Shapes:
        output: (2, num_edges) int64

    Raises:
        InvalidOption: For an unknown type or fewer than 3 nodes.
    """
    if cls not in MALNET_GENERATORS:
        raise InvalidOption(f"unknown MalNet type '{cls}' (choose from: {', '.join(MALNET_CLASSES)})")
    if num_nodes < 3:
        raise InvalidOption(f"a synthetic MalNet graph needs >= 3 nodes, got {num_nodes}")
    n, kind = num_nodes, MALNET_GENERATORS[cls]
    new = np.arange(1, n, dtype=np.int64)
    if kind == "preferential":  # target ~ floor(i * U^2): in-degree ~ power law, as Barabasi-Albert
        i = np.repeat(new, 2)
        e = np.stack([(i * rng.random(i.size) ** (2.0 + variant % 2)).astype(np.int64), i])  # hub calls newcomer
    elif kind == "clustered":  # attachment + triangle closure through the target's own first target
        t = (new * rng.random(new.size) ** (2.0 + variant % 2)).astype(np.int64)
        first = np.concatenate([[0], t])
        e = np.concatenate([_oriented(new, t, rng), _oriented(new, first[t], rng)], axis=1)
    elif kind == "call_tree":  # caller -> callee tree plus calls into a few shared utilities
        parent = (new * rng.random(new.size) ** (1.0 + variant % 2)).astype(np.int64)
        hubs = rng.choice(n, max(2, int(np.sqrt(n) / 2)), replace=False)
        calls = rng.random(new.size) < 0.95
        util = hubs[np.minimum(rng.zipf(1.5, int(calls.sum())) - 1, hubs.size - 1)]
        e = np.concatenate([np.stack([parent, new]), np.stack([new[calls], util])], axis=1)
    elif kind == "small_world":  # ring with 2 forward neighbours, rewired with p = 0.1 / 0.2
        i = np.repeat(np.arange(n, dtype=np.int64), 2)
        j = (i + np.tile([1, 2], n)) % n
        rewire = rng.random(j.size) < 0.1 * (1 + variant % 2)
        j[rewire] = rng.integers(0, n, int(rewire.sum()))
        e = _oriented(i, j, rng)
    else:  # communities of uneven size and density, 90% of calls stay inside
        k = max(1, n // (60 + 120 * (variant % 2)))
        start = np.r_[0, np.sort(rng.choice(np.arange(1, n), k - 1, replace=False))].astype(np.int64)
        size = np.diff(np.r_[start, n])
        block = np.repeat(np.arange(k), size)
        rate = rng.gamma(4.0, 0.65, size.size)
        deg = rng.poisson(rate[block])
        i = np.repeat(np.arange(n, dtype=np.int64), deg)
        b = block[i]
        inside = start[b] + (rng.random(i.size) * size[b]).astype(np.int64)
        e = np.stack([i, np.where(rng.random(i.size) < 0.9, inside, rng.integers(0, n, i.size))])
    noise = rng.random(e.shape[1]) < rng.uniform(0.1, 0.6)  # random calls blur every family (no easy 100%)
    e[1, noise] = rng.integers(0, n, int(noise.sum()))
    e = e[:, e[0] != e[1]]
    e = np.unique(e[0] * n + e[1])
    keep = int(rng.uniform(1.4, 1.9) * n)  # the same density range for every type: edge counts tell nothing
    if e.size > keep:
        e = np.sort(rng.choice(e, keep, replace=False))
    perm = rng.permutation(n)
    return np.stack([perm[e // n], perm[e % n]])


def synth_malnet(
    out_dir: str | Path,
    graphs_per_class: int = 20,
    nodes: int | tuple[int, int] = (2000, 20000),
    seed: int = 0,
) -> dict[str, list[str]]:
    """Write SYNTHETIC MalNet-like graphs ``out_dir/<type>/<family>/<sha>.edgelist`` and ``out_dir/split_info/*.txt``.

    Families are ``synthetic-<generator>-<variant>`` (2 per type); splits are 70/10/20 per type. Returns the names
    per split. Memory is O(edges) of the largest graph.

    Args:
        out_dir: Output folder.
        graphs_per_class: Graphs per MalNet type, >= 3.
        nodes: Node count, or a ``(lo, hi)`` range drawn log-uniformly; >= 2.
        seed: Seed of the generator.

    Returns:
        dict[str, list[str]]: Graph names (``type/family/sha``) per split (``train``, ``val``, ``test``).

    Raises:
        InvalidOption: For ``graphs_per_class`` < 3 or a bad ``nodes``.
    """
    if graphs_per_class < 3:
        raise InvalidOption(f"graphs_per_class must be >= 3 (one per split), got {graphs_per_class}")
    out = Path(out_dir)
    splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for ci, cls in enumerate(MALNET_CLASSES):
        names = []
        for k in range(graphs_per_class):
            rng = np.random.default_rng([seed, ci, k])
            n, variant = draw_size(nodes, rng, "nodes"), k % 2
            e = malnet_like_graph(cls, n, rng, variant)
            fam = f"synthetic-{MALNET_GENERATORS[cls]}-{variant}"
            sha = hashlib.sha256(f"mlsysopt-synthetic-malnet-{seed}-{cls}-{k}".encode()).hexdigest().upper()
            header = [
                f"SYNTHETIC MalNet-like function call graph (mlsysopt), type {cls}, family {fam}",
                f"Generator: {MALNET_GENERATORS[cls]} variant {variant}, seed {seed}",
                f"Nodes: {int(e.max()) + 1} Edges: {e.shape[1]}",
                "Directed: caller -> callee",
                "FromNodeId\tToNodeId",
            ]
            write_edgelist(out / cls / fam / f"{sha}.edgelist", e, header)
            names.append(f"{cls}/{fam}/{sha}")
        order = np.random.default_rng([seed, ci, 10**6]).permutation(graphs_per_class)
        n_val, n_test = max(1, round(0.1 * graphs_per_class)), max(1, round(0.2 * graphs_per_class))
        cut = graphs_per_class - n_val - n_test
        for split, part in (("train", order[:cut]), ("val", order[cut : cut + n_val]), ("test", order[cut + n_val :])):
            splits[split] += [names[j] for j in sorted(part)]
    for split, names in splits.items():
        write_split_file(out / "split_info" / f"{split}.txt", names)
    return splits
