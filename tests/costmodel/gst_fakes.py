"""Tiny hand-built GraphRecords for the model and trainer tests (fast, fully controlled, no files)."""

from __future__ import annotations

import numpy as np

from mlsysopt.costmodel.data.record import GraphDataset, GraphRecord


class ListDataset(GraphDataset):
    """An in-memory dataset over a list of records."""

    def __init__(self, records: list[GraphRecord]) -> None:
        self.records = records
        self.task = records[0].task if records else "layout"
        self.reads = 0

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.records]

    def record(self, i: int) -> GraphRecord:
        self.reads += 1
        return self.records[i]


def _dag(n: int, rng: np.random.Generator) -> np.ndarray:
    """A chain 0 -> 1 -> ... plus short skip edges; node ids are a topological order."""
    v = np.arange(1, n)
    skip_v = v[(v >= 3) & (rng.random(n - 1) < 0.3)]
    skip_u = skip_v - rng.integers(2, 4, skip_v.size)
    return np.stack([np.r_[v - 1, skip_u], np.r_[v, skip_v]]).astype(np.int64)


def _longest_path(edge_index: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Critical path per config of a DAG in topological id order; ``dur`` is (c, n)."""
    order = np.argsort(edge_index[1], kind="stable")
    u, v = edge_index[0][order], edge_index[1][order]
    ptr = np.searchsorted(v, np.arange(dur.shape[1] + 1))
    finish = np.zeros_like(dur)
    for node in range(dur.shape[1]):
        prods = u[ptr[node] : ptr[node + 1]]
        start = finish[:, prods].max(1) if prods.size else 0.0
        finish[:, node] = start + dur[:, node]
    return finish.max(1)


def easy_layout(name: str, n: int, configs: int = 12, seed: int = 0, prefs: int = 1) -> GraphRecord:
    """A layout graph whose runtime is the critical path of costs ``size * (0.5 + [layout != opcode % prefs])``.

    About 30% of nodes are configurable (one-hot layout choice in 3 of the 18 features, -1 elsewhere); the others
    run in their preferred layout. The chain dominates the critical path, so runtime is learnable from the sum of
    per-node penalties, yet every node on the path counts (no single segment decides it).
    """
    rng = np.random.default_rng(seed)
    ei = _dag(n, rng)
    opcode = rng.integers(0, 6, n).astype(np.int64)
    size = rng.uniform(0.5, 2.0, n)
    x = np.zeros((n, 140), dtype=np.float32)
    x[:, 0] = size
    x[:, 1] = np.log(size)
    cfg_nodes = np.sort(rng.choice(n, max(1, int(0.3 * n)), replace=False)).astype(np.int64)
    choice = rng.integers(0, 3, (configs, cfg_nodes.size))
    feat = np.full((configs, cfg_nodes.size, 18), -1.0, dtype=np.float32)
    feat[..., :3] = np.eye(3, dtype=np.float32)[choice]
    pref = opcode % prefs  # the layout each op runs best in (prefs=1: layout 0 for every op)
    layout = np.tile(pref, (configs, 1))
    layout[:, cfg_nodes] = choice
    dur = size[None, :] * (0.5 + (layout != pref[None, :]))
    return GraphRecord(
        name=name,
        task="layout",
        x=x,
        edge_index=ei,
        opcode=opcode,
        node_splits=np.array([n // 2], dtype=np.int64) if n > 8 else None,
        config_node_ids=cfg_nodes,
        node_config_feat=feat,
        runtime=_longest_path(ei, dur),
    )


def easy_tile(name: str, n: int = 30, configs: int = 16, seed: int = 0) -> GraphRecord:
    """A tile graph whose runtime is the graph's work divided by a per-config efficiency read off its features."""
    rng = np.random.default_rng(seed)
    ei = _dag(n, rng)
    x = np.zeros((n, 140), dtype=np.float32)
    x[:, 0] = rng.uniform(0.5, 2.0, n)
    gcf = rng.uniform(0, 1, (configs, 24)).astype(np.float32)
    runtime = float(x[:, 0].sum()) / (0.2 + gcf[:, 0] + 0.5 * gcf[:, 1])
    return GraphRecord(
        name=name,
        task="tile",
        x=x,
        edge_index=ei,
        opcode=rng.integers(0, 6, n).astype(np.int64),
        graph_config_feat=gcf,
        runtime=runtime,
    )


def easy_malnet(name: str, label: int, n: int = 120, seed: int = 0) -> GraphRecord:
    """Class 0: a long chain; class 1: a few hubs calling everything. Features: local degree profile (5 columns)."""
    rng = np.random.default_rng(seed)
    if label == 0:
        u = np.arange(n - 1)
        v = u + 1
    else:
        v = np.arange(4, n)
        u = rng.integers(0, 4, v.size)
    ei = np.stack([u, v]).astype(np.int64)
    deg = np.bincount(ei.ravel(), minlength=n).astype(np.float32)
    nb = [[] for _ in range(n)]
    for a, b in ei.T:
        nb[a].append(deg[b])
        nb[b].append(deg[a])
    stats = [(min(d), max(d), np.mean(d), np.std(d)) if d else (0, 0, 0, 0) for d in nb]
    x = np.column_stack([deg, np.asarray(stats, dtype=np.float32)]).astype(np.float32)
    return GraphRecord(name=name, task="malnet", x=x, edge_index=ei, label=label)
