"""The latency collection (``real:cpu``, issue #32) as a within-graph ranking set in the TpuGraphs layout format.

Issue #32 item 5 asks how GST+EFD ranks configurations against tree models *on the new real data*. The collection
times 1,200 generated models under twelve runtime settings (ONNX Runtime 1-2 threads x sequential/parallel, PyTorch
eager 1-2 threads, batch 1 and 8). Ranking across batch sizes is trivial (batch 8 is slower), so each (model,
batch) becomes one graph with six configurations: the settings at that batch. A setting is a graph-level
configuration: three configuration features, ``torch`` (0/1), ``threads`` (1/2) and ``parallel`` (0/1), on every
node (``--config-nodes all``, the default). ``--config-nodes first`` puts them on the graph's first node only, as
``costmodel train --data`` does for a runtime table's graph-level knobs (:mod:`mlsysopt.costmodel.data.table`) --
but the trainer's default pruning (``prune_hops=3``: the layout winners' "keep what is near a configurable node")
then keeps only the first few nodes, and every model sees the graph's input and nothing else. Node features are those of
:func:`mlsysopt.costmodel.data.features.layout_graph` on the model rebuilt from its spec and traced at that batch
(shapes, FLOPs, bytes, windows); runtimes are the collection's milliseconds; splits are the collection's.

``python benchmarks/latency_layout.py --out runs/latency_layout`` writes ``{train,valid,test}/*.npz`` and
``collection.json``; ``python benchmarks/gst.py --real-data runs/latency_layout --skip memory,synthetic,ablation,
inference,malnet`` ranks them with every GST mode and tree baseline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.features import layout_graph, torch_graph
from mlsysopt.costmodel.data.tpugraphs import save_npz
from mlsysopt.costmodel.oracle.dataset import SHIPPED, load_collection
from mlsysopt.costmodel.oracle.families import build, example_input
from mlsysopt.costmodel.oracle.settings import SETTINGS
from mlsysopt.io import write_json_atomic

#: The configuration features of a setting, in their slots.
SLOTS = ("torch", "threads", "parallel")


def config_features(key: str) -> list[float]:
    """``[torch, threads, parallel]`` of the setting named ``key``."""
    s = next(s for s in SETTINGS if s.key == key)
    return [float(s.engine == "torch"), float(s.threads), float(s.mode == "par")]


def main() -> None:
    """Write the layout set (resumable: a graph already written is kept)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/latency_layout"))
    ap.add_argument("--collection", default=str(SHIPPED))
    ap.add_argument("--config-nodes", choices=("all", "first"), default="all")
    args = ap.parse_args()
    models, manifest = load_collection(args.collection)
    t0 = time.perf_counter()
    graphs: dict[str, list[str]] = {"train": [], "valid": [], "test": []}
    for k, m in enumerate(models):
        for batch in sorted({s.batch for s in SETTINGS}):
            keys = [s.key for s in SETTINGS if s.batch == batch and s.key in m.ms]
            if len(keys) < 2:
                continue
            name = f"{m.name}_b{batch}"
            path = args.out / m.split / f"{name}.npz"
            graphs[m.split].append(name)
            if path.is_file():
                continue
            module, _ = build(m.spec)
            graph, attrs, _ = torch_graph(module, (example_input(m.spec, batch),), name)
            nodes = list(range(graph.num_nodes)) if args.config_nodes == "all" else [0]
            arrays = layout_graph(graph, attrs, nodes)
            feat = np.zeros((len(keys), len(nodes), 18), np.float32)
            feat[:, :, : len(SLOTS)] = np.array([config_features(key) for key in keys], np.float32)[:, None, :]
            arrays |= {"node_config_feat": feat, "config_runtime": np.array([m.ms[key] for key in keys])}
            save_npz(path, arrays)
        if k % 100 == 0:
            print(f"{k}/{len(models)} models, {time.perf_counter() - t0:.0f} s", flush=True)
    write_json_atomic(args.out / "collection.json", {
        "data": "REAL: the latency collection real:cpu (issue #32), one graph per (model, batch), its settings at "
                f"that batch as configurations (torch, threads, parallel on {args.config_nodes} node(s)); runtimes "
                "in ms",
        "machine": manifest.get("machine"), "collection_updated": manifest.get("updated"),
        "updated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "config_slots": list(SLOTS),
        "config_nodes": args.config_nodes,
        "splits": {s: len(v) for s, v in graphs.items()}, "graphs": graphs})  # fmt: skip
    print(json.dumps({s: len(v) for s, v in graphs.items()}), f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
