"""TpuGraphs and MalNet records into the shared computation-graph IR (:class:`~mlsysopt.graph.ir.CompGraph`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.ir import BASE_FEATURES, CompGraph
from mlsysopt.graph.vocab import build_vocab


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
