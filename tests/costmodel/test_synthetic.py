"""Tests for the SYNTHETIC generators: published formats, determinism, the non-local runtime model, and scale."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel.data import (
    LAYOUT_KEYS,
    MALNET_CLASSES,
    TILE_KEYS,
    layout_durations,
    layout_record,
    layout_runtime,
    load_tile_npz,
    malnet_like_graph,
    synth_layout,
    synth_layout_graph,
    synth_malnet,
    synth_tile,
    synth_tile_graph,
    to_compgraph,
)
from mlsysopt.costmodel.data.synthetic import _UNIT, SYNTH_OPS, _perm
from mlsysopt.errors import InvalidOption
from mlsysopt.graph import longest_path


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_layout_graph_has_published_keys_dtypes_and_topological_ids() -> None:
    a = synth_layout_graph(2000, 16, _rng(), splits=True)
    assert set(a) == {*LAYOUT_KEYS, "node_splits"}
    assert a["node_feat"].dtype == np.float32 and a["node_feat"].shape == (2000, 140)
    assert a["node_opcode"].dtype == np.uint8 and a["node_opcode"].max() < len(SYNTH_OPS)
    assert a["edge_index"].dtype == np.int64 and a["edge_index"].shape[1] == 2
    assert a["config_runtime"].dtype == np.int64 and a["config_runtime"].shape == (16,)
    nc = a["node_config_ids"].shape[0]
    assert a["node_config_feat"].shape == (16, nc, 18) and 0.05 <= nc / 2000 <= 0.2
    assert a["node_splits"].ndim == 2 and a["node_splits"].shape[0] == 1
    cons, prod = a["edge_index"].T
    assert (prod < cons).all()  # [u, v]: u consumes v, and ids are a topological order
    assert len(np.unique(a["config_runtime"])) > 8  # configurations really differ
    assert "node_splits" not in synth_layout_graph(100, 2, _rng(), splits=False)


def test_config_features_are_minor_to_major_orders_padded_with_minus_one() -> None:
    a = synth_layout_graph(500, 8, _rng(1))
    rank = a["node_feat"][a["node_config_ids"], 1].astype(int)
    out = a["node_config_feat"][:, :, :6]
    for j in range(0, rank.size, 7):
        for c in range(8):
            r = rank[j]
            assert sorted(out[c, j, :r].astype(int).tolist()) == list(range(r)) and (out[c, j, r:] == -1).all()
    np.testing.assert_array_equal(a["node_config_feat"][0, :, :6], a["node_feat"][a["node_config_ids"], 13:19])


def test_runtime_is_the_shared_simulators_critical_path() -> None:
    a = synth_layout_graph(400, 6, _rng(2))
    r = layout_record(a, "g")
    dur = layout_durations(a)
    assert dur.shape == (6, 400) and (dur >= 0).all()
    for c in range(6):
        cp = longest_path(to_compgraph(r, dur[c], SYNTH_OPS), dur[c])
        assert a["config_runtime"][c] == round(cp)
        assert cp < dur[c].sum()  # a critical path, not the sum of all costs


def _with_class(a: dict, j: int, k: int, c: int = 0) -> dict:
    """A copy of ``a`` whose configuration ``c`` sets configurable node ``j`` to layout class ``k``."""
    b = dict(a)
    ncf = a["node_config_feat"].copy()
    ncf[c, j, :] = -1
    r = int(a["node_feat"][a["node_config_ids"][j], 1])
    ncf[c, j, :r] = _perm(r, k)
    b["node_config_feat"] = ncf
    return b


def test_one_nodes_layout_changes_costs_of_consumers_in_other_segments() -> None:
    a = synth_layout_graph(3000, 1, _rng(3))
    base = layout_durations(a)[0]
    far = 0
    for j, u in enumerate(a["node_config_ids"][:200]):
        changed = np.flatnonzero(~np.isclose(layout_durations(_with_class(a, j, 2))[0], base))
        assert (changed >= u).all()  # only the node and what consumes its output (ids are topological)
        far += int((changed // 100 != u // 100).any())
    assert far > 5  # with 100-node segments, some effects land in another segment


def test_segments_interact_so_no_segment_alone_determines_runtime() -> None:
    a = synth_layout_graph(3000, 1, _rng(5))
    ids = a["node_config_ids"]

    def runtime(seg_a: np.ndarray, ka: int, seg_b: np.ndarray, kb: int) -> float:
        b = a
        for j in seg_a:
            b = _with_class(b, int(j), ka)
        for j in seg_b:
            b = _with_class(b, int(j), kb)
        return float(layout_runtime(b)[0])

    interacting = 0
    for s in range(25):  # adjacent 100-node segments A and B
        seg_a = np.flatnonzero((ids >= 100 * s) & (ids < 100 * s + 100))
        seg_b = np.flatnonzero((ids >= 100 * s + 100) & (ids < 100 * s + 200))
        effect_of_a = [runtime(seg_a, 1, seg_b, kb) - runtime(seg_a, 0, seg_b, kb) for kb in (0, 2)]
        interacting += abs(effect_of_a[0] - effect_of_a[1]) > 1e-6 * runtime(seg_a, 0, seg_b, 0)
    assert interacting >= 2  # what A's layouts are worth depends on B's: the runtime is not a sum over segments


def test_layout_mismatch_costs_a_transpose_and_layouts_propagate() -> None:
    # 0 parameter -> 1 dot (configurable) -> 2 add(1, 0) -> 3 tanh(2); all 128 x 128, every native class 0
    x = np.zeros((4, 140), np.float32)
    x[:, 1], x[:, 2:4], x[:, 13:15], x[1, 9] = 2, 128, [1, 0], 128
    x[0, 0] = 1
    a = {
        "node_feat": x,
        "node_opcode": np.array([SYNTH_OPS.index(o) for o in ("parameter", "dot", "add", "tanh")], np.uint8),
        "edge_index": np.array([[1, 0], [2, 1], [2, 0], [3, 2]]),
        "node_config_ids": np.array([1]),
        "node_config_feat": np.array([[[1, 0] + [-1] * 16], [[0, 1] + [-1] * 16]], np.float32),  # class 0, 1
    }
    same, swapped = layout_durations(a)
    transpose = _UNIT * (1 + np.log2(128 * 128))  # grows with the producer's size
    # 128 x 128 pads nothing in either order, so only transposes differ: the dot's weights mismatch, and the add
    # follows the dot's layout, so its other input (the parameter) mismatches too; the tanh follows without cost
    np.testing.assert_allclose(swapped - same, [0, transpose, transpose, 0])
    assert layout_runtime(a)[1] - layout_runtime(a)[0] == pytest.approx(2 * transpose)


def test_padding_penalty_depends_on_dims_and_layout() -> None:
    # one dot of shape (3, 256): row-major puts 256 minor (no waste); swapping puts 3 minor (pads to 128)
    x = np.zeros((2, 140), np.float32)
    x[:, 1], x[:, 2:4], x[:, 13:15], x[1, 9] = 2, [3, 256], [1, 0], 64
    a = {
        "node_feat": x,
        "node_opcode": np.array([SYNTH_OPS.index("parameter"), SYNTH_OPS.index("dot")], np.uint8),
        "edge_index": np.array([[1, 0]]),
        "node_config_ids": np.array([0, 1]),
        "node_config_feat": np.array([[[1, 0] + [-1] * 16] * 2, [[0, 1] + [-1] * 16] * 2], np.float32),
    }
    row_major, swapped = layout_durations(a)
    assert row_major[0] == swapped[0] == 0.0  # a parameter costs nothing to run
    assert swapped[1] > row_major[1] * 1.5  # 3 -> 128 padding on the minor-most dim


def test_determinism_by_seed(tmp_path: Path) -> None:
    a, b, c = (synth_layout_graph(800, 4, _rng(s)) for s in (7, 7, 8))
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["config_runtime"], c["config_runtime"])
    w1 = synth_layout(tmp_path / "1", {"train": 2, "test": 1}, nodes=(100, 300), configs=(3, 6), seed=11)
    w2 = synth_layout(tmp_path / "2", {"train": 2, "test": 1}, nodes=(100, 300), configs=(3, 6), seed=11)
    for p1, p2 in zip(w1["train"] + w1["test"], w2["train"] + w2["test"], strict=True):
        with np.load(p1) as f1, np.load(p2) as f2:
            assert p1.name == p2.name and all(np.array_equal(f1[k], f2[k]) for k in f1.files)
    m1 = synth_malnet(tmp_path / "m1", 3, nodes=(30, 60), seed=2)
    m2 = synth_malnet(tmp_path / "m2", 3, nodes=(30, 60), seed=2)
    assert m1 == m2
    for name in m1["train"]:
        assert (tmp_path / "m1" / f"{name}.edgelist").read_text() == (tmp_path / "m2" / f"{name}.edgelist").read_text()


def test_writers_leave_no_temporary_files(tmp_path: Path) -> None:
    synth_layout(tmp_path / "l", 2, nodes=50, configs=2)
    synth_tile(tmp_path / "t", 2, nodes=10, configs=3)
    synth_malnet(tmp_path / "m", 3, nodes=20)
    assert not [p for p in tmp_path.rglob(".*")]
    assert sorted(p.name for p in (tmp_path / "l").iterdir()) == ["test", "train", "valid"]
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == sorted([*MALNET_CLASSES, "split_info"])


def test_tile_graph_format_and_normalized_runtime(tmp_path: Path) -> None:
    a = synth_tile_graph(60, 20, _rng(9))
    assert set(a) == set(TILE_KEYS) and a["config_feat"].shape == (20, 24) and a["config_feat"].dtype == np.float32
    assert (a["config_runtime_normalizers"] == a["config_runtime_normalizers"][0]).all()
    synth_tile(tmp_path, {"train": 1}, nodes=60, configs=20, seed=0)
    r = load_tile_npz(next((tmp_path / "train").glob("*.npz")))
    assert r.runtime.std() > 0.01 and np.median(r.runtime) < 20


def test_malnet_splits_are_stratified_70_10_20(tmp_path: Path) -> None:
    splits = synth_malnet(tmp_path, graphs_per_class=10, nodes=(30, 50), seed=0)
    assert [len(splits[s]) for s in ("train", "val", "test")] == [35, 5, 10]
    for s, names in splits.items():
        assert (tmp_path / "split_info" / f"{s}.txt").read_text().split() == names
        assert {n.split("/")[0] for n in names} == set(MALNET_CLASSES)
    header = (tmp_path / f"{splits['test'][0]}.edgelist").read_text().splitlines()[:5]
    assert all(h.startswith("# ") for h in header) and "SYNTHETIC" in header[0]


@pytest.mark.parametrize("cls", MALNET_CLASSES)
def test_malnet_like_families_share_size_but_differ_in_degree_profile(cls: str) -> None:
    e = malnet_like_graph(cls, 5000, _rng(1))
    n = int(e.max()) + 1
    assert 4000 < n <= 5000 and 1.4 < e.shape[1] / 5000 < 3.1  # about 2 calls per function for every type
    assert (e[0] != e[1]).all() and np.unique(e[0] * n + e[1]).size == e.shape[1]
    outdeg = np.bincount(e[0], minlength=n)
    if cls == "addisplay":
        assert outdeg.max() > 100  # hubs
    if cls in ("downloader", "trojan"):
        assert outdeg.max() < 40


def test_bad_generator_options(tmp_path: Path) -> None:
    for call in (
        lambda: synth_layout_graph(1, 4, _rng()),
        lambda: synth_layout_graph(10, 0, _rng()),
        lambda: synth_tile_graph(10, 0, _rng()),
        lambda: synth_layout(tmp_path, 1, nodes=(50, 10)),
        lambda: synth_layout(tmp_path, {"train": -1}),
        lambda: synth_malnet(tmp_path, graphs_per_class=2),
        lambda: malnet_like_graph("spyware", 100, _rng()),
    ):
        with pytest.raises(InvalidOption):
            call()


def test_layout_builds_a_500k_node_graph() -> None:
    """The size GST's memory benchmark uses (its generation time is timed there, in benchmarks/gst.py)."""
    a = synth_layout_graph(500_000, 4, _rng(0))
    assert a["node_feat"].shape[0] == 500_000 and a["config_runtime"].shape == (4,)


def test_malnet_like_memory_is_linear_in_edges() -> None:
    tracemalloc.start()
    e = malnet_like_graph("trojan", 300_000, _rng(0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 150 * e.shape[1]  # bytes per edge: O(edges), no dense or quadratic intermediate
