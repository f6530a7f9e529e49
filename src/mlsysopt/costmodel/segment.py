"""Graph segments for Graph Segment Training: contiguous topological chunks, METIS parts, and a caching segmenter.

A :class:`Segmentation` maps every node to one segment id in ``0..S-1``. It sorts the nodes by segment once, so
``nodes(s)`` is a slice, and groups a graph's intra-segment edges once per edge array, so ``subgraph(s, edges)``
costs O(size of segment s). Edges whose endpoints lie in different segments are dropped, as in the reference.

* ``contiguous_segments``: TpuGraphs nodes are stored in topological order, so chunks of consecutive node ids are
  segments of the dataflow. Every ``node_splits`` entry starts a new segment; between two split points the range is
  cut into ``ceil(len / max_size)`` chunks of equal size (differing by at most one node).
* ``metis_segments``: the reference's rule ``num_parts = n // max_size + 1`` on the undirected, self-loop-free,
  deduplicated adjacency. METIS balances parts only up to a load-imbalance tolerance (``ufactor``), which we set
  from ``max_size`` so the largest part fits; a part that still exceeds ``max_size`` is cut into equal chunks of its
  sorted node ids. So ``max_size`` bounds the memory of one segment's forward pass for both methods.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.errors import InvalidOption

METHODS: tuple[str, ...] = ("contiguous", "metis")


def _stable_argsort(keys: np.ndarray, num_keys: int) -> np.ndarray:
    """Stable argsort of ids in ``0..num_keys-1``; 16-bit keys let numpy use its O(n) radix sort."""
    if num_keys <= np.iinfo(np.uint16).max:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


class Segmentation:
    """A partition of a graph's nodes into segments ``0..S-1``, each non-empty, with O(size) per-segment access.

    Args:
        assignment: Segment id of every node, ids ``0..S-1`` each used at least once.
        num_segments: Expected S (None: from the assignment).

    Shapes:
        assignment: (num_nodes,) int

    Raises:
        InvalidOption: If the assignment is not a 1-D integer array, has negative ids or an empty segment, or
            disagrees with ``num_segments``.
    """

    def __init__(self, assignment: np.ndarray, num_segments: int | None = None) -> None:
        a = np.asarray(assignment)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise InvalidOption(f"segment assignment must be a 1-D integer array, got shape {a.shape} dtype {a.dtype}")
        a = a.astype(np.int64)
        s = int(a.max()) + 1 if a.size else 0
        if num_segments is not None and int(num_segments) != s:
            raise InvalidOption(f"num_segments={num_segments} but the assignment uses ids 0..{s - 1}")
        if a.size and a.min() < 0:
            raise InvalidOption(f"segment ids must be >= 0, got {int(a.min())}")
        sizes = np.bincount(a, minlength=s)
        if s and sizes.min() == 0:
            raise InvalidOption(f"segment ids must be contiguous: segment {int(np.argmin(sizes))} is empty")
        self.assignment = a
        self.num_segments = s
        self.sizes = sizes
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        # A stable sort keeps node ids ascending inside each segment.
        self._order = _stable_argsort(a, s)
        self._local: np.ndarray | None = None
        self._edges: tuple[weakref.ref, np.ndarray, np.ndarray] | None = None
        for arr in (self.assignment, self.sizes, self.offsets, self._order):
            arr.flags.writeable = False

    @property
    def num_nodes(self) -> int:
        """Number of nodes partitioned."""
        return int(self.assignment.shape[0])

    def __len__(self) -> int:
        return self.num_segments

    def __repr__(self) -> str:
        return f"Segmentation(num_nodes={self.num_nodes}, num_segments={self.num_segments})"

    def _check(self, s: int) -> int:
        if not 0 <= int(s) < self.num_segments:
            raise InvalidOption(f"segment {s} out of range (graph has {self.num_segments} segments)")
        return int(s)

    def nodes(self, s: int) -> np.ndarray:
        """Sorted global node ids of segment ``s`` (a read-only view)."""
        s = self._check(s)
        return self._order[self.offsets[s] : self.offsets[s + 1]]

    def local_index(self) -> np.ndarray:
        """Position of every node inside its own segment, shape (n,)."""
        if self._local is None:
            local = np.empty(self.num_nodes, dtype=np.int64)
            local[self._order] = np.arange(self.num_nodes, dtype=np.int64) - np.repeat(self.offsets[:-1], self.sizes)
            local.flags.writeable = False
            self._local = local
        return self._local

    def _grouped_edges(self, edge_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Intra-segment edges in local ids, grouped by segment, with per-segment offsets (cached per edge array)."""
        if self._edges is not None and self._edges[0]() is edge_index:
            return self._edges[1], self._edges[2]
        ei = np.asarray(edge_index)
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise InvalidOption(f"edge_index must have shape (2, m), got {ei.shape}")
        if ei.size and (ei.min() < 0 or ei.max() >= self.num_nodes):
            raise InvalidOption(f"edge_index has node ids outside 0..{self.num_nodes - 1}")
        seg_u = self.assignment[ei[0]]
        keep = np.flatnonzero(seg_u == self.assignment[ei[1]])
        seg_e = seg_u[keep]
        by_seg = keep[_stable_argsort(seg_e, self.num_segments)]
        local = self.local_index()
        grouped = np.stack((local[ei[0, by_seg]], local[ei[1, by_seg]]))
        counts = np.bincount(seg_e, minlength=self.num_segments)
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        me = weakref.ref(self)

        def forget(dead: weakref.ref) -> None:
            # Free the grouped edges with the record's edge array, so cached segmentations stay O(n) in memory.
            seg = me()
            if seg is not None and seg._edges is not None and seg._edges[0] is dead:
                seg._edges = None

        try:
            ref = weakref.ref(edge_index, forget)
        except TypeError:  # not weak-referenceable (e.g. a list): nothing to cache against
            return grouped, offsets
        self._edges = (ref, grouped, offsets)
        return grouped, offsets

    def subgraph(self, s: int, edge_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Segment ``s`` as ``(local_edge_index (2, m_s), nodes)``: edges leaving the segment are dropped.

        ``local_edge_index`` indexes into ``nodes``. The first call with a given edge array groups all its edges
        (O(m)); later calls with the same array object are O(size of segment ``s``).
        """
        s = self._check(s)
        grouped, offsets = self._grouped_edges(edge_index)
        return grouped[:, offsets[s] : offsets[s + 1]], self.nodes(s)


def _check_size(max_size: int) -> int:
    if isinstance(max_size, bool) or not isinstance(max_size, (int, np.integer)) or max_size < 1:
        raise InvalidOption(f"segment size must be an integer >= 1, got {max_size!r}")
    return int(max_size)


def _check_num_nodes(num_nodes: int) -> int:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 0:
        raise InvalidOption(f"num_nodes must be an integer >= 0, got {num_nodes!r}")
    return int(num_nodes)


def _equal_chunks(starts: np.ndarray, lengths: np.ndarray, max_size: int) -> np.ndarray:
    """Start offsets of ``ceil(len / max_size)`` near-equal chunks for each range ``[start, start + len)``."""
    k = -(-lengths // max_size)
    rng = np.repeat(np.arange(len(lengths)), k)
    j = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    return starts[rng] + (j * lengths[rng]) // k[rng]


def contiguous_segments(num_nodes: int, max_size: int, node_splits: np.ndarray | None = None) -> Segmentation:
    """Cut node ids ``0..n-1`` (topological order) into chunks of at most ``max_size``; each split starts a chunk.

    Args:
        num_nodes: Number of nodes, >= 0.
        max_size: Largest segment, >= 1.
        node_splits: Node ids in ``0..num_nodes`` where a segment must start (None: none).

    Returns:
        Segmentation: Contiguous segments, near-equal in size within each range between splits.

    Shapes:
        node_splits: (num_splits,) int

    Raises:
        InvalidOption: For a bad ``num_nodes``, ``max_size`` or ``node_splits``.
    """
    n = _check_num_nodes(num_nodes)
    max_size = _check_size(max_size)
    bounds = np.array([0, n], dtype=np.int64)
    if node_splits is not None:
        sp = np.asarray(node_splits).reshape(-1)
        if sp.size and not np.issubdtype(sp.dtype, np.integer):
            raise InvalidOption(f"node_splits must be integer node ids, got dtype {sp.dtype}")
        if sp.size and (sp.min() < 0 or sp.max() > n):
            raise InvalidOption(f"node_splits must lie in 0..{n}, got values in {int(sp.min())}..{int(sp.max())}")
        bounds = np.union1d(bounds, sp.astype(np.int64))
    lengths = np.diff(bounds)
    starts = bounds[:-1][lengths > 0]
    lengths = lengths[lengths > 0]
    chunk_starts = _equal_chunks(starts, lengths, max_size)
    sizes = np.diff(np.append(chunk_starts, n))
    return Segmentation(np.repeat(np.arange(len(sizes), dtype=np.int64), sizes), len(sizes))


def undirected_csr(edge_index: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric adjacency without self loops or duplicate edges, as int64 ``(xadj, adjncy)`` (METIS' CSR)."""
    ei = np.asarray(edge_index, dtype=np.int64)
    u = np.concatenate((ei[0], ei[1]))
    v = np.concatenate((ei[1], ei[0]))
    keep = u != v
    u, v = u[keep], v[keep]
    if u.size:
        key = np.sort(u * num_nodes + v)  # sorted by (u, v); np.unique is much slower than sort + diff here
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
        u, v = key // num_nodes, key % num_nodes
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=num_nodes), out=xadj[1:])
    return xadj, np.ascontiguousarray(v, dtype=np.int64)


