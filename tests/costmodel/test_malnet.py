"""Tests for MalNet edgelists, split files, degree-profile features and the lazy MalNet dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel.data import (
    MALNET_CLASSES,
    MalNetDataset,
    degree_profile,
    load_malnet_graph,
    read_edgelist,
    synth_malnet,
    write_edgelist,
)
from mlsysopt.errors import InvalidDataFile

HEADER = "# Directed graph\n# Description\n# Nodes: 5 Edges: 4\n# more\n# FromNodeId\tToNodeId\n"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _tree(root: Path, split_lines: list[str], graphs: list[str]) -> None:
    for g in graphs:
        _write(root / f"{g}.edgelist", HEADER + "0\t1\n1 2\n2\t3\n0\t4\n")
    _write(root / "split_info" / "train.txt", "".join(f"{s}\n" for s in split_lines))


def test_read_edgelist_skips_headers_and_mixed_whitespace(tmp_path: Path) -> None:
    ei, n = read_edgelist(_write(tmp_path / "g.edgelist", HEADER + "0\t1\n3 0\n\n2   7\n"))
    assert ei.tolist() == [[0, 3, 2], [1, 0, 7]] and ei.dtype == np.int64 and n == 8


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("0\t1\n2\tx\n", "malformed edge line"),
        ("0\t1\n2\n", "malformed edge line"),
        ("0 1 5\n1 2 5\n", "3 columns"),
        ("", "the graph is empty"),
        ("0\t1\n-2\t1\n", "negative node id"),
    ],
    ids=["not a number", "one column", "three columns", "no edges", "negative id"],
)
def test_bad_edgelist_names_the_file(tmp_path: Path, body: str, text: str) -> None:
    path = _write(tmp_path / "benign" / "fam" / "ABC.edgelist", HEADER + body)
    with pytest.raises(InvalidDataFile) as err:
        read_edgelist(path)
    assert "benign/fam/ABC.edgelist" in str(err.value) and text in str(err.value), str(err.value)


def test_missing_edgelist(tmp_path: Path) -> None:
    with pytest.raises(InvalidDataFile, match="no such file"):
        read_edgelist(tmp_path / "none.edgelist")


def test_degree_profile_matches_pyg_local_degree_profile() -> None:
    torch = pytest.importorskip("torch")
    from torch_geometric.data import Data
    from torch_geometric.transforms import LocalDegreeProfile

    rng = np.random.default_rng(0)
    n = 60
    e = rng.integers(0, n, (2, 240))
    ours = degree_profile(e, n)
    ref = LocalDegreeProfile()(Data(edge_index=torch.as_tensor(e), num_nodes=n)).x.numpy()
    assert ours.shape == (n, 5) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, atol=5e-3)


def test_degree_profile_by_hand() -> None:
    # 0 -> 1, 0 -> 2, 1 -> 2, 3 isolated; out-degrees 2, 1, 0, 0
    x = degree_profile(np.array([[0, 0, 1], [1, 2, 2]]), 4)
    np.testing.assert_allclose(x[0], [2, 0, 1, 0.5, 0.5])
    np.testing.assert_allclose(x[1], [1, 0, 0, 0, 0])
    np.testing.assert_allclose(x[2:], 0)


def test_write_edgelist_round_trip_is_atomic(tmp_path: Path) -> None:
    e = np.array([[0, 5, 2], [1, 1, 9]])
    path = write_edgelist(tmp_path / "a" / "g.edgelist", e, ["line one", "line two"])
    assert path.read_text().startswith("# line one\n# line two\n0\t1\n")
    ei, n = read_edgelist(path)
    assert ei.tolist() == e.tolist() and n == 10
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["g.edgelist"]


def test_dataset_over_synthetic_malnet(tmp_path: Path) -> None:
    splits = synth_malnet(tmp_path, graphs_per_class=4, nodes=(40, 80), seed=3)
    ds = MalNetDataset(tmp_path, "train")
    assert ds.classes == sorted(MALNET_CLASSES) and ds.num_classes == 5 and ds.task == "malnet"
    assert ds.names == splits["train"] and len(ds) == 5 * 2
    for i, r in enumerate(ds):
        assert r.task == "malnet" and r.label == ds.classes.index(ds.names[i].split("/")[0]) == ds.labels[i]
        assert r.x.shape == (r.num_nodes, 5) and r.edge_index.shape[0] == 2 and r.runtime is None
    valid = MalNetDataset(tmp_path, "valid")  # TpuGraphs split name -> val.txt
    assert valid.split_file.name == "val.txt" and len(valid) == 5


def test_split_file_naming_a_missing_graph(tmp_path: Path) -> None:
    _tree(tmp_path, ["benign/f/AAA", "benign/f/BBB", "benign/f/CCC"], ["benign/f/AAA", "benign/f/CCC"])
    with pytest.raises(InvalidDataFile) as err:
        MalNetDataset(tmp_path, "train")
    msg = str(err.value)
    assert "split_info/train.txt: line 2" in msg and "benign/f/BBB" in msg and "missing" in msg, msg


def test_split_file_naming_an_unknown_class(tmp_path: Path) -> None:
    _tree(tmp_path, ["benign/f/AAA", "spyware/f/BBB"], ["benign/f/AAA"])
    with pytest.raises(InvalidDataFile, match="line 2: 'spyware/f/BBB' names class 'spyware'"):
        MalNetDataset(tmp_path, "train")


def test_split_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidDataFile, match="no such folder"):
        MalNetDataset(tmp_path / "none", "train")
    _tree(tmp_path, [], ["benign/f/AAA"])
    with pytest.raises(InvalidDataFile, match="lists no graph"):
        MalNetDataset(tmp_path, "train")
    with pytest.raises(InvalidDataFile, match=r"split_info/test\.txt: no such split file"):
        MalNetDataset(tmp_path, "test")


def test_split_dir_explicit_and_published_type_folder(tmp_path: Path) -> None:
    _tree(tmp_path / "graphs", [], ["adware/f/AAA", "benign/f/BBB"])
    lines = "adware/f/AAA.edgelist\n\nbenign/f/BBB\n"
    _write(tmp_path / "splits" / "test.txt", lines)
    ds = MalNetDataset(tmp_path / "graphs", "test", split_dir=tmp_path / "splits")
    assert ds.names == ["adware/f/AAA", "benign/f/BBB"] and ds.labels == [0, 1]
    _write(tmp_path / "graphs" / "split_info" / "type" / "val.txt", lines)  # as in split_info_tiny/type/
    assert MalNetDataset(tmp_path / "graphs", "val").names == ds.names


def test_dataset_is_lazy(tmp_path: Path) -> None:
    _tree(tmp_path, ["benign/f/AAA", "benign/f/BBB"], ["benign/f/AAA", "benign/f/BBB"])
    ds = MalNetDataset(tmp_path, "train")
    (tmp_path / "benign" / "f" / "BBB.edgelist").write_text("# header only\n")
    assert ds.record(0).num_nodes == 5
    with pytest.raises(InvalidDataFile, match="BBB.edgelist: no edges"):
        ds.record(1)


def test_load_malnet_graph_record(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.edgelist", HEADER + "0\t1\n1\t2\n")
    r = load_malnet_graph(path, 3)
    assert (r.name, r.label, r.num_nodes, r.num_edges, r.num_configs, r.is_ranking) == ("g", 3, 3, 2, 1, False)


@pytest.mark.parametrize("line", ["benign/../../outside_graph", "benign/../adware/f/AAA", "benign//AAA", "benign/./f"])
def test_a_split_line_cannot_leave_its_class_folder(tmp_path: Path, line: str) -> None:
    root = tmp_path / "malnet"
    _tree(root, ["benign/f/AAA", line], ["benign/f/AAA", "adware/f/AAA"])
    _write(tmp_path / "outside_graph.edgelist", HEADER + "0 1\n")  # a real file outside the data root
    with pytest.raises(InvalidDataFile, match=r"line 2: .* leaves its class folder"):
        MalNetDataset(root, "train")


def test_a_binary_split_file_is_refused_naming_it(tmp_path: Path) -> None:
    _tree(tmp_path, ["benign/f/AAA"], ["benign/f/AAA"])
    (tmp_path / "split_info" / "train.txt").write_bytes(bytes(range(256)))
    with pytest.raises(InvalidDataFile, match=r"train\.txt: not a text split file"):
        MalNetDataset(tmp_path, "train")


def test_a_huge_node_id_is_refused_before_allocating(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.edgelist", "0 1\n1 100000000000\n")
    with pytest.raises(InvalidDataFile, match=r"g\.edgelist: edge 1 .* node id 100,000,000,000: at most"):
        read_edgelist(path)
