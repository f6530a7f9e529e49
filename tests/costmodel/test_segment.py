"""Segments: invariants (every node once, size cap, splits, no crossing edges), METIS, the caching segmenter."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.costmodel.data.record import GraphRecord
from mlsysopt.costmodel.segment import (
    Segmentation,
    Segmenter,
    contiguous_segments,
    metis_segments,
    undirected_csr,
)
from mlsysopt.errors import InvalidOption, MlsysoptError


def _record(n: int, edges: np.ndarray, name: str = "g", splits: np.ndarray | None = None) -> GraphRecord:
    return GraphRecord(name=name, task="malnet", x=np.zeros((n, 1), np.float32), edge_index=edges, node_splits=splits)


def _dag(n: int, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.integers(0, n - 1, m)
    v = np.minimum(u + rng.geometric(0.05, m), n - 1)
    return np.stack((u, v)).astype(np.int64)


def _clusters(k: int, size: int, seed: int = 0) -> np.ndarray:
    """k dense random clusters joined in a ring by single edges: METIS should find them."""
    rng = np.random.default_rng(seed)
    parts = []
    for c in range(k):
        u = rng.integers(0, size, 6 * size) + c * size
        v = rng.integers(0, size, 6 * size) + c * size
        parts.append(np.stack((u, v)))
    ring = np.array([[c * size for c in range(k)], [((c + 1) % k) * size + 1 for c in range(k)]])
    return np.concatenate([*parts, ring], axis=1).astype(np.int64)


def _check_partition(seg: Segmentation, n: int) -> None:
    assert seg.num_nodes == n
    seen = np.concatenate([seg.nodes(s) for s in range(seg.num_segments)]) if n else np.zeros(0, np.int64)
    assert np.array_equal(np.sort(seen), np.arange(n))  # every node in exactly one segment
    for s in range(seg.num_segments):
        nodes = seg.nodes(s)
        assert nodes.size == seg.sizes[s] > 0
        assert np.all(np.diff(nodes) > 0)  # sorted
        assert np.all(seg.assignment[nodes] == s)


@pytest.mark.parametrize(("n", "size"), [(1, 1), (7, 3), (10, 10), (11, 10), (1001, 1000), (2500, 300), (5, 100)])
def test_contiguous_partition_invariants(n: int, size: int) -> None:
    seg = contiguous_segments(n, size)
    _check_partition(seg, n)
    assert seg.num_segments == -(-n // size)  # fewest chunks that fit
    assert seg.sizes.max() <= size and seg.sizes.max() - seg.sizes.min() <= 1  # equal chunks
    assert np.all(np.diff(seg.assignment) >= 0)  # chunks of consecutive ids (topological order)


def test_contiguous_respects_node_splits() -> None:
    seg = contiguous_segments(20, 6, node_splits=np.array([3, 4, 15, 15, 0, 20]))
    _check_partition(seg, 20)
    starts = [int(seg.nodes(s)[0]) for s in range(seg.num_segments)]
    assert {0, 3, 4, 15} <= set(starts)
    assert seg.sizes.max() <= 6
    # [0,3) [3,4) [4,15) -> 2 chunks, [15,20)
    assert seg.sizes.tolist() == [3, 1, 5, 6, 5]


def test_contiguous_empty_graph_and_bad_options() -> None:
    assert contiguous_segments(0, 5).num_segments == 0
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InvalidOption, match="segment size"):
            contiguous_segments(10, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="node_splits"):
        contiguous_segments(10, 3, node_splits=np.array([2, 11]))
    with pytest.raises(InvalidOption, match="num_nodes"):
        contiguous_segments(-1, 3)


def test_subgraph_drops_crossing_edges_and_uses_local_ids() -> None:
    n = 300
    ei = _dag(n, 1200)
    seg = contiguous_segments(n, 40)
    kept = 0
    for s in range(seg.num_segments):
        local, nodes = seg.subgraph(s, ei)
        assert local.shape[0] == 2 and local.dtype == np.int64
        if local.size:
            assert local.min() >= 0 and local.max() < nodes.size
        glob = nodes[local]  # back to global ids: both endpoints in segment s
        assert np.all(seg.assignment[glob] == s)
        kept += local.shape[1]
        # exactly the edges of ei inside s, with multiplicity
        inside = ei[:, (seg.assignment[ei[0]] == s) & (seg.assignment[ei[1]] == s)]
        assert sorted(map(tuple, glob.T.tolist())) == sorted(map(tuple, inside.T.tolist()))
    crossing = int((seg.assignment[ei[0]] != seg.assignment[ei[1]]).sum())
    assert kept + crossing == ei.shape[1]


def test_subgraph_recomputes_for_a_new_edge_array_and_checks_it() -> None:
    seg = contiguous_segments(4, 2)
    a = np.array([[0, 2], [1, 3]])
    b = np.array([[1], [0]])
    assert seg.subgraph(1, a)[0].tolist() == [[0], [1]]
    assert seg.subgraph(1, b)[0].shape == (2, 0)
    assert seg.subgraph(0, b)[0].tolist() == [[1], [0]]
    with pytest.raises(InvalidOption, match="outside"):
        seg.subgraph(0, np.array([[0], [9]]))
    with pytest.raises(InvalidOption, match=r"\(2, m\)"):
        seg.subgraph(0, np.zeros((3, 2), np.int64))
    with pytest.raises(InvalidOption, match="out of range"):
        seg.nodes(2)


def test_segmentation_rejects_non_contiguous_ids_and_is_read_only() -> None:
    with pytest.raises(InvalidOption, match="empty"):
        Segmentation(np.array([0, 2, 2]))
    with pytest.raises(InvalidOption):
        Segmentation(np.array([0, -1]))
    with pytest.raises(InvalidOption):
        Segmentation(np.array([0.5, 1.0]))
    with pytest.raises(InvalidOption, match="num_segments"):
        Segmentation(np.array([0, 1]), num_segments=3)
    seg = Segmentation(np.array([1, 0, 1, 0]))
    assert seg.nodes(0).tolist() == [1, 3] and seg.nodes(1).tolist() == [0, 2]
    assert seg.local_index().tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError):
        seg.nodes(0)[0] = 5


def test_undirected_csr_symmetric_no_loops_no_duplicates() -> None:
    ei = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 1, 3, 3, 2]])
    xadj, adj = undirected_csr(ei, 5)
    assert xadj.tolist() == [0, 1, 2, 3, 4, 4]
    assert adj.tolist() == [1, 0, 3, 2]


def test_metis_reference_num_parts_cap_and_quality() -> None:
    k, size = 8, 60
    ei = _clusters(k, size)
    n = k * size
    seg = metis_segments(ei, n, max_size=60)
    _check_partition(seg, n)
    assert seg.sizes.max() <= 60
    assert n // 60 + 1 - 1 <= seg.num_segments <= n // 60 + 1 + 2  # reference rule, empty parts dropped
    cut = int((seg.assignment[ei[0]] != seg.assignment[ei[1]]).sum())
    random_cut = ei.shape[1] * (1 - 1 / seg.num_segments)
    assert cut < 0.5 * random_cut  # finds the clusters far better than chance
    again = metis_segments(ei, n, max_size=60, seed=0)
    assert np.array_equal(seg.assignment, again.assignment)  # deterministic for a seed


def test_metis_single_part_isolated_nodes_and_bad_input() -> None:
    ei = np.array([[0, 1], [1, 2]])
    assert metis_segments(ei, 5, max_size=10).assignment.tolist() == [0] * 5  # n // 10 + 1 == 1 part
    seg = metis_segments(np.zeros((2, 0), np.int64), 25, max_size=4)  # no edges at all
    _check_partition(seg, 25)
    assert seg.sizes.max() <= 4
    assert metis_segments(np.zeros((2, 0), np.int64), 0, max_size=3).num_segments == 0
    with pytest.raises(InvalidOption, match="segment size"):
        metis_segments(ei, 5, max_size=0)
    with pytest.raises(InvalidOption, match="outside"):
        metis_segments(np.array([[0], [7]]), 5, max_size=2)


def test_segmenter_caches_in_memory_and_on_disk(tmp_path) -> None:
    rec = _record(500, _dag(500, 2000), name="train/g 1", splits=np.array([100]))
    seg = Segmenter("contiguous", max_size=64, cache_dir=tmp_path)
    first = seg(rec)
    assert seg(rec) is first and (seg.hits, seg.misses) == (1, 1)
    files = list(tmp_path.glob("*.npy"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))
    fresh = Segmenter("contiguous", max_size=64, cache_dir=tmp_path)
    assert np.array_equal(fresh(rec).assignment, first.assignment) and fresh.hits == 1  # read from disk
    # a changed graph with the same name is not served a stale partition
    other = _record(500, rec.edge_index, name="train/g 1", splits=np.array([250]))
    assert 250 in [int(fresh(other).nodes(s)[0]) for s in range(fresh(other).num_segments)]
    # corrupt cache file: recomputed and rewritten, not an error
    files[0].write_bytes(b"garbage")
    third = Segmenter("contiguous", max_size=64, cache_dir=tmp_path)
    assert np.array_equal(third(rec).assignment, first.assignment) and third.misses == 1
    assert np.array_equal(np.load(files[0]), first.assignment)


def test_segmenter_metis_key_includes_edges_and_lru_bound() -> None:
    seg = Segmenter("metis", max_size=30, memory_items=2)
    a = _record(120, _clusters(4, 30), name="g")
    b = _record(120, _clusters(4, 30, seed=1), name="g")
    sa, sb = seg(a), seg(b)
    assert sa is not sb and seg.misses == 2
    seg(_record(10, np.zeros((2, 0), np.int64), name="h"))
    assert len(seg._memory) == 2
    seg.clear()
    assert seg(a) is not sa and np.array_equal(seg(a).assignment, sa.assignment)


def test_segmenter_bad_options() -> None:
    with pytest.raises(InvalidOption, match="unknown segmentation method"):
        Segmenter("random")
    with pytest.raises(InvalidOption, match="segment size"):
        Segmenter("contiguous", max_size=0)
    assert issubclass(InvalidOption, MlsysoptError)


def test_contiguous_and_subgraph_scale_to_500k_nodes() -> None:
    n, m = 500_000, 1_500_000
    ei = _dag(n, m)
    seg = contiguous_segments(n, 1000, node_splits=np.arange(0, n, 7919))
    edges = 0
    for s in range(seg.num_segments):
        local, nodes = seg.subgraph(s, ei)
        assert local.size == 0 or local.max() < nodes.size
        edges += local.shape[1]
    assert seg.sizes.max() <= 1000 and seg.sizes.sum() == n
    assert 0 < edges <= m  # an edge inside a segment belongs to that segment only (speed: benchmarks/gst.py)


def test_oversized_metis_parts_are_cut_to_the_cap() -> None:
    from mlsysopt.costmodel.segment import _split_oversized

    parts = np.array([0] * 7 + [1] * 2 + [0] * 3)  # part 0 has 10 nodes, cap 4
    seg = _split_oversized(parts, 4)
    _check_partition(seg, 12)
    assert seg.sizes.max() <= 4 and seg.num_segments == 1 + 3
    assert seg.nodes(seg.assignment[7]).tolist() == [7, 8]  # the small part is untouched


def test_grouped_edges_are_released_with_the_edge_array() -> None:
    seg = contiguous_segments(6, 3)
    ei = np.array([[0, 3], [1, 4]])
    seg.subgraph(0, ei)
    assert seg._edges is not None
    del ei
    assert seg._edges is None  # a cached segmentation does not pin a dropped record's edges
