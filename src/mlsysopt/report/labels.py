"""What the short labels in tables mean, in one place: the CLI's ``--help`` and output and the report's glossary
all read these, so a label is defined the same way wherever it appears."""

from __future__ import annotations

#: A serving configuration's label, e.g. ``n2 b8 t5ms i1 o1 seq`` (:meth:`mlsysopt.serving.space.Config.label`).
SERVING_LABEL = (
    "n2 b8 t5ms i1 o1 seq = 2 instances (ONNX Runtime sessions), max batch 8, batch timeout 5 ms, 1 intra-op "
    "thread, 1 inter-op thread, sequential execution (par: parallel, which uses the inter-op threads)"
)

#: A NAS-Bench-Graph cell as printed (``link [0, 1, 1, 2] ops gcn/gat/skip/fc``).
NAS_CELL = (
    "link [0, 1, 1, 2] ops gcn/gat/skip/fc: the cell's 4 computing nodes; node i takes its input from node "
    "link[i-1] (0 = the cell's input), applies the i-th op, and the nodes no other node reads are summed into the "
    "output (NAS-Bench-Graph's encoding; a link is one of 9 patterns)"
)

#: NAS-Bench-Graph's GNN ops (``nas_bench_graph.gnn_list``).
GNN_OPS: dict[str, str] = {
    "gcn": "graph convolution (Kipf & Welling)",
    "gat": "graph attention (Veličković et al.)",
    "sage": "GraphSAGE mean aggregation",
    "gin": "graph isomorphism network",
    "cheb": "Chebyshev spectral convolution",
    "arma": "ARMA filter convolution",
    "graph": "k-GNN GraphConv (Morris et al.)",
    "fc": "a linear layer, no message passing",
    "skip": "identity (the node passes its input on)",
}


def gnn_ops_text() -> str:
    """``gcn = graph convolution (Kipf & Welling), gat = ...`` on one line."""
    return ", ".join(f"{op} = {what}" for op, what in GNN_OPS.items())
