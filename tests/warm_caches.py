"""Fill, once, the caches that the processes of the test run would otherwise fill side by side.

``make test`` runs this (two processes: ``imports`` and ``kernels``) beside lint, before the test sessions. A fresh
clone has no bytecode for its site-packages (uv installs without compiling it, where pip compiles all of it) and no
numba cache for the graph kernels; the Ray workers of the normal-priority session import torch and Ray by the dozen
and compiled them side by side (that session took ~30 s longer without this, 2026-12-06). Nothing here is a test: a
failure only means a cache stays cold, so it is reported and the exit status is 0.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

# What the test processes import: the CLI's commands, the model importers and runtimes, figures, tuners, Ray.
IMPORTS = [
    "torch",
    "torch_geometric",
    "onnx",
    "onnxruntime",
    "matplotlib.pyplot",
    "mlsysopt.cli.command",
    "mlsysopt.cli.graph",
    "mlsysopt.cli.placement",
    "mlsysopt.cli.serving",
    "mlsysopt.cli.costmodel",
    "mlsysopt.cli.nas",
    "mlsysopt.cli.runs",
]
KERNEL_IMPORTS = ["optuna", "sklearn.ensemble", "lightgbm", "xgboost", "ray", "saga"]


def kernels() -> None:
    """Compile the numba kernels of the simulator, HEFT's insertion and the list schedules (numba caches them)."""
    import numpy as np

    from mlsysopt.graph.bounds import longest_path
    from mlsysopt.graph.generate import layered_dag, random_cluster
    from mlsysopt.graph.simulator import Simulator
    from mlsysopt.placement.baselines import HEFT, EFTGreedy

    graph, cluster = layered_dag(40, num_types=2, seed=0), random_cluster(4, num_types=2, seed=0)
    longest_path(graph, np.ones(graph.num_nodes))
    EFTGreedy().place(graph, cluster)
    p = np.asarray(HEFT().place(graph, cluster).placement, dtype=np.int64)
    for execution in ("fifo", "ordered"):
        sim = Simulator(graph, cluster, execution=execution)
        sim.makespan(p)
        sim.makespans(np.stack([p, p]))
        sim.run(p)


def main(part: str) -> None:
    t = time.perf_counter()
    names = IMPORTS if part == "imports" else KERNEL_IMPORTS
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # a cold cache is not an error of the suite
            print(f"warm_caches: import {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
    if part == "kernels":
        try:
            kernels()
        except Exception:  # as above
            print(f"warm_caches: kernels failed:\n{traceback.format_exc()}", file=sys.stderr)
    print(f"warm_caches {part}: {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "imports")
