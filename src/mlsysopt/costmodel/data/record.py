"""GraphRecord: the one in-memory form every cost-model dataset yields, and the lazy dataset interface."""

from __future__ import annotations

import warnings
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from mlsysopt.errors import InvalidOption, MlsysoptWarning

#: What a record is for: rank layout configs, rank tile configs, or classify a whole graph.
TASKS: tuple[str, ...] = ("layout", "tile", "malnet")


@dataclass
class GraphRecord:
    """One graph as the trainer sees it; arrays are numpy, edges point producer -> consumer (PyG convention).

    Ranking tasks carry one runtime per configuration; classification carries ``label``.
    Layout records put config features on nodes (``config_node_ids``, ``node_config_feat``);
    tile records put them on the whole graph (``graph_config_feat``).

    Args:
        name: Graph name (unique within a dataset).
        task: ``"layout"``, ``"tile"`` or ``"malnet"``.
        x: Node features.
        edge_index: Edges, data flowing ``edge_index[0] -> edge_index[1]``.
        opcode: Op id per node (None for MalNet).
        node_splits: Sorted node ids where a new segment must start (None: no constraint).
        config_node_ids: Nodes that take a layout configuration (layout only).
        node_config_feat: Per-configuration features of the configurable nodes (layout only).
        graph_config_feat: Per-configuration features of the whole graph (tile only).
        runtime: Target per configuration (tile: normalized); None for classification.
        label: Class id (MalNet only).

    Shapes:
        x: (num_nodes, num_features) float32
        edge_index: (2, num_edges) int64
        opcode: (num_nodes,) int64
        node_splits: (num_splits,) int64
        config_node_ids: (num_config_nodes,) int64
        node_config_feat: (num_configs, num_config_nodes, 18) float32
        graph_config_feat: (num_configs, 24) float32
        runtime: (num_configs,) float64
    """

    name: str
    task: str
    x: np.ndarray  # (n, F) float32 node features
    edge_index: np.ndarray  # (2, m) int64, data flows edge_index[0] -> edge_index[1]
    opcode: np.ndarray | None = None  # (n,) int64 op ids, None for MalNet
    node_splits: np.ndarray | None = None  # (s,) sorted node ids where a new segment must start
    config_node_ids: np.ndarray | None = None  # (nc,) int64 nodes that take a layout config
    node_config_feat: np.ndarray | None = None  # (c, nc, 18) float32
    graph_config_feat: np.ndarray | None = None  # (c, 24) float32
    runtime: np.ndarray | None = None  # (c,) float64 target per configuration (tile: normalized)
    label: int | None = None  # class id for MalNet

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.edge_index.shape[1])

    @property
    def num_configs(self) -> int:
        """Configurations with a runtime (1 for classification records)."""
        return 1 if self.runtime is None else int(self.runtime.shape[0])

    @property
    def is_ranking(self) -> bool:
        """True for layout and tile records (targets are per-configuration runtimes)."""
        return self.task in ("layout", "tile")


class GraphDataset(ABC):
    """A lazy collection of graphs: only names are held; ``record(i)`` reads one file.

    Subclasses set ``task`` and implement :attr:`names` and :meth:`record`.

    The base class takes no constructor arguments; subclasses define their own.
    """

    task: str

    @property
    @abstractmethod
    def names(self) -> list[str]:
        """Graph names in a stable order."""

    @abstractmethod
    def record(self, i: int) -> GraphRecord:
        """Read, validate and return graph ``i`` (one file; nothing else is kept in memory)."""

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[GraphRecord]:
        for i in range(len(self)):
            yield self.record(i)


class InMemoryDataset(GraphDataset):
    """Records already in memory (e.g. one generated graph for a memory benchmark); all of one task.

    Args:
        records: The records, at least one, all of the same task.

    Raises:
        InvalidOption: If ``records`` is empty or mixes tasks.
    """

    def __init__(self, records: list[GraphRecord]) -> None:
        if not records:
            raise InvalidOption("an in-memory dataset needs at least one graph")
        tasks = {r.task for r in records}
        if len(tasks) != 1:
            raise InvalidOption(f"an in-memory dataset mixes tasks: {sorted(tasks)}")
        self.task = records[0].task
        self._records = list(records)

    @property
    def names(self) -> list[str]:
        """Graph names in the given order."""
        return [r.name for r in self._records]

    def record(self, i: int) -> GraphRecord:
        """Record ``i`` (no copy)."""
        return self._records[i]


class ConfigSubset(GraphDataset):
    """``ds`` with at most ``limit`` configurations per graph: a fixed subset (seeded by the graph's name), sorted.

    What validation scores during training (a cheaper, stable model-selection signal); test metrics always use every
    configuration. Records are built once and kept.
    """

    def __init__(self, ds: GraphDataset, limit: int) -> None:
        self.ds, self.limit, self.task = ds, int(limit), ds.task
        self._records: dict[int, GraphRecord] = {}

    @property
    def names(self) -> list[str]:
        """The wrapped dataset's names."""
        return self.ds.names

    def record(self, i: int) -> GraphRecord:
        """Graph ``i`` with its configuration subset."""

        if i not in self._records:
            rec = self.ds.record(i)
            if rec.runtime is None or rec.num_configs <= self.limit:
                self._records[i] = rec
            else:
                rng = np.random.default_rng(zlib.crc32(rec.name.encode()))
                idx = np.sort(rng.choice(rec.num_configs, self.limit, replace=False))
                pick = {k: getattr(rec, k)[idx] for k in ("node_config_feat", "graph_config_feat", "runtime")
                        if getattr(rec, k) is not None}  # fmt: skip
                self._records[i] = replace(rec, **pick)
        return self._records[i]


#: Graphs of a ranking dataset read to tell whether it holds anything to rank (the first ones; all of a small one).
RANKABLE_SAMPLE = 200


def warn_if_unrankable(ds: GraphDataset, split: str = "training") -> bool:
    """One warning when no graph of a ranking dataset (layout, tile) has two or more configurations: the model ranks
    the configurations of each graph, so one configuration per graph teaches it nothing (loss 0, OPA undefined).

    Args:
        ds: The dataset (its first :data:`RANKABLE_SAMPLE` graphs are read).
        split: The split's name, for the message.

    Returns:
        Whether it warned.
    """
    if ds.task not in ("layout", "tile") or len(ds) == 0:
        return False
    n = min(len(ds), RANKABLE_SAMPLE)
    if any(ds.record(i).num_configs >= 2 for i in range(n)):
        return False
    which = f"the first {n} {split} graphs" if n < len(ds) else f"every {split} graph"
    warnings.warn(
        f"{which} {'have' if n < len(ds) else 'has'} one configuration: a cost model learns to rank the "
        "configurations of a graph, so it cannot learn a ranking from this data (loss 0, OPA undefined); measure "
        "two or more configurations of each graph",
        MlsysoptWarning,
        stacklevel=2,
    )
    return True
