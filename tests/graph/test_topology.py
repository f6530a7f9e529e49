"""CSR views, priority orders and batched longest paths: the structure entry points every package uses."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from mlsysopt.errors import InvalidGraph
from mlsysopt.graph import build_csr, layered_dag, longest_path, longest_paths, longest_paths_csr
from mlsysopt.graph.topology import kahn_levels


def test_build_csr_groups_neighbours() -> None:
    src, dst = np.array([2, 0, 0, 1]), np.array([3, 2, 1, 3])
    indptr, nbr, eid = build_csr(src, dst, 4)
    assert indptr.tolist() == [0, 2, 3, 4, 4]
    assert nbr.tolist() == [1, 2, 3, 3]
    assert (src[eid] == np.repeat(np.arange(4), np.diff(indptr))).all() and (dst[eid] == nbr).all()


def test_graph_csr_views_match_the_edges() -> None:
    g = layered_dag(40, seed=3)
    for i in range(g.num_nodes):
        kids = sorted(int(v) for u, v in g.edge_index.T if u == i)
        pars = sorted(int(u) for u, v in g.edge_index.T if v == i)
        assert sorted(g.children(i).tolist()) == kids
        assert sorted(g.parents(i).tolist()) == pars
    assert g.in_degree.tolist() == [len(g.parents(i)) for i in range(g.num_nodes)]


def test_priority_order_is_topological_and_follows_priorities() -> None:
    g = layered_dag(50, seed=4)
    rng = np.random.default_rng(0)
    order = g.priority_order(rng.random(g.num_nodes))
    pos = np.empty(g.num_nodes, int)
    pos[order] = np.arange(g.num_nodes)
    assert sorted(order.tolist()) == list(range(g.num_nodes))
    assert (pos[g.edge_index[0]] < pos[g.edge_index[1]]).all()
    # with priority = node id, sources come out in id order first
    by_id = g.priority_order(np.arange(g.num_nodes, dtype=float))
    sources = np.flatnonzero(g.in_degree == 0)
    assert by_id[: len(sources)].tolist() == sorted(sources.tolist())


def test_longest_paths_match_networkx() -> None:
    g = layered_dag(60, seed=5)
    rng = np.random.default_rng(1)
    dur = rng.random((4, g.num_nodes))
    nxg = g.to_networkx()
    want = []
    for row in dur:
        best = {}
        for v in nx.topological_sort(nxg):
            best[v] = row[v] + max((best[u] for u in nxg.predecessors(v)), default=0.0)
        want.append(max(best.values()))
    assert np.allclose(longest_paths(g, dur), want)
    assert longest_path(g, dur[0]) == pytest.approx(want[0])
    indptr, par, _ = g.parents_csr
    assert np.allclose(longest_paths_csr(g.topo_order, indptr, par, dur), want)


def test_longest_paths_reject_bad_durations() -> None:
    g = layered_dag(10, seed=6)
    with pytest.raises(InvalidGraph, match="expected"):
        longest_paths(g, np.ones(g.num_nodes))
    with pytest.raises(InvalidGraph, match="finite"):
        longest_paths(g, np.full((1, g.num_nodes), np.inf))


def test_kahn_levels_flags_cycles() -> None:
    indptr, child, _ = build_csr(np.array([0, 1, 2]), np.array([1, 2, 1]), 3)
    indeg = np.array([0, 2, 1])
    _, done = kahn_levels(indptr, child, indeg)
    assert done == 1
