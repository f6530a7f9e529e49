"""One workflow written in every WfFormat layout (1.2, 1.3, 1.4, 1.5) must import to the same CompGraph.

The files follow the schema READMEs of each WfFormat release and its migration tool
(``tools/wfcommons-migrate-instance.py``): 1.2 -> 1.3 renames ``jobs`` to ``tasks``; 1.3 -> 1.4 renames ``runtime``
to ``runtimeInSeconds``, ``files[].size`` to ``sizeInBytes`` and ``makespan`` to ``makespanInSeconds``;
1.4 -> 1.5 splits ``specification`` and ``execution`` and moves files to one workflow-wide list. The 1.4 file has
the shape of the Pegasus traces of wfcommons/pegasus-instances (type, command, cores, avgCPU, bytes, machine).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlsysopt.errors import InvalidGraph, MlsysoptWarning
from mlsysopt.graph.importers.wfcommons import from_wfformat
from mlsysopt.graph.ir import CompGraph

# (name, id, category, runtime s, parents, [(link, file, bytes)])
TASKS: list[tuple[str, str, str, float, list[str], list[tuple[str, str, int]]]] = [
    ("mProject_ID0000001", "ID0000001", "mProject", 13.25, [],
     [("input", "region.hdr", 304), ("input", "2mass-1.fits", 2_102_400), ("output", "p-1.fits", 4_227_840)]),
    ("mProject_ID0000002", "ID0000002", "mProject", 12.5, [],
     [("input", "region.hdr", 304), ("input", "2mass-2.fits", 2_102_400), ("output", "p-2.fits", 4_210_560)]),
    ("mDiffFit_ID0000003", "ID0000003", "mDiffFit", 1.75, ["mProject_ID0000001", "mProject_ID0000002"],
     [("input", "p-1.fits", 4_227_840), ("input", "p-2.fits", 4_210_560), ("output", "fit-1-2.txt", 269)]),
    ("mConcatFit_ID0000004", "ID0000004", "mConcatFit", 0.5, ["mDiffFit_ID0000003"],
     [("input", "fit-1-2.txt", 269), ("output", "fits.tbl", 1_024)]),
]  # fmt: skip
MACHINE = {"system": "linux", "architecture": "x86_64", "nodeName": "worker-1", "release": "4.18.0"}


def v14() -> dict[str, Any]:
    """The Pegasus layout of WfFormat 1.4."""
    tasks = [
        {
            "name": name,
            "id": tid,
            "category": cat,
            "type": "compute",
            "command": {"program": cat, "arguments": ["-X", f"{tid}.fits"]},
            "parents": parents,
            "files": [{"link": link, "name": f, "sizeInBytes": b} for link, f, b in files],
            "runtimeInSeconds": rt,
            "cores": 1,
            "avgCPU": 97.5,
            "readBytes": sum(b for link, _, b in files if link == "input"),
            "writtenBytes": sum(b for link, _, b in files if link == "output"),
            "memoryInBytes": 52_428_800,
            "machine": "worker-1",
        }
        for name, tid, cat, rt, parents, files in TASKS
    ]
    return {
        "name": "montage-chameleon-2mass-01d-001",
        "description": "Instance generated with WfCommons - https://wfcommons.org",
        "createdAt": "2021-01-28T18:33:12.441716",
        "schemaVersion": "1.4",
        "wms": {"name": "Pegasus", "version": "4.9.3", "url": "https://pegasus.isi.edu"},
        "author": {"name": "tester", "email": "tester@example.org"},
        "workflow": {
            "makespanInSeconds": 28.0,
            "executedAt": "20200413T031424+0000",
            "machines": [{**MACHINE, "memoryInBytes": 16_777_216_000, "cpu": {"count": 4, "speed": 2400}}],
            "tasks": tasks,
        },
    }


def v13() -> dict[str, Any]:
    """1.3: ``runtime``, ``size``, ``makespan``, memory in KB (the 1.3 -> 1.4 migration reversed)."""
    data = v14()
    data["schemaVersion"] = "1.3"
    wf = data["workflow"]
    wf["makespan"] = wf.pop("makespanInSeconds")
    for m in wf["machines"]:
        m["memory"] = m.pop("memoryInBytes") // 1000
    for t in wf["tasks"]:
        t["runtime"] = t.pop("runtimeInSeconds")
        t["memory"] = t.pop("memoryInBytes") // 1000
        t["bytesRead"], t["bytesWritten"] = t.pop("readBytes"), t.pop("writtenBytes")
        for f in t["files"]:
            f["size"] = f.pop("sizeInBytes")
    return data


def v12() -> dict[str, Any]:
    """1.2: the tasks are ``jobs``."""
    data = v13()
    data["schemaVersion"] = "1.2"
    data["workflow"]["jobs"] = data["workflow"].pop("tasks")
    return data


def v15() -> dict[str, Any]:
    """1.5: specification + execution, as the migration tool writes it (ids = names that contain the id)."""
    data = v14()
    data["schemaVersion"] = "1.5"
    data["runtimeSystem"] = data.pop("wms")
    wf = data.pop("workflow")
    files: dict[str, int] = {}
    spec, execution = [], []
    children: dict[str, list[str]] = {t["name"]: [] for t in wf["tasks"]}
    for t in wf["tasks"]:
        for p in t["parents"]:
            children[p].append(t["name"])
    for t in wf["tasks"]:
        for f in t["files"]:
            files.setdefault(f["name"], f["sizeInBytes"])
        spec.append(
            {
                "name": t["name"],
                "id": t["name"],
                "parents": t["parents"],
                "children": children[t["name"]],
                "inputFiles": [f["name"] for f in t["files"] if f["link"] == "input"],
                "outputFiles": [f["name"] for f in t["files"] if f["link"] == "output"],
            }
        )
        execution.append(
            {
                "id": t["name"],
                "runtimeInSeconds": t["runtimeInSeconds"],
                "command": t["command"],
                "coreCount": t["cores"],
                "avgCPU": t["avgCPU"],
                "readBytes": t["readBytes"],
                "writtenBytes": t["writtenBytes"],
                "memoryInBytes": t["memoryInBytes"],
                "machines": [t["machine"]],
            }
        )
    data["workflow"] = {
        "specification": {"tasks": spec, "files": [{"id": k, "sizeInBytes": v} for k, v in files.items()]},
        "execution": {
            "makespanInSeconds": wf["makespanInSeconds"],
            "executedAt": wf["executedAt"],
            "machines": wf["machines"],
            "tasks": execution,
        },
    }
    return data


def _load(tmp_path: Path, data: dict[str, Any], name: str = "wf.json") -> CompGraph:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=1))
    return from_wfformat(path)


def _edges(g: CompGraph) -> dict[tuple[str, str], float]:
    return {
        (g.names[u], g.names[v]): b for (u, v), b in zip(g.edge_index.T.tolist(), g.edge_bytes.tolist(), strict=True)
    }


@pytest.mark.parametrize("layout", [v12, v13, v14, v15], ids=["1.2", "1.3", "1.4", "1.5"])
def test_every_layout_reads_the_same_workflow(tmp_path: Path, layout: Any) -> None:
    g = _load(tmp_path, layout())
    assert g.names == [t[0] for t in TASKS]
    assert g.ops == ["wf:mProject", "wf:mProject", "wf:mDiffFit", "wf:mConcatFit"]
    assert g.compute.tolist() == [13.25, 12.5, 1.75, 0.5]  # hand-copied from TASKS
    assert _edges(g) == {
        ("mProject_ID0000001", "mDiffFit_ID0000003"): 4_227_840.0,
        ("mProject_ID0000002", "mDiffFit_ID0000003"): 4_210_560.0,
        ("mDiffFit_ID0000003", "mConcatFit_ID0000004"): 269.0,
    }
    assert g.feature("bytes_in").tolist() == [2_102_704.0, 2_102_704.0, 8_438_400.0, 269.0]
    assert g.feature("bytes_out").tolist() == [4_227_840.0, 4_210_560.0, 269.0, 1_024.0]
    assert g.meta["schema_version"] == layout()["schemaVersion"]
    assert "tasks_without_runtime" not in g.meta


def test_real_14_layout_was_refused_before(tmp_path: Path) -> None:
    """The bug of issue 13: 1.4 files (sizeInBytes, runtimeInSeconds) imported as 'files[0] is missing size'."""
    g = _load(tmp_path, v14())
    assert g.num_nodes == 4 and float(g.edge_bytes.sum()) == 4_227_840 + 4_210_560 + 269


def test_file_identity_is_path_plus_name(tmp_path: Path) -> None:
    """Two files of one name in different folders are different files (as WfFormat's migration tool keys them)."""
    data = v14()
    tasks = data["workflow"]["tasks"]
    tasks[0]["files"][2]["path"] = "/scratch/a/"
    tasks[2]["files"][0]["path"] = "/scratch/b/"  # same name, other folder: not what task 0 wrote
    g = _load(tmp_path, data)
    assert _edges(g)[("mProject_ID0000001", "mDiffFit_ID0000003")] == 0.0


@pytest.mark.parametrize("layout", [v13, v14], ids=["1.3", "1.4"])
def test_a_task_without_runtime_warns_and_is_recorded(tmp_path: Path, layout: Any) -> None:
    data = layout()
    key = "runtimeInSeconds" if data["schemaVersion"] == "1.4" else "runtime"
    for t in data["workflow"]["tasks"][2:]:
        del t[key]
    with pytest.warns(MlsysoptWarning) as record:
        g = _load(tmp_path, data)
    assert len(record) == 1  # one warning for the file, not one per task
    assert "2 of 4 tasks ('mDiffFit_ID0000003', 'mConcatFit_ID0000004') have no runtime" in str(record[0].message)
    assert g.compute.tolist() == [13.25, 12.5, 0.0, 0.0] and g.meta["tasks_without_runtime"] == 2


def test_a_15_task_without_execution_entry_warns(tmp_path: Path) -> None:
    data = v15()
    del data["workflow"]["execution"]["tasks"][1]
    with pytest.warns(MlsysoptWarning, match=r"1 of 4 tasks \('mProject_ID0000002'\) have no execution entry"):
        g = _load(tmp_path, data)
    assert g.compute.tolist() == [13.25, 0.0, 1.75, 0.5]


def test_a_15_execution_entry_without_runtime_is_handled_like_a_14_task_without_one(tmp_path: Path) -> None:
    """1.4 and 1.5 agree (issue 25): a missing runtimeInSeconds is compute 0 and one warning, never a refusal."""
    data = v15()
    del data["workflow"]["execution"]["tasks"][2]["runtimeInSeconds"]
    with pytest.warns(MlsysoptWarning, match=r"1 of 4 tasks \('mDiffFit_ID0000003'\) have no execution entry"):
        g = _load(tmp_path, data)
    assert g.compute.tolist() == [13.25, 12.5, 0.0, 0.5] and g.meta["tasks_without_runtime"] == 1
    old = v14()
    del old["workflow"]["tasks"][2]["runtimeInSeconds"]
    with pytest.warns(MlsysoptWarning, match="have no runtime"):
        assert _load(tmp_path, old).compute.tolist() == g.compute.tolist()


@pytest.mark.parametrize("version", ["1.7", "2.0", "banana"])
def test_an_unknown_schema_version_is_read_by_its_layout_with_a_warning(tmp_path: Path, version: str) -> None:
    for layout in (v14, v15):
        data = layout()
        data["schemaVersion"] = version
        with pytest.warns(MlsysoptWarning, match=f"unknown WfFormat schemaVersion '{version}'.*read as the"):
            assert _load(tmp_path, data).num_nodes == 4


def test_a_file_without_any_size_names_both_keys(tmp_path: Path) -> None:
    data = v14()
    del data["workflow"]["tasks"][1]["files"][0]["sizeInBytes"]
    with pytest.raises(InvalidGraph, match=r"workflow\.tasks\[1\]\.files\[0\] has neither 'sizeInBytes'.*nor 'size'"):
        _load(tmp_path, data)


def test_the_14_graph_simulates_to_the_recorded_makespan_on_its_one_machine(tmp_path: Path) -> None:
    """All tasks ran on worker-1 with 4 cores: on 4 devices of speed 1 joined by free links the critical path
    mProject(13.25) -> mDiffFit(1.75) -> mConcatFit(0.5) = 15.5 s bounds the schedule (the trace's 28 s includes
    Pegasus overheads the instance does not itemize)."""
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.problem import PlacementProblem

    g = _load(tmp_path, v14())
    d = 4
    cluster = DeviceCluster(np.ones(d), np.ones((d, 1), bool), np.full((d, d), 1e30), np.zeros((d, d)))
    problem = PlacementProblem(g, cluster)
    assert problem.cp_min == pytest.approx(15.5)
    assert problem.makespan(np.array([0, 1, 0, 0])) == pytest.approx(15.5)


def test_a_14_file_with_both_old_and_new_keys_prefers_the_new_ones(tmp_path: Path) -> None:
    """Files half-migrated by hand carry both; WfFormat's own cleanup keeps the 1.4 keys."""
    data = v14()
    t = data["workflow"]["tasks"][0]
    t["runtime"] = 999.0
    t["files"][2]["size"] = 1
    g = _load(tmp_path, copy.deepcopy(data))
    assert g.compute[0] == 13.25 and _edges(g)[("mProject_ID0000001", "mDiffFit_ID0000003")] == 4_227_840.0
