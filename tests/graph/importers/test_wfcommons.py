"""Tests for the WfCommons importer: WfFormat 1.5 and 1.4 files, and WfChef recipes."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlsysopt.errors import ImportFailed, InvalidGraph, MlsysoptError, MlsysoptWarning, UnsupportedFormat
from mlsysopt.graph.importers import load_graph
from mlsysopt.graph.importers.wfcommons import RECIPES, from_recipe, from_wfformat
from mlsysopt.graph.ir import CompGraph

V15: dict[str, Any] = {
    "name": "hand-made",
    "schemaVersion": "1.5",
    "workflow": {
        "specification": {
            "tasks": [
                {"name": "split", "id": "a", "parents": [], "children": ["b", "c"],
                 "inputFiles": ["in0"], "outputFiles": ["f1", "f2"]},
                {"name": "work_00000001", "id": "b", "parents": ["a"], "inputFiles": ["f1"], "outputFiles": ["o1"]},
                {"name": "work_00000002", "id": "c", "parents": ["a"],
                 "inputFiles": ["f2", "f1"], "outputFiles": ["o2"]},
                {"name": "merge", "id": "d", "parents": ["b", "c"], "inputFiles": ["o1", "o2"], "outputFiles": []},
                {"name": "x", "id": "e", "parents": ["a"], "inputFiles": [], "outputFiles": []},
            ],
            "files": [
                {"id": "in0", "sizeInBytes": 10},
                {"id": "f1", "sizeInBytes": 100},
                {"id": "f2", "sizeInBytes": 50},
                {"id": "o1", "sizeInBytes": 7},
                {"id": "o2", "sizeInBytes": 3},
            ],
        },
        "execution": {
            "makespanInSeconds": 9.0,
            "tasks": [
                {"id": "a", "runtimeInSeconds": 1.5},
                {"id": "b", "runtimeInSeconds": 2.0},
                {"id": "c", "runtimeInSeconds": 3.0},
                {"id": "d", "runtimeInSeconds": 0.5},
                {"id": "e", "runtimeInSeconds": 1.0, "category": "audit"},
            ],
        },
    },
}  # fmt: skip

V14: dict[str, Any] = {
    "name": "old-style",
    "schemaVersion": "1.4",
    "workflow": {
        "makespan": 10,
        "tasks": [
            {"name": "mProject_ID0000001", "id": "ID0000001", "category": "mProject", "type": "compute",
             "parents": [], "children": ["mAdd_ID0000002"], "runtime": 4.25,
             "files": [{"link": "input", "name": "raw.fits", "size": 1000},
                       {"link": "output", "name": "p.fits", "size": 400},
                       {"link": "output", "name": "p.hdr", "size": 20}]},
            {"name": "mAdd_ID0000002", "type": "compute", "parents": ["mProject_ID0000001"],
             "runtimeInSeconds": 1.75,
             "files": [{"link": "input", "name": "p.fits", "size": 400},
                       {"link": "output", "name": "mosaic.fits", "size": 900}]},
        ],
    },
}  # fmt: skip


def _write(tmp_path: Path, data: Any, name: str = "wf.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _edges(g: CompGraph) -> dict[tuple[str, str], float]:
    return {
        (g.names[u], g.names[v]): b for (u, v), b in zip(g.edge_index.T.tolist(), g.edge_bytes.tolist(), strict=True)
    }


# ---------------------------------------------------------------------- WfFormat files
def test_v15_exact_values(tmp_path: Path) -> None:
    g = from_wfformat(_write(tmp_path, V15))
    assert g.names == ["a", "b", "c", "d", "e"]
    assert g.ops == ["wf:split", "wf:work", "wf:work", "wf:merge", "wf:audit"]
    assert g.compute.tolist() == [1.5, 2.0, 3.0, 0.5, 1.0]
    assert g.feature("flops").tolist() == [0.0] * 5
    assert g.feature("bytes_in").tolist() == [10.0, 100.0, 150.0, 10.0, 0.0]
    assert g.feature("bytes_out").tolist() == [150.0, 7.0, 3.0, 0.0, 0.0]
    assert g.hw_type.tolist() == [0] * 5
    # a->b and a->c are listed both as parents and children: one edge each
    assert _edges(g) == {("a", "b"): 100.0, ("a", "c"): 150.0, ("b", "d"): 7.0, ("c", "d"): 3.0, ("a", "e"): 0.0}
    assert g.meta == {"name": "hand-made", "source": "wfcommons", "schema_version": "1.5"}
    assert load_graph(tmp_path / "wf.json").compute.tolist() == g.compute.tolist()


def test_v15_without_execution_has_zero_compute_and_warns(tmp_path: Path) -> None:
    data = copy.deepcopy(V15)
    del data["workflow"]["execution"]
    with pytest.warns(MlsysoptWarning, match=r"wf\.json: 5 of 5 tasks \('a', 'b', 'c' and 2 more\) have no execution"):
        g = from_wfformat(_write(tmp_path, data))
    assert g.compute.tolist() == [0.0] * 5 and g.num_edges == 5
    assert g.meta["tasks_without_runtime"] == 5


def test_v14_exact_values(tmp_path: Path) -> None:
    g = from_wfformat(_write(tmp_path, V14))
    assert g.names == ["mProject_ID0000001", "mAdd_ID0000002"]
    assert g.ops == ["wf:mProject", "wf:mAdd"]
    assert g.compute.tolist() == [4.25, 1.75]
    assert _edges(g) == {("mProject_ID0000001", "mAdd_ID0000002"): 400.0}
    assert g.feature("bytes_in").tolist() == [1000.0, 400.0]
    assert g.feature("bytes_out").tolist() == [420.0, 900.0]


def _broken(mutate: Any) -> dict[str, Any]:
    data = copy.deepcopy(V15)
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["workflow"]["specification"]["tasks"][3].pop("id"),
         "workflow.specification.tasks[3] is missing 'id'"),
        # (a missing runtimeInSeconds is compute 0 and a warning, as in 1.4: test_wfformat_versions.py)
        (lambda d: d["workflow"]["specification"]["files"][2].pop("sizeInBytes"),
         "workflow.specification.files[2] is missing 'sizeInBytes'"),
        (lambda d: d["workflow"]["specification"].pop("tasks"), "workflow.specification is missing 'tasks'"),
        (lambda d: d["workflow"]["execution"]["tasks"][0].update(runtimeInSeconds=-1),
         "workflow.execution.tasks[0].runtimeInSeconds must be a finite number >= 0"),
        (lambda d: d["workflow"]["specification"]["tasks"][1].update(parents="a"),
         "workflow.specification.tasks[1].parents must be a list"),
        (lambda d: d["workflow"]["execution"]["tasks"][4].update(id="zz"),
         "workflow.execution.tasks[4] has id 'zz', which no specification task has"),
        (lambda d: d["workflow"]["specification"]["tasks"][2].update(id="a"), "repeats task id 'a'"),
        (lambda d: d["workflow"]["specification"]["tasks"][2]["parents"].append("ghost"),
         "task 'c' lists parent 'ghost', which is not a task"),
        (lambda d: d["workflow"]["specification"]["tasks"][3].update(children=["nobody"]),
         "task 'd' lists child 'nobody'"),
        (lambda d: d["workflow"]["specification"].update(tasks=[]), "the workflow has no tasks"),
    ],
)  # fmt: skip
def test_v15_errors_name_file_and_field(tmp_path: Path, mutate: Any, expected: str) -> None:
    path = _write(tmp_path, _broken(mutate), "m.json")
    with pytest.raises(InvalidGraph) as err:
        from_wfformat(path)
    assert str(err.value).startswith(f"{path}: ")
    assert expected in str(err.value)


def test_v14_missing_runtime_warns_and_bad_link(tmp_path: Path) -> None:
    # runtimeInSeconds is optional in WfFormat 1.4 (and runtime before it): compute 0, but never silently
    data = copy.deepcopy(V14)
    del data["workflow"]["tasks"][1]["runtimeInSeconds"]
    with pytest.warns(MlsysoptWarning, match=r"1 of 2 tasks \('mAdd_ID0000002'\) have no runtime"):
        g = from_wfformat(_write(tmp_path, data))
    assert g.compute.tolist() == [4.25, 0.0] and g.meta["tasks_without_runtime"] == 1
    data = copy.deepcopy(V14)
    data["workflow"]["tasks"][0]["files"][0]["link"] = "sideways"
    with pytest.raises(InvalidGraph, match=r"workflow\.tasks\[0\]\.files\[0\]\.link"):
        from_wfformat(_write(tmp_path, data))


def test_cycle_is_reported(tmp_path: Path) -> None:
    data = copy.deepcopy(V15)
    data["workflow"]["specification"]["tasks"][0]["parents"] = ["d"]
    with pytest.raises(InvalidGraph, match="cycle") as err:
        from_wfformat(_write(tmp_path, data))
    assert "a ->" in str(err.value) or "-> a" in str(err.value)


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormat, match="not valid JSON"):
        from_wfformat(_write(tmp_path, "{not json", "garbage.json"))
    with pytest.raises(UnsupportedFormat, match="not a WfFormat instance"):
        from_wfformat(_write(tmp_path, [1, 2], "list.json"))
    with pytest.raises(UnsupportedFormat, match="neither 'specification'"):
        from_wfformat(_write(tmp_path, {"workflow": {"foo": 1}}, "other.json"))
    with pytest.raises(InvalidGraph, match="no such file"):
        from_wfformat(tmp_path / "missing.json")
    with pytest.raises(InvalidGraph, match="not a file"):
        from_wfformat(tmp_path)


def test_deeply_nested_or_non_standard_json_is_a_clear_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"workflow": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(UnsupportedFormat, match="deep.json: JSON nested deeper than"):
        from_wfformat(deep)
    nan = tmp_path / "nan.json"
    nan.write_text('{"name": "w", "workflow": {"tasks": [{"runtime": NaN}]}}')
    with pytest.raises(UnsupportedFormat, match="nan.json: not valid JSON"):
        from_wfformat(nan)


# ---------------------------------------------------------------------- recipes
def test_recipe_registry() -> None:
    expected = {"blast", "bwa", "cycles", "epigenomics", "genome", "montage", "seismology", "soykb", "srasearch"}
    assert expected <= set(RECIPES)
    assert RECIPES["montage"].__name__ == "MontageRecipe"
    with pytest.raises(MlsysoptError, match="montage"):
        from_recipe("no-such-workflow")


def test_montage_recipe_matches_wfcommons(tmp_path: Path) -> None:
    from wfcommons import WorkflowGenerator

    g = from_recipe("Montage", num_tasks=60, seed=0)
    random.seed(0)
    np.random.seed(0)
    wf = WorkflowGenerator(RECIPES["montage"].from_num_tasks(60)).build_workflow()
    assert g.num_nodes == len(wf.tasks) <= 60
    assert g.compute.sum() == pytest.approx(sum(t.runtime for t in wf.tasks.values()))
    assert g.num_edges == wf.number_of_edges() > 0
    assert (g.edge_bytes > 0).mean() > 0.9
    assert "wf:mProject" in g.ops and all(op.startswith("wf:") for op in g.ops)
    assert len(set(g.names)) == g.num_nodes
    assert g.meta["source"] == "wfcommons" and g.meta["recipe"] == "montage"
    # the file written by wfcommons reads back to the same graph
    wf.write_json(tmp_path / "montage.json")
    h = from_wfformat(tmp_path / "montage.json")
    assert h.names == g.names
    np.testing.assert_array_equal(h.compute, g.compute)
    np.testing.assert_array_equal(h.edge_index, g.edge_index)
    np.testing.assert_array_equal(h.edge_bytes, g.edge_bytes)


def test_recipe_seed_determinism_and_global_state() -> None:
    random.seed(123)
    np.random.seed(123)
    expect_py, expect_np = random.random(), np.random.random()
    random.seed(123)
    np.random.seed(123)
    a = from_recipe("epigenomics", 80, seed=5)
    assert (random.random(), np.random.random()) == (expect_py, expect_np)
    b = from_recipe("epigenomics", 80, seed=5)
    c = from_recipe("epigenomics", 80, seed=6)
    assert a.names == b.names
    np.testing.assert_array_equal(a.compute, b.compute)
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.edge_bytes, b.edge_bytes)
    assert not np.array_equal(a.compute, c.compute) or a.num_edges != c.num_edges


def test_recipe_below_minimum_is_translated() -> None:
    with pytest.raises(ImportFailed, match=r"num_tasks >= 60"):
        from_recipe("montage", num_tasks=50)
    with pytest.raises(MlsysoptError, match="num_tasks"):
        from_recipe("montage", num_tasks=0)
