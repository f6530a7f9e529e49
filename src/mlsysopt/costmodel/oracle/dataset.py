"""A latency collection read back: models (node tables and latencies per setting) with their splits.

:func:`load_collection` reads the ``latency.npz`` a ``costmodel collect-latency`` run packs (the one shipped with
mlsysopt is ``real:cpu``, :data:`SHIPPED`) and refuses a collection whose models were timed on different machines:
latencies of two machines do not belong in one model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidDataset
from mlsysopt.io import read_json

#: The collection shipped with mlsysopt (measured on the machine it was built on; see its collection.json).
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "latency_cpu"
#: Node columns of a model's table at batch 1 (``fused``: the node lies in a module PyTorch eager runs as a few
#: kernels; 0 in collections made before it was recorded).
COLUMNS = ("flops", "params", "bytes_in", "bytes_out", "out_elems", "groups", "kernel_area", "in_channels",
           "out_channels", "fused")  # fmt: skip


@dataclass
class TimedModel:
    """One model of a collection.

    Args:
        name: Model name (family and spec hash).
        family: Its family.
        split: ``train``, ``valid`` or ``test``.
        ops: Canonical op name of every node of its graph (the graph IR's names).
        nodes: Node table at batch 1, one column per :data:`COLUMNS` entry.
        ms: Measured milliseconds per setting key (empty for a model nobody timed).
        flagged: Whether other processes used the machine while it was timed.
        spec: The family spec it was built from.
        edges: ``(src, dst)`` node ids of its data edges.
        rounds: Every round's milliseconds per setting key (empty when not kept).

    Shapes:
        ops: (n,) str
        nodes: (n, len(COLUMNS)) float64
        edges: (2, e) int64
    """

    name: str
    family: str
    split: str
    ops: np.ndarray
    nodes: np.ndarray
    ms: dict[str, float] = field(default_factory=dict)
    flagged: bool = False
    spec: dict[str, Any] = field(default_factory=dict)
    edges: np.ndarray | None = None
    rounds: dict[str, list[float]] = field(default_factory=dict)

    def column(self, name: str) -> np.ndarray:
        """One node column by name."""
        return self.nodes[:, COLUMNS.index(name)]


def node_table(nodes: np.ndarray, columns: list[str]) -> np.ndarray:
    """``nodes`` (one column per name in ``columns``) as a :data:`COLUMNS` table; a column it lacks is 0 (groups
    and kernel area 1)."""
    out = np.zeros((nodes.shape[0], len(COLUMNS)))
    out[:, COLUMNS.index("groups")] = out[:, COLUMNS.index("kernel_area")] = 1.0
    for j, c in enumerate(columns):
        if c in COLUMNS:
            out[:, COLUMNS.index(c)] = nodes[:, j]
    return out


def load_collection(path: str | Path = SHIPPED, include_flagged: bool = False) -> tuple[list[TimedModel], dict]:
    """The models of a collection and its manifest.

    Args:
        path: A collection folder (with ``latency.npz``) or the ``.npz`` itself; the shipped ``real:cpu`` by default.
        include_flagged: Keep models timed while other processes used the machine.

    Returns:
        tuple[list[TimedModel], dict]: The models in collection order, and ``collection.json`` ({} when absent).

    Raises:
        InvalidDataset: If the file is missing or malformed, or its models come from more than one machine.
    """
    path = SHIPPED if str(path) == "real:cpu" else Path(path)
    npz = path / "latency.npz" if path.is_dir() else path
    if not npz.is_file():
        raise InvalidDataset(f"{path}: no latency.npz (a 'costmodel collect-latency' run writes one when complete)")
    try:
        z = np.load(npz, allow_pickle=False)
        rows = json.loads(str(z["rows"]))
        vocab, op_ids, nodes = z["op_vocab"], z["op_ids"], z["nodes"]
        noff, columns = z["node_offsets"], [str(c) for c in z["node_columns"]]
        edges, eoff = z["edges"], z["edge_offsets"]
    except Exception as exc:  # a truncated or foreign file: one line naming it
        raise InvalidDataset(f"{npz}: not a latency collection ({type(exc).__name__}: {str(exc)[:120]})") from None
    if len(noff) != len(rows) + 1:
        raise InvalidDataset(f"{npz}: {len(rows)} rows but {len(noff) - 1} node tables")
    machines = sorted({str(r.get("machine")) for r in rows})
    if len(machines) > 1:
        raise InvalidDataset(f"{npz}: models timed on {len(machines)} machines ({machines[0]!r} and "
                             f"{machines[1]!r}): collect each machine into its own collection")  # fmt: skip
    manifest: dict[str, Any] = {}
    if (npz.parent / "collection.json").is_file():
        manifest = read_json(npz.parent / "collection.json", InvalidDataset)
    models = []
    for i, r in enumerate(rows):
        if r.get("flagged") and not include_flagged:
            continue
        a, b = int(noff[i]), int(noff[i + 1])
        models.append(TimedModel(r["name"], r["family"], r["split"], vocab[op_ids[a:b]].astype(str),
                                 node_table(nodes[a:b].astype(np.float64), columns), dict(r["ms"]),
                                 bool(r.get("flagged")), r.get("spec", {}),
                                 edges[:, int(eoff[i]) : int(eoff[i + 1])].astype(np.int64),
                                 rounds=dict(r.get("rounds_ms") or {})))  # fmt: skip
    return models, manifest