def metis_segments(edge_index: np.ndarray, num_nodes: int, max_size: int, seed: int = 0) -> Segmentation:
    """METIS k-way partition into ``num_nodes // max_size + 1`` parts (reference rule); no segment > ``max_size``.

    Args:
        edge_index: Edges (direction ignored).
        num_nodes: Number of nodes, >= 0.
        max_size: Largest segment, >= 1.
        seed: METIS seed.

    Returns:
        Segmentation: The partition.

    Shapes:
        edge_index: (2, num_edges) int

    Raises:
        InvalidOption: For a bad shape, out-of-range node ids, ``num_nodes`` or ``max_size``.
    """
    import pymetis  # deferred: pymetis is an optional extra

    n = _check_num_nodes(num_nodes)
    max_size = _check_size(max_size)
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise InvalidOption(f"edge_index must have shape (2, m), got {ei.shape}")
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise InvalidOption(f"edge_index has node ids outside 0..{n - 1}")
    if n == 0:
        return Segmentation(np.zeros(0, dtype=np.int64), 0)
    num_parts = n // max_size + 1
    if num_parts == 1:
        return Segmentation(np.zeros(n, dtype=np.int64), 1)
    xadj, adjncy = undirected_csr(ei, n)
    opts = pymetis.Options()
    opts.seed = int(seed)
    # Load imbalance (in 1/1000) that keeps METIS' largest part within max_size; leftovers are split below.
    opts.ufactor = int(np.clip(np.floor(1000 * (max_size * num_parts / n - 1)), 1, 30))
    part = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy), options=opts).vertex_part
    _, parts = np.unique(np.asarray(part, dtype=np.int64), return_inverse=True)  # drop empty parts, renumber
    return _split_oversized(parts.reshape(-1), max_size)


