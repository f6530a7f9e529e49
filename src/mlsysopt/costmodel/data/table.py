"""A user's own cost-model data: a runtime table (CSV or Parquet) and the graphs it names (.npz, ONNX, .py).

**Format** (``costmodel train --data DIR`` or ``--data DIR/runtimes.csv``)::

    DIR/runtimes.csv            (or runtimes.parquet): one row per (graph, configuration)
    DIR/graphs/NAME.onnx        an ONNX model
    DIR/graphs/NAME.npz         a saved CompGraph (``mlsysopt graph import ... --out NAME.npz``)
    DIR/graphs/NAME.py          a Python file whose ``model()`` returns ``(module, example_inputs)``

Columns of the table:

* ``graph`` (required): ``NAME`` of a file in ``graphs/`` (``.npz``, ``.onnx`` or ``.py``), or a path relative to
  the table's folder (``models/net.onnx``, ``models/net.py:factory``);
* ``runtime`` (required): the measured runtime, a positive number (any unit, one unit per graph);
* ``split`` (optional): ``train``, ``valid`` or ``test``; without it the graphs (sorted by name) are split 70 / 15
  / 15 by a fixed permutation (seed 0; at least one valid and one test graph from 3 graphs), every configuration of
  a graph in the graph's split;
* ``config`` (optional): a configuration id, unique per graph (else rows keep their order);
* every other column is a **knob**, numeric or boolean: ``NODE.KNOB`` sets ``KNOB`` of the graph node named
  ``NODE`` (e.g. ``conv1.channels_last``; the node names are the importer's: ``load_graph(SOURCE).names``); a name
  without a node part (``threads``) is a graph-level setting. Empty cells are 0; a ``NODE.KNOB`` column may name a
  node a graph lacks only if its cells are empty in that graph's rows (a column for other graphs).

Each graph becomes a TpuGraphs layout record: its configurable nodes are the nodes some ``NODE.KNOB`` column names
(plus the graph's first node when there are graph-level knobs), each with the 18 configuration features: one slot
per knob name (sorted; at most 18), the node's own value for per-node knobs and the graph's value for graph-level
ones. In a table of graph-level knobs only (e.g. ONNX Runtime's threads and executor) every node of a graph takes
them: the layout models' default pruning keeps configurable nodes and their neighbourhood, so on the first node
alone the model would see the graph's input and little else (when configurations x nodes is too large for that,
they stay on the first node with a warning naming ``--prune-hops none``). Everything is checked when the dataset
is opened, and a problem is one error naming the file, the column and the row (or the graph and the node).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.data.features import layout_graph, torch_graph
from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord
from mlsysopt.costmodel.data.tpugraphs import layout_record
from mlsysopt.errors import InvalidDataFile, MissingSplit, MlsysoptError, MlsysoptWarning
from mlsysopt.graph.importers.source import resolve_source

TABLE_NAMES = ("runtimes.csv", "runtimes.parquet")
GRAPH_SUFFIXES = (".npz", ".onnx", ".py")
RESERVED = ("graph", "runtime", "split", "config")
SPLITS = ("train", "valid", "test")
MAX_KNOBS = 18
MAX_ROWS = 20_000_000
#: Graph-level knobs go on every node of a graph that has no per-node knob while configurations x nodes x 18 stays
#: under this (64 MiB of float32 features).
MAX_SPREAD_CELLS = 1 << 24
#: The factory a ``graphs/NAME.py`` file must define.
PY_FACTORY = "model"


def find_table(path: str | Path) -> Path | None:
    """The runtime table at ``path`` (a ``.csv`` / ``.parquet`` file, or a folder holding ``runtimes.csv|parquet``)."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() in (".csv", ".parquet"):
        return p
    if p.is_dir():
        found = [p / n for n in TABLE_NAMES if (p / n).is_file()]
        if len(found) > 1:
            raise InvalidDataFile(f"{p}: holds both {found[0].name} and {found[1].name}: keep one runtime table")
        return found[0] if found else None
    return None


