"""SYNTHETIC latency collections whose truth is known, for the latency-oracle tests (no timing, no files)."""

from __future__ import annotations

import numpy as np

from mlsysopt.costmodel.oracle.dataset import COLUMNS, TimedModel
from mlsysopt.costmodel.oracle.settings import SETTINGS


def synthetic_models(n: int, seed: int, flops: tuple[float, float] = (2e7, 8e7)) -> list[TimedModel]:
    """SYNTHETIC models whose latency is exactly additive: 2 us per node + 1 ms per GFLOP of linear layers (each of
    ``flops`` FLOPs, log-uniform; by default all in the additive model's one size bin)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(2, 9))
        ops = np.array(["input", *(["linear", "relu"] * k), "output"])
        nodes = np.zeros((len(ops), len(COLUMNS)))
        nodes[:, COLUMNS.index("groups")] = nodes[:, COLUMNS.index("kernel_area")] = 1
        lin = ops == "linear"
        nodes[lin, COLUMNS.index("flops")] = np.exp(rng.uniform(*np.log(flops), lin.sum()))
        ms = {}
        for s in SETTINGS:
            gf = nodes[:, 0].sum() * s.batch / 1e9
            ms[s.key] = (0.002 * len(ops) + gf * (1.0 if s.threads == 1 else 0.6)) * (1.3 if s.engine == "torch" else 1)
        edges = np.array([np.arange(len(ops) - 1), np.arange(1, len(ops))])
        out.append(TimedModel(f"m{i}", "synthetic", "train", ops, nodes, ms, edges=edges))
    return out