def _split_oversized(parts: np.ndarray, max_size: int) -> Segmentation:
    """Cut every part larger than ``max_size`` into near-equal chunks of its sorted node ids."""
    seg = Segmentation(parts)
    if seg.num_segments == 0 or seg.sizes.max() <= max_size:
        return seg
    chunk_starts = _equal_chunks(seg.offsets[:-1], seg.sizes, max_size)  # positions in the segment-sorted order
    sizes = np.diff(np.append(chunk_starts, seg.num_nodes))
    out = np.empty(seg.num_nodes, dtype=np.int64)
    out[seg._order] = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    return Segmentation(out, len(sizes))


def _digest(*arrays: np.ndarray | None, sample: int = 1 << 16) -> str:
    """Short fingerprint of arrays; large ones are hashed on an evenly strided sample of their columns."""
    h = hashlib.blake2b(digest_size=8)
    for arr in arrays:
        if arr is None:
            h.update(b"none")
            continue
        a = np.asarray(arr)
        h.update(repr(a.shape).encode())
        if a.ndim >= 1 and a.shape[-1] > sample:
            a = a[..., :: -(-a.shape[-1] // sample)]
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


class Segmenter:
    """Partition records with one method and segment size, caching per graph in memory and optionally on disk.

    The memory cache is keyed by ``(name, n, m, method, max_size)`` plus a fingerprint of the inputs that decide the
    partition (``node_splits`` for contiguous, a strided sample of the edges for METIS), and keeps the
    ``memory_items`` most recently used graphs. With ``cache_dir`` each partition is also written there as a ``.npy``
    of segment ids (temp file + rename, so a crash never leaves a half-written file); an unreadable or inconsistent
    cache file is recomputed and overwritten.

    Args:
        method: ``"contiguous"`` or ``"metis"``.
        max_size: Largest segment in nodes, >= 1.
        cache_dir: Folder caching partitions as ``.npy`` files (None: memory cache only).
        seed: METIS seed.
        memory_items: Graphs kept in the memory cache (0: none).

    Raises:
        InvalidOption: For an unknown method or a bad ``max_size``.
    """

    def __init__(
        self,
        method: str = "contiguous",
        max_size: int = 1000,
        cache_dir: str | os.PathLike | None = None,
        seed: int = 0,
        memory_items: int = 1024,
    ) -> None:
        if method not in METHODS:
            raise InvalidOption(f"unknown segmentation method '{method}' (choose from: {', '.join(METHODS)})")
        self.method = method
        self.max_size = _check_size(max_size)
        self.seed = int(seed)
        self.memory_items = max(0, int(memory_items))
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._memory: OrderedDict[tuple, Segmentation] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _key(self, record: GraphRecord) -> tuple:
        if self.method == "contiguous":
            fp = _digest(record.node_splits)
        else:
            fp = _digest(record.edge_index) + f"s{self.seed}"
        return (record.name, record.num_nodes, record.num_edges, self.method, self.max_size, fp)

    def _path(self, key: tuple) -> Path:
        assert self.cache_dir is not None
        name, n, m, method, size, fp = key
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]
        return self.cache_dir / f"{safe}-{method}{size}-n{n}-m{m}-{fp}.npy"

    def _compute(self, record: GraphRecord) -> Segmentation:
        if self.method == "contiguous":
            return contiguous_segments(record.num_nodes, self.max_size, record.node_splits)
        return metis_segments(record.edge_index, record.num_nodes, self.max_size, seed=self.seed)

    def _load(self, path: Path, n: int) -> Segmentation | None:
        try:
            seg = Segmentation(np.load(path, allow_pickle=False))
        except (OSError, ValueError, InvalidOption):
            return None
        if seg.num_nodes != n or (seg.num_segments and seg.sizes.max() > self.max_size):
            return None
        return seg

    def _save(self, path: Path, seg: Segmentation) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, seg.assignment)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __call__(self, record: GraphRecord) -> Segmentation:
        """The segmentation of ``record``, from the cache when this graph was seen before."""
        key = self._key(record)
        seg = self._memory.get(key)
        if seg is not None:
            self._memory.move_to_end(key)
            self.hits += 1
            return seg
        path = self._path(key) if self.cache_dir is not None else None
        seg = self._load(path, record.num_nodes) if path is not None and path.exists() else None
        if seg is None:
            self.misses += 1
            seg = self._compute(record)
            if path is not None:
                self._save(path, seg)
        else:
            self.hits += 1
        if self.memory_items:
            self._memory[key] = seg
            while len(self._memory) > self.memory_items:
                self._memory.popitem(last=False)
        return seg

    def clear(self) -> None:
        """Forget the in-memory cache (files in ``cache_dir`` stay)."""
        self._memory.clear()