def read_table(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The table's columns as numpy arrays (strings for ``graph``/``split``) and each numeric column's empty cells,
    or one InvalidDataFile line."""
    import pyarrow as pa  # deferred: pyarrow loads only when a table is read or written

    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq  # deferred: pyarrow loads only when a table is read or written

            meta = pq.read_metadata(path)
            if meta.num_rows > MAX_ROWS:
                raise InvalidDataFile(f"{path}: {meta.num_rows:,} rows, above the limit of {MAX_ROWS:,}")
            table = pq.read_table(path)
        else:
            import pyarrow.csv as pcsv  # deferred: pyarrow loads only when a table is read or written

            table = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
                column_types={"graph": pa.string(), "split": pa.string()}))  # fmt: skip
    except InvalidDataFile:
        raise
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise InvalidDataFile(f"{path}: not a readable table ({str(exc).splitlines()[0]})") from None
    if table.num_rows > MAX_ROWS:
        raise InvalidDataFile(f"{path}: {table.num_rows:,} rows, above the limit of {MAX_ROWS:,}")
    missing = [c for c in ("graph", "runtime") if c not in table.column_names]
    if missing:
        raise InvalidDataFile(f"{path}: no '{missing[0]}' column (has: {', '.join(table.column_names) or 'none'})")
    if table.num_rows == 0:
        raise InvalidDataFile(f"{path}: the table has no rows")
    cols: dict[str, np.ndarray] = {}
    empty: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name)
        if name in ("graph", "split"):
            values = col.to_pylist()
            bad = next((i for i, v in enumerate(values) if v is None or str(v).strip() == ""), None)
            if bad is not None:
                raise InvalidDataFile(f"{path}: column '{name}' row {bad + 2} is empty")
            cols[name] = np.array([str(v).strip() for v in values])
            continue
        cols[name], empty[name] = _numbers(path, name, col)
    return cols, empty


def _numbers(path: Path, name: str, col: Any) -> tuple[np.ndarray, np.ndarray]:
    """A numeric or boolean column as float64 (empty cells 0 for knobs); one error naming the first bad row."""
    import pyarrow as pa  # deferred: pyarrow loads only when a table is read or written

    if pa.types.is_boolean(col.type) or pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        values = col.to_numpy(zero_copy_only=False).astype(np.float64)
        null = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool)
    elif pa.types.is_null(col.type):
        values, null = np.zeros(len(col)), np.ones(len(col), bool)
    else:
        values_py = col.to_pylist()
        bad = next(i for i, v in enumerate(values_py) if v is not None and not _is_number(v))
        what = "a runtime" if name == "runtime" else "a knob value"
        raise InvalidDataFile(f"{path}: column '{name}' row {bad + 2} is {values_py[bad]!r}, not a number ({what}; "
                              "encode a categorical knob as numbers, e.g. one 0/1 column per choice)")  # fmt: skip
    if name == "runtime":
        bad_rows = np.flatnonzero(null | ~np.isfinite(values) | (values <= 0))
        if bad_rows.size:
            i = int(bad_rows[0])
            v = "empty" if null[i] else values[i]
            raise InvalidDataFile(f"{path}: column 'runtime' row {i + 2} is {v} (runtimes must be numbers > 0)")
        return values, null
    values = np.where(null, 0.0, values)
    bad_rows = np.flatnonzero(~np.isfinite(values))
    if bad_rows.size:
        raise InvalidDataFile(f"{path}: column '{name}' row {int(bad_rows[0]) + 2} is {values[bad_rows[0]]} "
                              "(knob values must be finite)")  # fmt: skip
    return values, null


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _split_of(names: Sequence[str]) -> dict[str, str]:
    """70 / 15 / 15 of the graphs by a fixed permutation (at least one valid and one test graph from 3 graphs)."""
    order = sorted(set(names))
    n = len(order)
    held = max(1, round(0.15 * n)) if n >= 3 else 0
    rank = np.empty(n, np.int64)
    rank[np.random.default_rng(0).permutation(n)] = np.arange(n)
    split = ("train", "valid", "test")
    return {g: split[int(r >= n - 2 * held) + int(r >= n - held)] for g, r in zip(order, rank.tolist(), strict=True)}


def load_graph_file(spec: str, root: Path, where: str) -> Any:
    """The CompGraph (and node attrs, or None) of one ``graph`` cell: a name in ``root/graphs/`` or a path."""

    text = spec.strip()
    file, factory = text.rsplit(":", 1) if ":" in Path(text).name else (text, None)
    if Path(file).suffix.lower() in GRAPH_SUFFIXES:
        path = Path(file) if Path(file).is_absolute() else root / file
        if not path.is_file():
            raise InvalidDataFile(f"{where}: graph file {path} does not exist")
    else:
        hits = [root / "graphs" / f"{file}{s}" for s in GRAPH_SUFFIXES if (root / "graphs" / f"{file}{s}").is_file()]
        if not hits:
            raise InvalidDataFile(f"{where}: graph '{text}' has no file {root / 'graphs'}/{file}.npz|.onnx|.py")
        if len(hits) > 1:
            raise InvalidDataFile(f"{where}: graph '{text}' has several files ({', '.join(h.name for h in hits)})")
        path = hits[0]
    target = f"{path}:{factory or PY_FACTORY}" if path.suffix.lower() == ".py" else str(path)
    try:
        src = resolve_source(target)
        if src.kind == "pytorch":
            module, inputs = src.pytorch()
            graph, attrs, _ = torch_graph(module.eval(), tuple(inputs), Path(text).stem)
            return graph, attrs
        if src.kind not in ("npz", "onnx"):
            raise InvalidDataFile(f"graph files are .npz, .onnx or .py, not {src.kind}")
        return src.graph(), None
    except MlsysoptError as exc:
        raise InvalidDataFile(f"{where}: graph '{text}': {exc}") from None


class TableDataset(GraphDataset):
    """One split of a runtime table and its graphs, as layout records (validated when opened, built lazily).

    Args:
        path: A runtime table (``runtimes.csv`` / ``runtimes.parquet``) or the folder holding it.
        split: Split to keep: ``"train"``, ``"valid"`` or ``"test"`` (by the ``split`` column, or a fixed split of the
            graphs when there is none).
        slots: Configuration-feature slot of each knob name (None: the names sorted; a model trained on another
            table passes that table's, :attr:`slots`).

    Raises:
        MissingSplit: If there is no runtime table or the split is empty.
        InvalidDataFile: If the table or a graph file is malformed (no knob columns, too many knob names, bad rows).
    """

    task = "layout"

    def __init__(self, path: str | Path, split: str, slots: Mapping[str, int] | None = None) -> None:
        table = find_table(path)
        if table is None:
            raise MissingSplit(f"{path}: no runtimes.csv or runtimes.parquet")
        self.path, self.root = table, table.parent
        cols, self._empty = read_table(table)
        self.knobs = sorted(c for c in cols if c not in RESERVED)
        if not self.knobs:
            raise InvalidDataFile(f"{table}: no knob columns: a configuration needs at least one (e.g. "
                                  "'conv1.channels_last' or 'threads')")  # fmt: skip
        names = sorted({k.rpartition(".")[2] for k in self.knobs})
        if len(names) > MAX_KNOBS:
            raise InvalidDataFile(f"{table}: {len(names)} distinct knob names ({', '.join(names[:4])}, ...): at "
                                  f"most {MAX_KNOBS} fit the layout's configuration features")  # fmt: skip
        self.slots = dict(slots) if slots is not None else {s: i for i, s in enumerate(names)}
        missing = [s for s in names if s not in self.slots]
        if missing:
            raise InvalidDataFile(f"{table}: knob '{missing[0]}' has no configuration slot (slots: "
                                  f"{', '.join(self.slots)})")  # fmt: skip
        self._graph_level_only = all("." not in k for k in self.knobs)
        graphs = cols["graph"]
        if "split" in cols:
            bad = np.flatnonzero(~np.isin(cols["split"], SPLITS))
            if bad.size:
                raise InvalidDataFile(f"{table}: column 'split' row {int(bad[0]) + 2} is '{cols['split'][bad[0]]}' "
                                      f"(choose from: {', '.join(SPLITS)})")  # fmt: skip
            per = {}
            for g, s in zip(graphs.tolist(), cols["split"].tolist(), strict=True):
                if per.setdefault(g, s) != s:
                    raise InvalidDataFile(f"{table}: graph '{g}' has rows in splits '{per[g]}' and '{s}' (one "
                                          "graph, one split)")  # fmt: skip
        else:
            per = _split_of(graphs.tolist())
        if "config" in cols:
            keys = np.stack([np.unique(graphs, return_inverse=True)[1], cols["config"]], 1)
            _, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
            if (counts > 1).any():
                i = int(np.sort(first[counts > 1])[0])
                raise InvalidDataFile(f"{table}: graph '{graphs[i]}' lists configuration {cols['config'][i]:g} "
                                      "more than once")  # fmt: skip
        self.split = split
        self._names = sorted(g for g, s in per.items() if s == split)
        if not self._names:
            raise MissingSplit(f"{table}: no graphs in split '{split}'")
        self._cols = cols
        self._rows = {g: np.flatnonzero(graphs == g) for g in self._names}
        self._records: dict[str, GraphRecord] = {}
        for g in self._names:  # read and check every graph of the split now: errors before any training
            self._records[g] = self._build(g)

    @property
    def names(self) -> list[str]:
        """Graph names of this split, sorted."""
        return self._names

    def record(self, i: int) -> GraphRecord:
        """Graph ``i`` as a layout record."""
        return self._records[self._names[i]]

    def _build(self, g: str) -> GraphRecord:

        rows = self._rows[g]
        if "config" in self._cols:
            rows = rows[np.argsort(self._cols["config"][rows], kind="stable")]
        where = f"{self.path} graph '{g}'"
        graph, attrs = load_graph_file(g, self.root, where)
        index = {n: i for i, n in enumerate(graph.names)}
        per_node: dict[int, list[tuple[int, str]]] = {}
        graph_level: list[tuple[int, str]] = []
        for knob in self.knobs:
            node, dot, name = knob.rpartition(".")
            if not dot:
                graph_level.append((self.slots[name], knob))
                continue
            if node not in index:
                if self._empty[knob][rows].all():
                    continue  # a column for other graphs' nodes: empty in this graph's rows
                near = ", ".join(graph.names[:5])
                raise InvalidDataFile(f"{self.path}: column '{knob}': graph '{g}' has no node '{node}' (its nodes "
                                      f"include {near}, ...)")  # fmt: skip
            per_node.setdefault(index[node], []).append((self.slots[name], knob))
        nodes = sorted(per_node)
        spread = self._graph_level_only and rows.size * graph.num_nodes * 18 <= MAX_SPREAD_CELLS
        if spread:
            nodes = list(range(graph.num_nodes))  # only graph-level knobs: every node takes them (see the docstring)
        elif graph_level and 0 not in per_node:
            if self._graph_level_only:
                warnings.warn(f"{where}: only graph-level knobs, and {rows.size} configurations x "
                              f"{graph.num_nodes} nodes are too many to put them on every node: they sit on the "
                              "first node, and the layout's default pruning keeps only its neighbourhood (train with "
                              "--prune-hops none to let the model see the whole graph)", MlsysoptWarning,
                              stacklevel=2)  # fmt: skip
            nodes = [0, *nodes]
        arrays = layout_graph(graph, attrs, nodes)
        feat = np.zeros((rows.size, len(nodes), 18), np.float32)
        for slot, knob in graph_level:
            feat[:, :, slot] = self._cols[knob][rows][:, None]
        for j, node in enumerate(nodes):
            for slot, knob in per_node.get(node, []):
                feat[:, j, slot] = self._cols[knob][rows]
        arrays |= {"node_config_feat": feat, "config_runtime": self._cols["runtime"][rows]}
        return layout_record(arrays, g, where)

    def __repr__(self) -> str:
        return f"TableDataset({str(self.path)!r}, {self.split!r}, graphs={len(self)})"
