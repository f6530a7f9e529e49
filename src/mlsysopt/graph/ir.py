"""CompGraph: the computation-graph IR that every mlsysopt system reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidGraph
from mlsysopt.graph.arrays import as_int_array, as_typed_array
from mlsysopt.graph.graph_file import read_graph_npz, write_graph_npz
from mlsysopt.graph.topology import CSR, build_csr, kahn_levels, priority_order
from mlsysopt.graph.vocab import DEFAULT_VOCAB, build_vocab

#: Features every CompGraph carries (zero where a source does not know them).
#: ``compute`` is what the simulator divides by device speed (FLOPs for DNNs, reference-seconds for workflows).
BASE_FEATURES: tuple[str, ...] = ("flops", "bytes_in", "bytes_out", "params", "out_elems", "compute")


class CompGraph:
    """A DAG of operations: opcodes, named float node features, edges carrying bytes, node names.

    ``edge_index[:, k] = (u, v)`` means data flows from ``u`` to ``v`` (``v`` consumes ``u``'s output).
    ``hw_type[i]`` is the hardware type task ``i`` needs (0 when a source has a single type).
    The constructor validates once; a CompGraph that exists is a valid DAG.

    Args:
        names: Unique node names, one per task (``n`` of them).
        opcodes: Op id of every node, an index into ``vocab``.
        x: Float node features, one column per entry of ``feature_names``; must include every
            :data:`BASE_FEATURES` column, finite and non-negative.
        feature_names: Name of every column of ``x``.
        edge_index: ``(src, dst)`` node ids of every edge (data flows from ``src`` to ``dst``).
        edge_bytes: Bytes carried by every edge (finite, >= 0); None means all zero.
        hw_type: Hardware type every task needs (non-negative); None means type 0 for all.
        vocab: Op names that ``opcodes`` index (default :data:`DEFAULT_VOCAB`).
        meta: Free-form JSON-ready metadata (``name``, source, units, ...).

    Shapes:
        names: (n,) str
        opcodes: (n,) int32 index into ``vocab``
        x: (n, num_features) float64
        edge_index: (2, num_edges) int64 node ids
        edge_bytes: (num_edges,) float64 bytes
        hw_type: (n,) int32 hardware type per task

    Raises:
        InvalidGraph: If any array has the wrong shape, a value out of range, non-finite or negative, names repeat,
            or the edges form a cycle.
    """

    def __init__(
        self,
        names: Sequence[str],
        opcodes: Any,
        x: Any,
        feature_names: Sequence[str],
        edge_index: Any,
        edge_bytes: Any = None,
        hw_type: Any = None,
        vocab: Sequence[str] = DEFAULT_VOCAB,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.names = [str(s) for s in names]
        self.vocab = tuple(str(s) for s in vocab)
        self.feature_names = tuple(str(s) for s in feature_names)
        self.meta = dict(meta or {})
        n = len(self.names)
        self.opcodes = as_int_array(opcodes, np.int32, "opcodes")
        self.x = as_typed_array(x, np.float64, "x")
        ei = as_int_array(edge_index, np.int64, "edge_index")
        if ei.size == 0:
            ei = ei.reshape(2, 0)
        self.edge_index = ei
        m = ei.shape[1] if ei.ndim == 2 else -1
        self.edge_bytes = (
            np.zeros(max(m, 0)) if edge_bytes is None else as_typed_array(edge_bytes, np.float64, "edge_bytes")
        )
        self.hw_type = np.zeros(n, np.int32) if hw_type is None else as_int_array(hw_type, np.int32, "hw_type")
        self.validate()

    @classmethod
    def build(
        cls,
        names: Sequence[str],
        ops: Sequence[str],
        features: Mapping[str, Any],
        edges: Any,
        edge_bytes: Any = None,
        hw_type: Any = None,
        meta: Mapping[str, Any] | None = None,
    ) -> CompGraph:
        """Build from op names and a ``{feature: values}`` dict; missing base features are zero."""
        n = len(names)
        if len(ops) != n:
            raise InvalidGraph(f"{len(ops)} op names given for {n} nodes")
        vocab, ids = build_vocab(ops)
        feats = dict(features)
        cols = list(BASE_FEATURES) + [k for k in feats if k not in BASE_FEATURES]
        x = np.zeros((n, len(cols)))
        for j, name in enumerate(cols):
            if name in feats:
                col = np.asarray(feats[name], dtype=np.float64)
                if col.shape != (n,):
                    raise InvalidGraph(f"feature '{name}' has shape {col.shape}, expected ({n},)")
                x[:, j] = col
        e = np.asarray(edges, dtype=np.int64)
        e = e.reshape(0, 2) if e.size == 0 else e
        if e.ndim != 2 or e.shape[1] != 2:
            raise InvalidGraph(f"edges must be a list of (src, dst) pairs, got shape {e.shape}")
        return cls(names, ids, x, cols, e.T.copy(), edge_bytes, hw_type, vocab, meta)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise InvalidGraph naming the first problem: shape, range, non-finite value, cycle, ..."""
        n = len(self.names)
        if n == 0:
            raise InvalidGraph("graph is empty: it has no nodes")
        if len(set(self.names)) != n:
            seen: set[str] = set()
            dup = next(s for s in self.names if s in seen or seen.add(s))
            raise InvalidGraph(f"node name '{dup}' is used more than once")
        if self.opcodes.shape != (n,):
            raise InvalidGraph(f"opcodes has shape {self.opcodes.shape}, expected ({n},)")
        bad = np.flatnonzero((self.opcodes < 0) | (self.opcodes >= len(self.vocab)))
        if bad.size:
            i = int(bad[0])
            raise InvalidGraph(f"node '{self.names[i]}' has opcode {self.opcodes[i]} outside the vocabulary")
        f = len(self.feature_names)
        if self.x.shape != (n, f):
            raise InvalidGraph(f"x has shape {self.x.shape}, expected ({n}, {f}) for {f} feature names")
        missing = [b for b in BASE_FEATURES if b not in self.feature_names]
        if missing:
            raise InvalidGraph(f"missing base features {missing}")
        if not np.isfinite(self.x).all():
            i, j = (int(v[0]) for v in np.nonzero(~np.isfinite(self.x)))
            raise InvalidGraph(
                f"node '{self.names[i]}' feature '{self.feature_names[j]}' is {self.x[i, j]} (must be finite)"
            )
        base = self.x[:, [self.feature_names.index(b) for b in BASE_FEATURES]]
        if (base < 0).any():
            i, j = (int(v[0]) for v in np.nonzero(base < 0))
            raise InvalidGraph(f"node '{self.names[i]}' feature '{BASE_FEATURES[j]}' is negative ({base[i, j]})")
        with np.errstate(over="ignore"):
            sums = base.sum(axis=0)
        if not np.isfinite(sums).all():
            j = int(np.flatnonzero(~np.isfinite(sums))[0])
            raise InvalidGraph(
                f"feature '{BASE_FEATURES[j]}' sums to inf over the graph: its values are too large to total"
            )
        if self.hw_type.shape != (n,) or (self.hw_type < 0).any():
            raise InvalidGraph(f"hw_type must be {n} non-negative integers")
        self._validate_edges(n)
        self._levels()  # raises on a cycle

    def _validate_edges(self, n: int) -> None:
        ei = self.edge_index
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise InvalidGraph(f"edge_index has shape {ei.shape}, expected (2, m)")
        m = ei.shape[1]
        out = np.flatnonzero(((ei < 0) | (ei >= n)).any(axis=0))
        if out.size:
            k = int(out[0])
            u, v = int(ei[0, k]), int(ei[1, k])
            raise InvalidGraph(f"edge {k} ({u} -> {v}) is out of range: the graph has {n} nodes (ids 0..{n - 1})")
        if self.edge_bytes.shape != (m,):
            raise InvalidGraph(f"edge_bytes has shape {self.edge_bytes.shape}, expected ({m},)")
        bad = np.flatnonzero(~np.isfinite(self.edge_bytes) | (self.edge_bytes < 0))
        if bad.size:
            k = int(bad[0])
            u, v = self.names[ei[0, k]], self.names[ei[1, k]]
            raise InvalidGraph(f"edge {k} ('{u}' -> '{v}') has bytes {self.edge_bytes[k]} (must be finite, >= 0)")
        with np.errstate(over="ignore"):
            total = float(self.edge_bytes.sum()) if m else 0.0
        if not np.isfinite(total):
            raise InvalidGraph("the edge bytes sum to inf over the graph: their values are too large to total")

    # ------------------------------------------------------------------ structure
    @property
    def num_nodes(self) -> int:
        """Number of nodes (tasks)."""
        return len(self.names)

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.edge_index.shape[1])

    def feature(self, name: str) -> np.ndarray:
        """One named node-feature column."""
        if name not in self.feature_names:
            raise InvalidGraph(f"no node feature '{name}' (have: {', '.join(self.feature_names)})")
        return self.x[:, self.feature_names.index(name)]

    @property
    def compute(self) -> np.ndarray:
        """Per-task compute the simulator divides by device speed."""
        return self.feature("compute")

    @property
    def ops(self) -> list[str]:
        """Op name of every node."""
        return [self.vocab[i] for i in self.opcodes]

    @cached_property
    def children_csr(self) -> CSR:
        """Children in CSR form: (indptr, child ids, edge ids), edges sorted by source then by child."""
        src, dst = self.edge_index
        return build_csr(src, dst, self.num_nodes)

    @cached_property
    def parents_csr(self) -> CSR:
        """Parents in CSR form: (indptr, parent ids, edge ids), edges sorted by consumer then by parent."""
        src, dst = self.edge_index
        return build_csr(dst, src, self.num_nodes)

    @cached_property
    def in_degree(self) -> np.ndarray:
        """Number of inputs of every node, shape (n,)."""
        return np.bincount(self.edge_index[1], minlength=self.num_nodes).astype(np.int64)

    def priority_order(self, priority: Any) -> np.ndarray:
        """A topological order that always takes the ready node of smallest ``priority`` (shape (n,))."""
        indptr, child, _ = self.children_csr
        return priority_order(indptr, child, self.in_degree, np.asarray(priority))

    def children(self, i: int) -> np.ndarray:
        """Ids of the nodes that consume node ``i``'s output."""
        indptr, child, _ = self.children_csr
        return child[indptr[i] : indptr[i + 1]]

    def parents(self, i: int) -> np.ndarray:
        """Ids of the nodes whose outputs node ``i`` consumes."""
        indptr, par, _ = self.parents_csr
        return par[indptr[i] : indptr[i + 1]]

    def _levels(self) -> np.ndarray:
        """Longest-path level of every node (sources 0); raises InvalidGraph naming a cycle."""
        if "_level_cache" in self.__dict__:
            return self.__dict__["_level_cache"]
        n = self.num_nodes
        indptr, child, _ = self.children_csr
        indeg = self.in_degree.copy()
        level, done = kahn_levels(indptr, child, indeg)
        if done < n:
            raise InvalidGraph(f"graph has a cycle: {' -> '.join(self._find_cycle(indeg > 0))}")
        self.__dict__["_level_cache"] = level
        return level

    def _find_cycle(self, alive: np.ndarray) -> list[str]:
        """Names along one cycle among the nodes left after Kahn's algorithm (each has a live parent)."""
        indptr, par, _ = self.parents_csr
        start = int(np.flatnonzero(alive)[0])
        pos: dict[int, int] = {}
        path: list[int] = []
        v = start
        while v not in pos:
            pos[v] = len(path)
            path.append(v)
            v = next(int(p) for p in par[indptr[v] : indptr[v + 1]] if alive[p])
        cyc = path[pos[v] :][::-1]
        return [self.names[i] for i in [*cyc, cyc[0]]]

    @cached_property
    def topo_order(self) -> np.ndarray:
        """A topological order: by level, then by node id (deterministic)."""
        return np.lexsort((np.arange(self.num_nodes), self._levels())).astype(np.int64)

    @property
    def levels(self) -> np.ndarray:
        """Longest-path depth (in edges) of every node from any source."""
        return self._levels()

    @property
    def depth(self) -> int:
        """Number of nodes on the longest path."""
        return int(self._levels().max()) + 1

    def op_histogram(self) -> dict[str, int]:
        """Count of nodes per op name, most common first."""
        counts = np.bincount(self.opcodes, minlength=len(self.vocab))
        order = np.argsort(-counts, kind="stable")
        return {self.vocab[i]: int(counts[i]) for i in order if counts[i] > 0}

    @property
    def total_flops(self) -> float:
        """Sum of the ``flops`` feature."""
        return float(self.feature("flops").sum())

    def index(self, name: str) -> int:
        """Node id of a node name."""
        lookup = self.__dict__.get("_name_index")
        if lookup is None:
            lookup = self.__dict__["_name_index"] = {s: i for i, s in enumerate(self.names)}
        if name not in lookup:
            raise InvalidGraph(f"no node named '{name}'")
        return lookup[name]

    def __repr__(self) -> str:
        name = self.meta.get("name", "")
        return f"CompGraph({name!r}, nodes={self.num_nodes}, edges={self.num_edges}, depth={self.depth})"

    # ------------------------------------------------------------------ conversions
    def to_pyg(self) -> Any:
        """A torch_geometric ``Data``: x (float32), op (long), edge_index, edge_attr (bytes), hw_type."""
        import torch  # deferred: torch loads only when a graph is converted for the GNN

        # deferred: torch_geometric loads only when a graph is converted for the GNN
        from torch_geometric.data import Data

        return Data(
            x=torch.as_tensor(self.x, dtype=torch.float32),
            op=torch.as_tensor(self.opcodes, dtype=torch.long),
            edge_index=torch.as_tensor(self.edge_index, dtype=torch.long),
            edge_attr=torch.as_tensor(self.edge_bytes, dtype=torch.float32).unsqueeze(-1),
            hw_type=torch.as_tensor(self.hw_type, dtype=torch.long),
            num_nodes=self.num_nodes,
        )

    def to_networkx(self) -> Any:
        """A networkx DiGraph on node ids with name/op/hw_type/features; parallel edges sum their bytes."""
        import networkx as nx  # deferred: networkx loads only when a graph is converted to networkx

        g = nx.DiGraph(**self.meta)
        for i, name in enumerate(self.names):
            feats = dict(zip(self.feature_names, self.x[i].tolist(), strict=True))
            g.add_node(i, name=name, op=self.vocab[self.opcodes[i]], hw_type=int(self.hw_type[i]), **feats)
        for (u, v), b in zip(self.edge_index.T.tolist(), self.edge_bytes.tolist(), strict=True):
            if g.has_edge(u, v):
                g[u][v]["bytes"] += b
            else:
                g.add_edge(u, v, bytes=b)
        return g

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> Path:
        """Write a compressed ``.npz`` atomically (temp file, then rename); format: :mod:`mlsysopt.graph.graph_file`."""
        arrays = {
            "names": np.array(self.names, dtype=np.str_),
            "opcodes": self.opcodes,
            "vocab": np.array(self.vocab, dtype=np.str_),
            "x": self.x,
            "feature_names": np.array(self.feature_names, dtype=np.str_),
            "edge_index": self.edge_index,
            "edge_bytes": self.edge_bytes,
            "hw_type": self.hw_type,
        }
        return write_graph_npz(path, arrays, self.meta)

    @classmethod
    def load(cls, path: str | Path) -> CompGraph:
        """Read a ``.npz`` written by :meth:`save`; errors name the file and the key."""
        d, meta = read_graph_npz(path)
        try:
            return cls(
                d["names"].tolist(),
                d["opcodes"],
                d["x"],
                d["feature_names"].tolist(),
                d["edge_index"],
                d["edge_bytes"],
                d["hw_type"],
                d["vocab"].tolist(),
                meta,
            )
        except InvalidGraph as exc:
            raise InvalidGraph(f"{path}: {exc}") from None
