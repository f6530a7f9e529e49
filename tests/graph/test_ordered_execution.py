"""The ``ordered`` execution semantics: exact against an independent SimPy re-simulation, HEFT's own schedule."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.errors import InvalidOption, InvalidPlacement
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Simulator, longest_path
from schedule_helpers import simpy_ordered


def _problem(seed: int, execution: str = "ordered", delay: float | None = None) -> PlacementProblem:
    graph = layered_dag(40, alpha=0.3, p=0.25, num_types=2, seed=seed)
    kw = {} if delay is None else {"delay_avg": delay}
    return PlacementProblem(graph, random_cluster(6, num_types=2, seed=seed + 50, **kw), execution)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_derived_order_is_exact_against_an_independent_simpy_run(seed: int) -> None:
    problem = _problem(seed)
    sim = problem.simulator
    rng = np.random.default_rng(seed)
    for _ in range(5):
        p = problem.random_placement(rng)
        order = sim.order(p)
        ms = problem.makespan(p)
        assert ms == sim.makespan_in_order(p, order) == sim.run(p).makespan
        assert ms == pytest.approx(simpy_ordered(problem, p, order), rel=1e-12)
        assert sim.makespans(np.stack([p, p]))[1] == ms


def test_ordered_is_never_below_its_fifo_order_and_fifo_is_a_schedule_too() -> None:
    problem = _problem(3)
    fifo = Simulator(problem.graph, problem.cluster)
    p = problem.random_placement(np.random.default_rng(0))
    sched = fifo.run(p)
    # a FIFO run is as-soon-as-possible for the per-device order it realized: replayed ordered, it is the same
    realized = np.lexsort((np.arange(problem.num_tasks), sched.finish, sched.start))
    assert fifo.makespan(p, order=realized) == pytest.approx(sched.makespan, rel=1e-12)
    assert simpy_ordered(problem, p, realized) == pytest.approx(sched.makespan, rel=1e-12)


def test_a_bad_execution_or_order_is_one_clear_error() -> None:
    graph = layered_dag(10, seed=0)
    with pytest.raises(InvalidOption, match="--execution must be one of fifo, ordered, got 'lifo'"):
        PlacementProblem(graph, random_cluster(3, seed=0), "lifo")
    problem = _problem(0)
    p = problem.random_placement(np.random.default_rng(0))
    with pytest.raises(InvalidPlacement, match="not topological"):
        problem.makespan(p, order=problem.graph.topo_order[::-1])
    with pytest.raises(InvalidPlacement, match="permutation"):
        problem.makespan(p, order=np.zeros(problem.num_tasks, np.int64))


def test_schedule_dict_lists_each_device_in_run_order() -> None:
    problem = _problem(6)
    p = problem.random_placement(np.random.default_rng(1))
    sched = problem.simulate(p)
    d = sched.to_dict(problem.graph, problem.cluster)
    assert d["execution"] == "ordered"
    by_name = {t["task"]: t for t in d["tasks"]}
    for tasks in d["devices"].values():
        starts = [by_name[t]["start"] for t in tasks]
        assert starts == sorted(starts)
    assert sum(len(t) for t in d["devices"].values()) == problem.num_tasks


def test_per_task_overhead_is_paid_by_every_task_in_both_semantics() -> None:
    from mlsysopt.graph.cluster import DeviceCluster

    # everything on one device, no transfers: the device never idles, the makespan is the sum of the task times
    g = layered_dag(12, num_types=1, seed=4)
    c = DeviceCluster([10.0], [True], [[np.inf]], [[0.0]], overhead=[0.5])
    for execution in ("fifo", "ordered"):
        problem = PlacementProblem(g, c, execution)
        want = float((g.compute / 10.0 + 0.5).sum())
        assert problem.makespan(np.zeros(g.num_nodes, np.int64)) == pytest.approx(want)
        assert problem.cp_min == pytest.approx(longest_path(g, g.compute / 10.0 + 0.5))
    assert DeviceCluster.from_dict(c.to_dict()).overhead.tolist() == [0.5]


def test_bad_overhead_is_refused_naming_the_device() -> None:
    from mlsysopt.errors import InvalidCluster
    from mlsysopt.graph.cluster import DeviceCluster

    with pytest.raises(InvalidCluster, match="device 'dev1' has overhead -1.0"):
        DeviceCluster([1.0, 1.0], [True, True], [[np.inf, 1.0], [1.0, np.inf]], np.zeros((2, 2)), overhead=[0, -1])
    data = DeviceCluster([1.0], [True], [[np.inf]], [[0.0]]).to_dict()
    with pytest.raises(InvalidCluster, match=r"c.json: 'overhead'\[0\] is '5us': expected a number"):
        DeviceCluster.from_dict({**data, "overhead": ["5us"]}, where="c.json")
    with pytest.raises(InvalidCluster, match="overhead has shape"):
        DeviceCluster.from_dict({**data, "overhead": [1e-6, 1e-6]}, where="c.json")


def test_presets_give_dnn_operators_their_overhead_and_workflows_none() -> None:
    from mlsysopt.graph.presets import OP_OVERHEAD, preset_cluster
    from mlsysopt.graph.units import implausible

    dnn = preset_cluster("edge")
    assert dnn.overhead.tolist() == [OP_OVERHEAD[n.rstrip("0123456789")] for n in dnn.names]
    assert (dnn.overhead > 0).all()
    wf = layered_dag(5, seed=0)
    wf.meta["source"] = "wfcommons"
    assert (preset_cluster("edge", wf).overhead == 0).all()
    # a DNN graph on a cluster without overhead: the makespan counts FLOPs only, and says so
    g = layered_dag(6, seed=0)
    g.meta["source"] = "onnx"
    bare = preset_cluster("edge", g)
    bare.overhead[:] = 0.0
    assert any("no per-task overhead" in w for w in implausible(g, bare, 1e-7, 1e-7))
    assert not any("no per-task overhead" in w for w in implausible(g, preset_cluster("edge", g), 1e-4, 1e-4))


def test_a_schedule_file_gives_the_placement_and_an_order_that_keeps_each_devices_list() -> None:
    from mlsysopt.graph.placement import is_schedule, schedule_from_dict

    problem = _problem(8)
    sched = problem.simulate(problem.random_placement(np.random.default_rng(2)))
    data = sched.to_dict(problem.graph, problem.cluster)
    assert is_schedule(data) and not is_schedule({"t0": "dev0"})
    placement, order = schedule_from_dict(problem.graph, problem.cluster, data)
    assert np.array_equal(placement, sched.placement)
    assert problem.makespan(placement, order=order) == pytest.approx(sched.makespan, rel=1e-12)
    pos = np.empty(problem.num_tasks, np.int64)
    pos[order] = np.arange(problem.num_tasks)
    names = {n: i for i, n in enumerate(problem.graph.names)}
    for tasks in data["devices"].values():
        assert list(np.argsort([pos[names[t]] for t in tasks])) == list(range(len(tasks)))


def test_a_bad_schedule_file_is_one_clear_error_naming_what_is_wrong() -> None:
    from mlsysopt.graph.placement import schedule_from_dict

    problem = _problem(9)
    g, c = problem.graph, problem.cluster
    data = problem.simulate(problem.random_placement(np.random.default_rng(3))).to_dict(g, c)
    dev, tasks = next(iter(data["devices"].items()))

    def bad(devices: dict, match: str) -> None:
        with pytest.raises(InvalidPlacement, match=match):
            schedule_from_dict(g, c, {"devices": devices}, where="s.json")

    bad({**data["devices"], "gpu9": []}, "s.json: 'devices' names 'gpu9', which is not a device")
    bad({**data["devices"], dev: [*tasks, tasks[0]]}, f"task '{tasks[0]}' is listed twice")
    bad({**data["devices"], dev: [*tasks[1:], "nope"]}, r"'devices'\['" + dev + r"'\]\[\d+\] is 'nope'")
    bad({dev: tasks}, "is on no device")
    # everything on one device, listed in reverse topological order: no executor can follow it
    one = layered_dag(10, num_types=1, seed=1)
    two = random_cluster(2, num_types=1, seed=1)
    with pytest.raises(InvalidPlacement, match="s.json: the devices' orders contradict the graph"):
        schedule_from_dict(one, two, {"devices": {two.names[0]: [one.names[i] for i in one.topo_order[::-1]]}},
                           where="s.json")  # fmt: skip
