"""PlacementProblem: validated once, the views every placer reads, and load_problem's cluster sources."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import ConstraintViolation, InvalidCluster, InvalidPlacement, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import chain, layered_dag, random_cluster
from mlsysopt.graph.placement import check_placement, random_placement
from mlsysopt.graph.problem import PlacementProblem, load_problem
from mlsysopt.graph.simulator import Simulator, cp_min, simulate


def problem(seed: int = 0) -> PlacementProblem:
    return PlacementProblem(layered_dag(20, num_types=2, seed=seed), random_cluster(5, num_types=2, seed=seed))


def test_views_match_the_graph_and_cluster() -> None:
    p = problem()
    g, c = p.graph, p.cluster
    assert np.array_equal(p.mask, c.feasible(g)) and not p.mask.flags.writeable
    np.testing.assert_array_equal(p.exec_times, g.compute[:, None] / c.speed[None, :])
    assert p.exec_times.shape == (p.num_tasks, p.num_devices) == (20, 5)
    indptr, par, eid = g.parents_csr
    for i, (parents, nbytes) in enumerate(p.parent_edges):
        assert parents.tolist() == par[indptr[i] : indptr[i + 1]].tolist()
        assert nbytes.tolist() == g.edge_bytes[eid[indptr[i] : indptr[i + 1]]].tolist()
    assert p.children_csr[0] is g.children_csr[0]
    assert p.cp_min == cp_min(g, c)


def test_simulator_and_checks_are_the_ones_of_the_graph() -> None:
    p = problem(1)
    placement = p.random_placement(np.random.default_rng(3))
    # the same draw as the graph-level function, which checks feasibility itself
    assert np.array_equal(placement, random_placement(p.graph, p.cluster, np.random.default_rng(3)))
    assert p.makespan(placement) == Simulator(p.graph, p.cluster).makespan(placement)
    assert p.simulate(placement).makespan == simulate(p.graph, p.cluster, placement).makespan
    assert np.array_equal(p.check(placement.tolist()), placement)
    bad = placement.copy()
    t = int(np.flatnonzero(~p.mask.all(axis=1))[0])
    bad[t] = int(np.flatnonzero(~p.mask[t])[0])
    with pytest.raises(ConstraintViolation, match=f"task '{p.graph.names[t]}'"):
        p.check(bad)
    with pytest.raises(InvalidPlacement):
        p.check(placement[:-1])


def test_arrival_times_by_hand() -> None:
    # a -> b with 2 bytes; dev0 -> dev1: delay 0.5 + 2 / 4 = 1.0; on one device the input is there at a's finish
    g = chain(2, nbytes=2.0)
    c = DeviceCluster([1.0, 1.0], np.ones((2, 1), bool), [[1.0, 4.0], [4.0, 1.0]], [[0.0, 0.5], [0.5, 0.0]])
    p = PlacementProblem(g, c)
    placement, finish = np.array([0, -1]), np.array([3.0, 0.0])
    np.testing.assert_allclose(p.arrival_times(1, placement, finish), [3.0, 4.0])
    np.testing.assert_allclose(p.arrival_times(0, placement, finish), [0.0, 0.0])  # a source


def test_a_task_no_device_runs_is_refused_once_at_construction() -> None:
    g = layered_dag(12, num_types=2, seed=0)
    supports = np.zeros((3, 2), bool)
    supports[:, 0] = True
    c = DeviceCluster([1.0, 2.0, 1.0], supports, np.ones((3, 3)), np.zeros((3, 3)))
    with pytest.raises(ConstraintViolation, match="hardware type 1"):
        PlacementProblem(g, c)


def test_of_accepts_a_problem_or_a_pair() -> None:
    p = problem()
    assert PlacementProblem.of(p) is p
    assert PlacementProblem.of(p.graph, p) is p
    q = PlacementProblem.of(p.graph, p.cluster)
    assert q is not p and np.array_equal(q.mask, p.mask)
    with pytest.raises(MlsysoptError, match="another graph"):
        PlacementProblem.of(chain(3), p)
    with pytest.raises(MlsysoptError, match="not both"):
        PlacementProblem.of(p, random_cluster(2))
    with pytest.raises(MlsysoptError, match="needs a graph and a cluster"):
        PlacementProblem.of(p.graph)


def test_describe_is_json_ready() -> None:
    p = problem(2)
    sched = p.simulate(p.random_placement(np.random.default_rng(0)))
    d = p.describe(sched)
    json.dumps(d, allow_nan=False)
    assert d["makespan"] == sched.makespan and d["slr"] == pytest.approx(sched.makespan / p.cp_min)
    assert len(d["placement"]) == p.num_tasks and len(d["schedule"]["tasks"]) == p.num_tasks
    check_placement(p.graph, p.cluster, [p.cluster.names.index(d["placement"][n]) for n in p.graph.names])


def test_load_problem_from_a_file_or_random_devices(tmp_path: Path) -> None:
    g = layered_dag(15, num_types=2, seed=4)
    c = random_cluster(4, num_types=2, seed=4)
    c.save(tmp_path / "c.json")
    p, how = load_problem(g, tmp_path / "c.json")
    assert np.array_equal(p.cluster.speed, c.speed) and how == f"from {tmp_path / 'c.json'}"
    p, how = load_problem(g, devices=6, seed=1)
    assert p.num_devices == 6 and "random 6-device cluster" in how and "seed 1" in how
    again, _ = load_problem(g, devices=6, seed=1)
    assert np.array_equal(again.cluster.speed, p.cluster.speed)
    assert load_problem(g, c)[1] == "given"
    with pytest.raises(MlsysoptError, match="not both"):
        load_problem(g, c, devices=3)
    with pytest.raises(MlsysoptError, match="no devices"):
        load_problem(g)


def test_load_problem_names_the_cluster_source_of_an_infeasible_problem(tmp_path: Path) -> None:
    g = layered_dag(15, num_types=2, seed=4)
    c = random_cluster(3, num_types=2, seed=0)
    (tmp_path / "c.json").write_text(json.dumps({**c.to_dict(), "supports": [[True, False]] * 3}))
    with pytest.raises(ConstraintViolation, match=r"cluster from .*c\.json: task '.*' needs hardware type 1"):
        load_problem(g, tmp_path / "c.json")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[" * 200 + "]" * 200, "nested deeper"),
        ('{"speed": [1.0], "supports": [[true]], "bandwidth": [[null]], "delay": [[NaN]]}', "not valid JSON"),
        ('{"speed": [1.0],', "line 1, column"),
        ("[1, 2]", "object"),
    ],
)
def test_cluster_json_goes_through_the_guarded_reader(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(InvalidCluster, match=needle) as info:
        DeviceCluster.load(tmp_path / "c.json")
    assert "c.json" in str(info.value)
