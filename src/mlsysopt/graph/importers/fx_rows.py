"""The rows of a CompGraph the torch.fx importer builds: one per fx node, or the ops of an expanded layer."""

from __future__ import annotations

from typing import Any

from torch import fx

from mlsysopt.graph.importers.expansion import Expansion
from mlsysopt.graph.importers.fx_flops import _arg, _numel
from mlsysopt.graph.ir import CompGraph


class Rows:
    """The nodes and edges of a CompGraph being built."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ops: list[str] = []
        self.feats: dict[str, list[float]] = {k: [] for k in ("flops", "bytes_in", "bytes_out", "params", "out_elems")}
        self.edges: list[tuple[int, int]] = []
        self.edge_bytes: list[float] = []

    def add(self, name: str, op: str, flops: float, bytes_out: float, params: float, out_elems: float) -> int:
        """Append a node; returns its id."""
        self.names.append(name)
        self.ops.append(op)
        for key, value in (("flops", flops), ("bytes_in", 0.0), ("bytes_out", bytes_out), ("params", params),
                           ("out_elems", out_elems)):  # fmt: skip
            self.feats[key].append(value)
        return len(self.names) - 1

    def edge(self, u: int, v: int, nbytes: float) -> None:
        """Add the edge ``u -> v`` carrying ``nbytes`` (counted in ``v``'s ``bytes_in``)."""
        self.edges.append((u, v))
        self.edge_bytes.append(nbytes)
        self.feats["bytes_in"][v] += nbytes

    def build(self, meta: dict[str, Any]) -> CompGraph:
        """The CompGraph (``compute`` = ``flops``)."""
        features: dict[str, Any] = dict(self.feats)
        features["compute"] = self.feats["flops"]
        return CompGraph.build(self.names, self.ops, features, self.edges, self.edge_bytes, meta=meta)


def splice(rows: Rows, node: fx.Node, expansion: Expansion, gid: dict[fx.Node, int],
            out_bytes: dict[fx.Node, float], owned: bool) -> int:  # fmt: skip
    """Add ``expansion``'s ops for ``node`` (named ``node.sub``, the last one ``node``); returns the last one's id."""
    base = len(rows.names)
    args = [a if isinstance(a := _arg(node, k, key), fx.Node) else None for k, key in enumerate(expansion.arg_names)]
    read: set[fx.Node] = set()
    last = len(expansion.nodes) - 1
    for i, sub in enumerate(expansion.nodes):
        final = i == last
        v = rows.add(node.name if final else f"{node.name}.{sub.name}", sub.op, sub.flops,
                     out_bytes[node] if final else sub.bytes_out, sub.params if owned else 0.0,
                     float(_numel(node.meta.get("tensor_meta"))) if final else sub.out_elems)  # fmt: skip
        for j, b in sub.parents:
            rows.edge(base + j, v, b)
        for k, b in sub.reads:
            arg = args[k] if k < len(args) else None
            if arg is not None:
                rows.edge(gid[arg], v, b)
                read.add(arg)
    for parent in node.all_input_nodes:  # masks and other inputs the expansion does not model: into its first op
        if parent not in read:
            rows.edge(gid[parent], base, out_bytes[parent])
    return base + last
