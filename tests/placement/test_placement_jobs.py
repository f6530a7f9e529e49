"""The placement commands as library calls: a Python user gets the command line's checks, bounds and outputs.

Every refused value below is refused with the same message `mlsysopt placement ...` prints for it
(tests/test_cli_placement.py and tests/test_cli_bad_inputs.py check the command line), before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_inprocess
from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.generate import layered_dag
from mlsysopt.placement.jobs import (
    AdaptRequest,
    CompareRequest,
    PlaceRequest,
    compare_methods,
    place,
    prepare_adapt,
    prepare_place,
)
from mlsysopt.placement.problem_spec import ProblemSpec

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("g") / "g.npz"
    layered_dag(14, num_types=2, seed=1).save(path)
    return str(path)


BAD_PROBLEMS = [
    ({"devices": 10**12}, "--devices"),
    ({"timeout": float("nan")}, "--timeout nan"),
    ({"timeout": -1.0}, "--timeout -1.0"),
    ({"num_tasks": 10**12}, "--num-tasks"),
    ({"input_shape": "1,a"}, "--input-shape '1,a'"),
    ({"input_shape": "0,3"}, "must list positive sizes"),
    ({"input_shape": (10**6, 10**6)}, "GiB of float32"),
]


@pytest.mark.parametrize(("kwargs", "needle"), BAD_PROBLEMS)
def test_a_problem_is_bounded_when_it_is_built(kwargs: dict, needle: str) -> None:
    with pytest.raises(MlsysoptError, match=None) as err:
        ProblemSpec("montage", **kwargs)
    assert needle in str(err.value)


def _cli_error(*args: str, cwd: Path) -> str:
    ran = run_inprocess("placement", *args, cwd=cwd)
    assert ran.returncode == 2, ran.stderr
    return ran.stderr.strip().splitlines()[-1].removeprefix("error: ")


def test_the_library_and_the_command_line_refuse_with_the_same_words(graph: str, tmp_path: Path) -> None:
    cases = [
        (lambda: PlaceRequest(ProblemSpec(graph, devices=3), tmp_path / "a", method="nope"),
         ["place", graph, "--devices", "3", "--method", "nope", "--out", "a"]),
        (lambda: PlaceRequest(ProblemSpec(graph, devices=3), tmp_path / "a", init="best"),
         ["place", graph, "--devices", "3", "--init", "best", "--out", "a"]),
        (lambda: PlaceRequest(ProblemSpec(graph, devices=3), tmp_path / "a", policy="missing.pt"),
         ["place", graph, "--devices", "3", "--policy", "missing.pt", "--out", "a"]),
        (lambda: CompareRequest(ProblemSpec(graph, devices=3), tmp_path / "a", ("heft", "nope")),
         ["compare", graph, "--devices", "3", "--methods", "heft,nope", "--out", "a"]),
        (lambda: CompareRequest(ProblemSpec(graph, devices=3), tmp_path / "a", workers=10**9),
         ["compare", graph, "--devices", "3", "--workers", str(10**9), "--out", "a"]),
        (lambda: CompareRequest(ProblemSpec(graph, devices=3), tmp_path / "a", backend="mpi"),
         ["compare", graph, "--devices", "3", "--backend", "mpi", "--out", "a"]),
        (lambda: AdaptRequest(ProblemSpec(graph, devices=3), tmp_path / "a"),
         ["adapt", graph, "--devices", "3", "--out", "a"]),
        (lambda: ProblemSpec(graph, devices=10**12), ["place", graph, "--devices", str(10**12), "--out", "a"]),
    ]  # fmt: skip
    for build, argv in cases:
        with pytest.raises(MlsysoptError) as err:
            build()
        assert str(err.value) == _cli_error(*argv, cwd=tmp_path), argv
    assert not (tmp_path / "a").exists()


def test_a_busy_or_bad_run_folder_is_refused_before_anything_is_loaded(graph: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(MlsysoptError, match="exists and is not a folder"):
        prepare_place(PlaceRequest(ProblemSpec(graph, devices=3), tmp_path / "file", method="heft"))
    job = prepare_adapt(AdaptRequest(ProblemSpec(graph, devices=3), tmp_path / "adapt", remove=("dev0",)))
    assert job.loaded is None and not (tmp_path / "adapt").exists()  # nothing loaded, nothing written yet


def test_a_cluster_that_cannot_run_the_graph_is_refused_when_the_job_loads(tmp_path: Path) -> None:
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({"speed": [1.0], "supports": [[1, 0]], "bandwidth": [[0.0]], "delay": [[0.0]]}))
    graph = tmp_path / "g.npz"
    layered_dag(10, num_types=2, seed=0).save(graph)
    job = prepare_place(PlaceRequest(ProblemSpec(str(graph), cluster=str(cluster)), tmp_path / "p", method="heft"))
    with pytest.raises(MlsysoptError, match="needs hardware type 1"):
        job.load()
    assert not (tmp_path / "p").exists()


def test_place_and_compare_write_what_the_command_writes(graph: str, tmp_path: Path) -> None:
    spec = ProblemSpec(graph, devices=3, seed=2)
    placed = place(PlaceRequest(spec, tmp_path / "p", method="local_search", budget=30))
    assert placed.files == ["result.json", "placement.json", "schedule.json", "cluster.json", "gantt.png", "search.png"]
    assert all((tmp_path / "p" / f).is_file() for f in placed.files)
    saved = json.loads((tmp_path / "p" / "result.json").read_text())
    assert saved["makespan"] == placed.result["makespan"] >= saved["cp_min"] > 0 and saved["evaluations"] <= 30
    settings = json.loads((tmp_path / "p" / "settings.json").read_text())
    assert settings["command"] == "placement place" and settings["graph_source"] == graph
    assert settings["method"] == "local_search" and settings["devices"] == 3 and settings["budget"] == 30
    # the command line with the same options gives the same placement
    ran = run_inprocess("placement", "place", graph, "--devices", "3", "--seed", "2", "--method", "local_search",
                        "--budget", "30", "--out", "cli", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads((tmp_path / "cli" / "placement.json").read_text()) == placed.result["placement"]
    compared = compare_methods(CompareRequest(spec, tmp_path / "c", ("heft", "random"), budget=20, seeds=2))
    assert sorted(compared.result["results"]) == ["heft", "random"] and compared.result["seeds"] == [2, 3]
