"""Tests for the TpuGraphs layout/tile loaders: published keys and shapes, laziness, and every malformed input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel.data import (
    LAYOUT_KEYS,
    SYNTH_OPS,
    TILE_KEYS,
    MalNetDataset,
    TpuGraphsDataset,
    layout_runtime,
    layout_to_compgraph,
    load_layout_npz,
    load_tile_npz,
    open_dataset,
    save_npz,
    synth_layout,
    synth_layout_graph,
    synth_malnet,
    synth_tile,
    tile_to_compgraph,
    to_compgraph,
)
from mlsysopt.costmodel.data.synthetic import layout_durations
from mlsysopt.errors import InvalidDataFile, InvalidOption
from mlsysopt.graph import longest_path


def _layout(n: int = 4, c: int = 3) -> dict[str, np.ndarray]:
    """A tiny valid layout graph: chain 0 -> 1 -> 2 -> 3 (rows [consumer, producer]), nodes 1 and 3 configurable."""
    rng = np.random.default_rng(0)
    return {
        "node_feat": rng.random((n, 140)).astype(np.float32),
        "node_opcode": np.arange(n, dtype=np.uint8),
        "edge_index": np.array([[i + 1, i] for i in range(n - 1)], np.int64),
        "node_config_ids": np.array([1, 3], np.int64),
        "node_config_feat": rng.random((c, 2, 18)).astype(np.float32),
        "config_runtime": np.arange(1, c + 1, dtype=np.int64) * 100,
    }


def _tile(n: int = 4, c: int = 3) -> dict[str, np.ndarray]:
    a = _layout(n, c)
    del a["node_config_ids"], a["node_config_feat"]
    a["config_feat"] = np.random.default_rng(1).random((c, 24)).astype(np.float32)
    a["config_runtime_normalizers"] = np.full(c, 50, np.int64)
    return a


def test_layout_file_loads_with_flipped_edges(tmp_path: Path) -> None:
    save_npz(tmp_path / "g.npz", _layout())
    r = load_layout_npz(tmp_path / "g.npz")
    assert (r.name, r.task, r.num_nodes, r.num_edges, r.num_configs) == ("g", "layout", 4, 3, 3)
    assert r.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]  # producer -> consumer
    assert r.x.dtype == np.float32 and r.edge_index.dtype == np.int64 and r.opcode.dtype == np.int64
    assert r.node_config_feat.shape == (3, 2, 18) and r.runtime.dtype == np.float64
    assert r.runtime.tolist() == [100.0, 200.0, 300.0] and r.node_splits is None and r.label is None


def test_tile_runtime_is_normalized(tmp_path: Path) -> None:
    save_npz(tmp_path / "k.npz", _tile())
    r = load_tile_npz(tmp_path / "k.npz")
    assert r.task == "tile" and r.graph_config_feat.shape == (3, 24) and r.node_config_feat is None
    np.testing.assert_allclose(r.runtime, [2.0, 4.0, 6.0])


def test_node_splits_flattened_sorted_and_trimmed(tmp_path: Path) -> None:
    a = _layout(n=10)
    a["edge_index"] = np.array([[i + 1, i] for i in range(9)], np.int64)
    a["node_splits"] = np.array([[7, 0, 3, 3, 10]], np.int64)
    save_npz(tmp_path / "g.npz", a)
    assert load_layout_npz(tmp_path / "g.npz").node_splits.tolist() == [3, 7]


def _drop(key: str) -> Callable[[dict], None]:
    return lambda a: a.pop(key)


def _set(key: str, fn: Callable[[dict], np.ndarray]) -> Callable[[dict], None]:
    def mutate(a: dict) -> None:
        a[key] = fn(a)

    return mutate


def _nan_at(key: str, index: tuple[int, ...], value: float = np.nan) -> Callable[[dict], None]:
    def mutate(a: dict) -> None:
        arr = a[key].astype(np.float64 if key == "config_runtime" else a[key].dtype)
        arr[index] = value
        a[key] = arr

    return mutate


def _empty_graph(a: dict) -> None:
    a["node_feat"] = np.zeros((0, 140), np.float32)
    a["node_opcode"] = np.zeros(0, np.uint8)
    a["edge_index"] = np.zeros((0, 2), np.int64)


def _zero_configs(a: dict) -> None:
    a["config_runtime"] = np.zeros(0, np.int64)
    a["node_config_feat"] = np.zeros((0, 2, 18), np.float32)


LAYOUT_BAD: list[tuple[str, Callable[[dict], None], str, str]] = [
    *[(f"missing {k}", _drop(k), k, "missing key") for k in LAYOUT_KEYS],
    ("config feat nodes", _set("node_config_feat", lambda a: np.zeros((3, 3, 18), np.float32)), "node_config_feat",
     "expected (3, 2, 18)"),
    ("config feat width", _set("node_config_feat", lambda a: np.zeros((3, 2, 17), np.float32)), "node_config_feat",
     "shape (3, 2, 17)"),
    ("runtime count", _set("config_runtime", lambda a: np.ones(4, np.int64)), "node_config_feat",
     "expected (4, 2, 18)"),
    ("opcode count", _set("node_opcode", lambda a: np.zeros(3, np.uint8)), "node_opcode", "expected (4,)"),
    ("feat width", _set("node_feat", lambda a: np.zeros((4, 139), np.float32)), "node_feat", "expected (4, 140)"),
    ("zero configs", _zero_configs, "config_runtime", "zero configurations"),
    ("empty graph", _empty_graph, "node_feat", "empty"),
    ("edge out of range", _set("edge_index", lambda a: np.array([[1, 0], [4, 2]])), "edge_index", "out of range"),
    ("negative edge", _set("edge_index", lambda a: np.array([[1, -1]])), "edge_index", "out of range"),
    ("float edges", _set("edge_index", lambda a: np.array([[1.0, 0.0]])), "edge_index", "integers"),
    ("edge shape", _set("edge_index", lambda a: np.array([[1, 0, 2]])), "edge_index", "expected (m, 2)"),
    ("nan feature", _nan_at("node_feat", (2, 5)), "node_feat", "non-finite"),
    ("inf config feature", _nan_at("node_config_feat", (1, 0, 3), np.inf), "node_config_feat", "non-finite"),
    ("nan runtime", _nan_at("config_runtime", (1,)), "config_runtime", "non-finite"),
    ("zero runtime", _set("config_runtime", lambda a: np.array([5, 0, 7])), "config_runtime", "> 0"),
    ("config id out of range", _set("node_config_ids", lambda a: np.array([1, 9])), "node_config_ids", "out of range"),
    ("config id twice", _set("node_config_ids", lambda a: np.array([1, 1])), "node_config_ids", "more than once"),
    ("no configurable node", _set("node_config_ids", lambda a: np.zeros(0, np.int64)), "node_config_ids", "empty"),
    ("negative opcode", _set("node_opcode", lambda a: np.array([0, -1, 0, 0])), "node_opcode", "negative"),
    ("split out of range", _set("node_splits", lambda a: np.array([[2, 9]])), "node_splits", "outside 0..4"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "mutate", "key", "text"), LAYOUT_BAD, ids=[c[0] for c in LAYOUT_BAD])
def test_bad_layout_file_names_file_and_key(tmp_path: Path, case: str, mutate, key: str, text: str) -> None:
    a = _layout()
    mutate(a)
    save_npz(tmp_path / "train" / "bad_g3.npz", a)
    with pytest.raises(InvalidDataFile) as err:
        load_layout_npz(tmp_path / "train" / "bad_g3.npz")
    msg = str(err.value)
    assert "train/bad_g3.npz" in msg and f"'{key}'" in msg and text in msg, msg


TILE_BAD: list[tuple[str, Callable[[dict], None], str, str]] = [
    *[(f"missing {k}", _drop(k), k, "missing key") for k in TILE_KEYS],
    ("config feat width", _set("config_feat", lambda a: np.zeros((3, 23), np.float32)), "config_feat",
     "expected (3, 24)"),
    ("normalizer count", _set("config_runtime_normalizers", lambda a: np.ones(2)), "config_runtime_normalizers",
     "expected (3,)"),
    ("zero normalizer", _set("config_runtime_normalizers", lambda a: np.array([1, 0, 1])), "config_runtime_normalizers",
     "> 0"),
    ("nan config feat", _nan_at("config_feat", (0, 0)), "config_feat", "non-finite"),
    ("zero configs", _set("config_runtime", lambda a: np.zeros(0)), "config_runtime", "zero configurations"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "mutate", "key", "text"), TILE_BAD, ids=[c[0] for c in TILE_BAD])
def test_bad_tile_file_names_file_and_key(tmp_path: Path, case: str, mutate, key: str, text: str) -> None:
    a = _tile()
    mutate(a)
    save_npz(tmp_path / "k.npz", a)
    with pytest.raises(InvalidDataFile) as err:
        load_tile_npz(tmp_path / "k.npz")
    assert "k.npz" in str(err.value) and f"'{key}'" in str(err.value) and text in str(err.value), str(err.value)


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip file at all")
    with pytest.raises(InvalidDataFile, match=r"junk\.npz: not a readable \.npz"):
        load_layout_npz(tmp_path / "junk.npz")
    with pytest.raises(InvalidDataFile, match=r"nope\.npz: no such file"):
        load_tile_npz(tmp_path / "nope.npz")


def test_synthetic_round_trip_through_dataset(tmp_path: Path) -> None:
    written = synth_layout(tmp_path, {"train": 3, "valid": 1, "test": 1}, nodes=(200, 400), configs=6, seed=1)
    ds = TpuGraphsDataset(tmp_path, "train")
    assert ds.task == "layout" and len(ds) == 3 and ds.names == [p.stem for p in written["train"]]
    for path, r in zip(written["train"], ds, strict=True):
        with np.load(path) as f:
            raw = {k: f[k] for k in f.files}
        assert set(LAYOUT_KEYS) <= set(raw) <= {*LAYOUT_KEYS, "node_splits"}
        n, nc = raw["node_feat"].shape[0], raw["node_config_ids"].shape[0]
        assert (
            r.x.shape == (n, 140) and r.opcode.shape == (n,) and r.edge_index.shape == (2, raw["edge_index"].shape[0])
        )
        assert r.node_config_feat.shape == (6, nc, 18) and r.runtime.shape == (6,)
        np.testing.assert_array_equal(r.edge_index, raw["edge_index"][:, ::-1].T)
        np.testing.assert_array_equal(r.runtime, raw["config_runtime"])
        assert (r.edge_index[0] < r.edge_index[1]).all()  # ids are a topological order
    assert isinstance(open_dataset(tmp_path, "valid"), TpuGraphsDataset)


def test_tile_dataset_detects_task(tmp_path: Path) -> None:
    synth_tile(tmp_path, {"train": 2}, nodes=(5, 30), configs=(4, 9), seed=0)
    ds = TpuGraphsDataset(tmp_path, "train")
    r = ds.record(1)
    assert ds.task == "tile" and r.graph_config_feat.shape == (r.num_configs, 24) and (r.runtime > 0).all()
    with pytest.raises(InvalidDataFile, match="missing key 'node_config_ids'"):
        TpuGraphsDataset(tmp_path, "train", task="layout").record(0)
    with pytest.raises(InvalidOption):
        TpuGraphsDataset(tmp_path, "train", task="graph")


def test_dataset_is_lazy_one_file_per_record(tmp_path: Path) -> None:
    synth_layout(tmp_path, {"train": 2}, nodes=50, configs=3, seed=0)
    ds = TpuGraphsDataset(tmp_path, "train")
    ds.paths[1].write_bytes(b"corrupted after listing")
    assert ds.record(0).num_nodes == 50  # the broken file is not touched
    with pytest.raises(InvalidDataFile, match="synthetic_layout_train_0001.npz"):
        ds.record(1)


def test_dataset_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidDataFile, match="no such folder"):
        TpuGraphsDataset(tmp_path, "train")
    (tmp_path / "train").mkdir()
    with pytest.raises(InvalidDataFile, match=r"no \.npz files"):
        TpuGraphsDataset(tmp_path, "train")
    with pytest.raises(InvalidDataFile, match="neither TpuGraphs"):
        open_dataset(tmp_path, "train")


def test_open_dataset_dispatches_to_malnet(tmp_path: Path) -> None:
    synth_malnet(tmp_path, graphs_per_class=3, nodes=(20, 30), seed=0)
    assert isinstance(open_dataset(tmp_path, "train"), MalNetDataset)


def test_compgraph_critical_path_equals_synthetic_runtime() -> None:
    a = synth_layout_graph(300, 5, np.random.default_rng(4))
    from mlsysopt.costmodel.data.tpugraphs import layout_record

    r = layout_record(a, "g")
    dur = layout_durations(a)
    for c in range(5):
        g = to_compgraph(r, dur[c], SYNTH_OPS)
        assert longest_path(g, dur[c]) == pytest.approx(layout_runtime(a)[c], rel=1e-12)
    g = layout_to_compgraph(r)
    assert (g.num_nodes, g.num_edges) == (300, r.num_edges) and g.meta["task"] == "layout"
    assert "tpu_op_10" in g.vocab and to_compgraph(r, op_names=SYNTH_OPS).ops[0] == "parameter"
    with pytest.raises(InvalidOption):
        tile_to_compgraph(r)


def test_loading_refuses_a_cycle_a_self_loop_and_a_huge_feature_naming_the_file(tmp_path: Path) -> None:
    a = _layout()
    a["edge_index"] = np.array([[1, 0], [0, 1]])
    save_npz(tmp_path / "c.npz", a)
    with pytest.raises(InvalidDataFile, match=r"c.npz: key 'edge_index' has a cycle through node"):
        load_layout_npz(tmp_path / "c.npz")
    a = _layout()
    a["edge_index"] = np.array([[1, 0], [2, 2]])
    save_npz(tmp_path / "s.npz", a)
    with pytest.raises(InvalidDataFile, match=r"s.npz: key 'edge_index' row 1 \(\[2, 2\]\) is a self-loop"):
        load_layout_npz(tmp_path / "s.npz")
    a = _layout()
    a["node_feat"] = a["node_feat"].copy()
    a["node_feat"][1, 3] = 3e38
    save_npz(tmp_path / "f.npz", a)
    with pytest.raises(InvalidDataFile, match=r"f.npz: key 'node_feat' row 1 column 3 is 3e\+38"):
        load_layout_npz(tmp_path / "f.npz")


def test_save_npz_is_atomic_and_overwrites(tmp_path: Path) -> None:
    save_npz(tmp_path / "a.npz", {"x": np.ones(3)})
    save_npz(tmp_path / "a.npz", {"x": np.zeros(2)})
    with np.load(tmp_path / "a.npz") as f:
        assert f["x"].tolist() == [0.0, 0.0]
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]
