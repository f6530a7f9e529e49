"""CompGraph: construction, validation errors, structure queries, conversions, save/load."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsysopt.errors import InvalidGraph, UnsupportedFormat
from mlsysopt.graph.ir import BASE_FEATURES, DEFAULT_VOCAB, CompGraph, build_vocab


def diamond() -> CompGraph:
    return CompGraph.build(
        ["a", "b", "c", "d"],
        ["input", "conv", "my_custom_op", "output"],
        {"compute": [1.0, 2.0, 3.0, 1.0], "flops": [0, 10, 20, 0]},
        [(0, 1), (0, 2), (1, 3), (2, 3)],
        [4.0, 5.0, 6.0, 7.0],
        hw_type=[0, 1, 0, 1],
        meta={"name": "diamond"},
    )


@st.composite
def dags(draw: st.DrawFn) -> CompGraph:
    n = draw(st.integers(1, 30))
    pairs = [(u, v) for v in range(n) for u in range(v)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=60)) if pairs else []
    perm = np.array(draw(st.permutations(range(n))))
    edges = [(int(perm[u]), int(perm[v])) for u, v in edges]
    compute = draw(st.lists(st.floats(0, 1e6), min_size=n, max_size=n))
    return CompGraph.build(
        [f"n{i}" for i in range(n)],
        ["task"] * n,
        {"compute": compute},
        edges,
        draw(st.lists(st.floats(0, 1e9), min_size=len(edges), max_size=len(edges))),
    )


def test_build_fills_base_features_and_vocab() -> None:
    g = diamond()
    assert g.feature_names[: len(BASE_FEATURES)] == BASE_FEATURES
    assert g.vocab[: len(DEFAULT_VOCAB)] == DEFAULT_VOCAB
    assert g.ops == ["input", "conv", "my_custom_op", "output"]
    assert g.opcodes[2] == len(DEFAULT_VOCAB)  # unknown ops are appended after the canonical ones
    assert g.total_flops == 30.0
    np.testing.assert_array_equal(g.feature("params"), 0.0)


def test_structure_queries() -> None:
    g = diamond()
    assert (g.num_nodes, g.num_edges, g.depth) == (4, 4, 3)
    assert list(g.topo_order) == [0, 1, 2, 3]
    assert sorted(g.children(0).tolist()) == [1, 2]
    assert sorted(g.parents(3).tolist()) == [1, 2]
    assert g.index("c") == 2
    assert g.op_histogram() == {"input": 1, "conv": 1, "my_custom_op": 1, "output": 1}


@given(dags())
@settings(max_examples=60, deadline=None)
def test_topological_order_respects_every_edge(g: CompGraph) -> None:
    pos = np.empty(g.num_nodes, int)
    pos[g.topo_order] = np.arange(g.num_nodes)
    assert sorted(g.topo_order.tolist()) == list(range(g.num_nodes))
    for u, v in g.edge_index.T:
        assert pos[u] < pos[v]
        assert g.levels[u] < g.levels[v]


@given(dags())
@settings(max_examples=40, deadline=None)
def test_save_load_round_trip(tmp_path_factory: pytest.TempPathFactory, g: CompGraph) -> None:
    path = tmp_path_factory.mktemp("rt") / "g.npz"
    g.save(path)
    h = CompGraph.load(path)
    assert h.names == g.names and h.vocab == g.vocab and h.feature_names == g.feature_names
    np.testing.assert_array_equal(h.x, g.x)
    np.testing.assert_array_equal(h.edge_index, g.edge_index)
    np.testing.assert_array_equal(h.edge_bytes, g.edge_bytes)
    np.testing.assert_array_equal(h.opcodes, g.opcodes)
    assert h.meta == g.meta


def test_save_leaves_no_temp_files(tmp_path) -> None:
    diamond().save(tmp_path / "g.npz")
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]


def test_cycle_is_named() -> None:
    with pytest.raises(InvalidGraph, match=r"cycle: (b -> c -> d -> b|c -> d -> b -> c|d -> b -> c -> d)"):
        CompGraph.build(list("abcd"), ["task"] * 4, {}, [(0, 1), (1, 2), (2, 3), (3, 1)])


def test_self_loop_is_a_cycle() -> None:
    with pytest.raises(InvalidGraph, match="cycle: a -> a"):
        CompGraph.build(["a"], ["task"], {}, [(0, 0)])


def test_edge_out_of_range() -> None:
    with pytest.raises(InvalidGraph, match=r"edge 1 \(1 -> 5\) is out of range: the graph has 2 nodes"):
        CompGraph.build(["a", "b"], ["task"] * 2, {}, [(0, 1), (1, 5)])
    with pytest.raises(InvalidGraph, match="out of range"):
        CompGraph.build(["a", "b"], ["task"] * 2, {}, [(-1, 1)])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_feature_is_named(bad: float) -> None:
    with pytest.raises(InvalidGraph, match=r"node 'b' feature 'flops' is (nan|inf|-inf)"):
        CompGraph.build(["a", "b"], ["task"] * 2, {"flops": [1.0, bad]}, [(0, 1)])


def test_negative_and_non_finite_bytes() -> None:
    with pytest.raises(InvalidGraph, match="feature 'compute' is negative"):
        CompGraph.build(["a"], ["task"], {"compute": [-1.0]}, [])
    with pytest.raises(InvalidGraph, match=r"edge 0 \('a' -> 'b'\) has bytes nan"):
        CompGraph.build(["a", "b"], ["task"] * 2, {}, [(0, 1)], [np.nan])


def test_empty_graph() -> None:
    with pytest.raises(InvalidGraph, match="graph is empty"):
        CompGraph.build([], [], {}, [])


def test_duplicate_names_and_shapes() -> None:
    with pytest.raises(InvalidGraph, match="'a' is used more than once"):
        CompGraph.build(["a", "a"], ["task"] * 2, {}, [])
    with pytest.raises(InvalidGraph, match="feature 'compute' has shape"):
        CompGraph.build(["a", "b"], ["task"] * 2, {"compute": [1.0]}, [])
    with pytest.raises(InvalidGraph, match="op names given"):
        CompGraph.build(["a", "b"], ["task"], {}, [])


def test_to_pyg_and_networkx() -> None:
    g = diamond()
    data = g.to_pyg()
    assert data.num_nodes == 4 and tuple(data.edge_index.shape) == (2, 4)
    assert data.x.shape == (4, len(g.feature_names)) and data.op.tolist() == g.opcodes.tolist()
    assert data.edge_attr[:, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 4 and nxg[0][1]["bytes"] == 4.0
    assert nxg.nodes[2]["op"] == "my_custom_op" and nxg.nodes[1]["flops"] == 10.0


def test_networkx_sums_parallel_edges() -> None:
    g = CompGraph.build(["a", "b"], ["task"] * 2, {}, [(0, 1), (0, 1)], [1.0, 2.0])
    assert g.num_edges == 2 and g.to_networkx()[0][1]["bytes"] == 3.0


def test_load_errors_name_file_and_key(tmp_path) -> None:
    with pytest.raises(InvalidGraph, match="no such file"):
        CompGraph.load(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(UnsupportedFormat, match="junk.npz"):
        CompGraph.load(junk)
    partial = tmp_path / "partial.npz"
    np.savez(partial, names=np.array(["a"]))
    with pytest.raises(InvalidGraph, match="partial.npz: not a CompGraph file, missing key 'opcodes'"):
        CompGraph.load(partial)


@pytest.mark.parametrize(("meta", "needle"), [("{not json", "not valid JSON"), ("[1, 2]", "not a JSON object")])
def test_load_reads_meta_with_the_guarded_reader(tmp_path, meta: str, needle: str) -> None:
    path = diamond().save(tmp_path / "g.npz")
    with np.load(path) as z:
        arrays = dict(z)
    np.savez(tmp_path / "bad.npz", **{**arrays, "meta": np.array(meta)})
    with pytest.raises(InvalidGraph, match=f"bad.npz: key 'meta'.*{needle}"):
        CompGraph.load(tmp_path / "bad.npz")


def test_load_reports_cycle_with_file(tmp_path) -> None:
    g = diamond()
    path = g.save(tmp_path / "g.npz")
    with np.load(path) as z:
        arrays = dict(z)
    arrays["edge_index"] = np.array([[0, 1, 3], [1, 3, 0]])
    arrays["edge_bytes"] = np.ones(3)
    bad = tmp_path / "cyc.npz"
    np.savez(bad, **arrays)
    with pytest.raises(InvalidGraph, match=r"cyc.npz: graph has a cycle: .*a.*"):
        CompGraph.load(bad)


def test_build_vocab_is_stable() -> None:
    vocab, ids = build_vocab(["relu", "foo", "relu", "bar", "foo"])
    assert vocab[-2:] == ("foo", "bar")
    assert ids.tolist() == [
        DEFAULT_VOCAB.index("relu"),
        len(DEFAULT_VOCAB),
        DEFAULT_VOCAB.index("relu"),
        len(DEFAULT_VOCAB) + 1,
        len(DEFAULT_VOCAB),
    ]


def test_large_deep_graph_levels() -> None:
    n = 200_000
    rng = np.random.default_rng(0)
    dst = np.arange(1, n)
    chain = np.stack([dst - 1, dst], 1)
    extra = np.stack([(dst * rng.random(n - 1)).astype(np.int64), dst], 1)
    g = CompGraph.build([f"n{i}" for i in range(n)], ["task"] * n, {}, np.concatenate([chain, extra]))
    assert g.topo_order[0] == 0 and g.depth == n  # a chain: a per-level loop would crawl here
