"""Classic placement baselines: the shared contract, HEFT by hand, quality sanity and annealing from init."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.errors import ConstraintViolation, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import chain, diamond, fork, fork_join, homogeneous_cluster, layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import check_placement, random_placement
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement.base import default_budget
from mlsysopt.placement.baselines import BASELINES, HEFT, Annealing, get_baseline, heft_schedule
from mlsysopt.placement.baselines.eft_greedy import random_topological_order
from mlsysopt.placement.baselines.heft import earliest_slot

GRAPHS = {
    "chain": lambda: chain(6),
    "fork": lambda: fork(6),
    "fork_join": lambda: fork_join(7),
    "diamond": diamond,
    # two hardware types so that both clusters below can run it
    "layered": lambda: layered_dag(30, num_types=2, seed=3),
}
CLUSTERS = {
    "homogeneous": lambda: homogeneous_cluster(3, num_types=2),
    "random": lambda: random_cluster(5, num_types=2, seed=1),
}


@pytest.mark.parametrize("cluster_name", CLUSTERS)
@pytest.mark.parametrize("graph_name", GRAPHS)
@pytest.mark.parametrize("method", BASELINES)
def test_contract(method: str, graph_name: str, cluster_name: str) -> None:
    graph, cluster = GRAPHS[graph_name](), CLUSTERS[cluster_name]()
    budget = 15
    res = get_baseline(method).place(graph, cluster, budget=budget, seed=7)
    check_placement(graph, cluster, res.placement)
    assert res.method == method
    assert res.makespan == pytest.approx(Simulator(graph, cluster).makespan(res.placement))
    assert 1 <= res.evaluations <= budget
    assert len(res.history) == res.evaluations
    assert np.all(np.diff(res.history) <= 0)
    assert res.history[-1] == res.makespan
    again = get_baseline(method).place(graph, cluster, budget=budget, seed=7)
    assert np.array_equal(again.placement, res.placement)
    assert again.history == res.history


@pytest.mark.parametrize("method", BASELINES)
def test_budget_of_one_and_default_budget(method: str) -> None:
    graph, cluster = layered_dag(20, num_types=2, seed=0), random_cluster(4, num_types=2, seed=0)
    res = get_baseline(method).place(graph, cluster, budget=1, seed=0)
    assert res.evaluations == 1
    check_placement(graph, cluster, res.placement)
    res = get_baseline(method).place(graph, cluster, seed=0)
    assert res.evaluations <= default_budget(graph)


@pytest.mark.parametrize("method", BASELINES)
def test_unsupported_type_names_the_task(method: str) -> None:
    graph = layered_dag(12, num_types=2, seed=0)
    supports = np.zeros((3, 2), bool)
    supports[:, 0] = True  # nobody supports type 1
    cluster = DeviceCluster([1.0, 2.0, 1.0], supports, np.ones((3, 3)), np.zeros((3, 3)))
    first = graph.names[int(np.flatnonzero(graph.hw_type == 1)[0])]
    with pytest.raises(ConstraintViolation, match=f"task '{first}'"):
        get_baseline(method).place(graph, cluster, budget=5)


def test_only_feasible_devices_are_used() -> None:
    graph = layered_dag(30, num_types=2, seed=5)
    supports = np.array([[1, 0], [0, 1], [1, 1], [1, 0]], bool)
    # the fastest device supports nothing the type-1 tasks need
    cluster = DeviceCluster([5.0, 1.0, 1.0, 1.0], supports, np.ones((4, 4)), np.full((4, 4), 0.1))
    for method in BASELINES:
        res = get_baseline(method).place(graph, cluster, budget=20, seed=1)
        assert cluster.feasible(graph)[np.arange(graph.num_nodes), res.placement].all(), method


def test_unknown_baseline_lists_names() -> None:
    with pytest.raises(MlsysoptError, match="heft, fastest_device, random, annealing, eft_greedy"):
        get_baseline("nope")


def test_heft_chain_goes_to_the_fast_device() -> None:
    graph = chain(6)
    cluster = DeviceCluster([1.0, 4.0, 1.0], np.ones((3, 1), bool), np.ones((3, 3)), np.full((3, 3), 0.1))
    res = HEFT().place(graph, cluster)
    assert res.evaluations == 1
    assert np.all(res.placement == 1)
    assert res.makespan == pytest.approx(6 / 4)


def test_heft_fork_planned_makespan_by_hand() -> None:
    # t0 runs [0, 1] on dev0; its 5 children (compute 1, free comm) fill 3 devices: 3 in [1, 2], 2 in [2, 3]
    # (ties go to the lowest device id, so dev0 holds t0 and two children, dev1 two, dev2 one)
    graph, cluster = fork(6, nbytes=0.0), homogeneous_cluster(3)
    placement, order, planned = heft_schedule(graph, cluster)
    assert planned == pytest.approx(3.0)
    assert np.bincount(placement, minlength=3).tolist() == [3, 2, 1]
    sim = Simulator(graph, cluster)
    assert sim.makespan_in_order(placement, order) == pytest.approx(planned)
    assert sim.makespan(placement) == pytest.approx(planned)


def test_heft_order_reproduces_the_plan() -> None:
    for s in range(3):
        graph, cluster = layered_dag(40, seed=s), random_cluster(6, seed=s)
        placement, order, planned = heft_schedule(graph, cluster)
        assert Simulator(graph, cluster).makespan_in_order(placement, order) == pytest.approx(planned)


def test_heft_order_with_zero_compute_tasks_and_parallel_edges() -> None:
    # zero-length tasks share start times with others on their device: the order must still match the plan
    rng = np.random.default_rng(0)
    for s in range(40):
        n = int(rng.integers(2, 14))
        pairs = [(u, v) for v in range(n) for u in range(v)]
        edges = [pairs[k] for k in rng.integers(len(pairs), size=int(rng.integers(0, 2 * n)))]
        graph = CompGraph.build(
            [f"t{i}" for i in range(n)],
            ["task"] * n,
            {"compute": rng.choice([0.0, 1.0, 2.5], size=n)},
            edges,
            rng.choice([0.0, 1.0, 3.0], size=len(edges)),
            hw_type=rng.integers(2, size=n),
        )
        cluster = random_cluster(int(rng.integers(2, 5)), num_types=2, seed=s)
        placement, order, planned = heft_schedule(graph, cluster)
        assert Simulator(graph, cluster).makespan_in_order(placement, order) == pytest.approx(planned, abs=1e-12)


def test_earliest_slot_uses_gaps() -> None:
    starts, finishes = [0.0, 5.0, 9.0], [2.0, 7.0, 10.0]
    assert earliest_slot(starts, finishes, 0.0, 3.0) == 2.0  # fits in [2, 5]
    assert earliest_slot(starts, finishes, 3.0, 2.0) == 3.0  # [3, 5] still fits
    assert earliest_slot(starts, finishes, 3.5, 2.0) == 7.0  # too late for [2, 5]; fits in [7, 9]
    assert earliest_slot(starts, finishes, 3.0, 2.5) == 10.0  # no gap from 3 on is long enough
    assert earliest_slot([], [], 1.5, 1.0) == 1.5


def test_heft_insertion_fills_an_idle_gap() -> None:
    # a (type 0, dev0 only) -> b (type 1, dev1 only) -> c (type 0) with 5 s transfers; d (type 1) is independent.
    # HEFT schedules a, b, d, c by rank: b runs on dev1 in [6, 7], and d (lower rank) is inserted before it in [0, 2]
    graph = CompGraph.build(
        list("abcd"), ["task"] * 4, {"compute": [1, 1, 1, 2]}, [(0, 1), (1, 2)], [5.0, 5.0], hw_type=[0, 1, 0, 1]
    )
    cluster = DeviceCluster([1.0, 1.0], np.eye(2, dtype=bool), np.ones((2, 2)), np.zeros((2, 2)))
    placement, order, planned = heft_schedule(graph, cluster)
    assert placement.tolist() == [0, 1, 0, 1]
    assert order.tolist() == [0, 3, 1, 2]
    assert planned == pytest.approx(13.0)
    assert HEFT().place(graph, cluster).makespan == pytest.approx(13.0)


def test_heft_beats_random_search_mean() -> None:
    ratios = []
    for s in range(5):
        graph, cluster = layered_dag(30, seed=s), random_cluster(8, seed=s)
        heft = HEFT().place(graph, cluster).makespan
        rng = np.random.default_rng(s)
        sim = Simulator(graph, cluster)
        mean_random = np.mean([sim.makespan(random_placement(graph, cluster, rng)) for _ in range(30)])
        ratios.append(heft / mean_random)
    assert np.mean(ratios) < 1.0


def test_annealing_never_worse_than_init() -> None:
    for s in range(4):
        graph, cluster = layered_dag(25, seed=s), random_cluster(6, seed=s)
        init = random_placement(graph, cluster, np.random.default_rng(100 + s))
        start = Simulator(graph, cluster).makespan(init)
        res = Annealing().place(graph, cluster, budget=30, seed=s, init=init)
        assert res.history[0] == pytest.approx(start)
        assert res.makespan <= start


def test_annealing_rejects_an_infeasible_init() -> None:
    graph, cluster = chain(4), homogeneous_cluster(2)
    with pytest.raises(MlsysoptError):
        Annealing().place(graph, cluster, budget=5, init=np.array([0, 1, 2, 0]))


def test_random_topological_order_is_topological_and_varies() -> None:
    graph = layered_dag(30, seed=1)
    rng = np.random.default_rng(0)
    orders = {tuple(random_topological_order(graph, rng)) for _ in range(5)}
    assert len(orders) > 1
    src, dst = graph.edge_index
    for order in orders:
        pos = np.empty(graph.num_nodes, np.int64)
        pos[list(order)] = np.arange(graph.num_nodes)
        assert np.all(pos[src] < pos[dst])


def test_heft_zero_cost_input_follows_its_children() -> None:
    # a zero-cost input feeds a heavy chain; device 0 is slow, device 1 fast, links expensive. Every device ties
    # for the input, and the old tie-break (lowest id) sent it, and with it the whole chain, to device 0.
    graph = CompGraph.build(
        ["x", "a", "b", "c"], ["input", "op", "op", "op"], {"compute": [0.0, 4.0, 4.0, 4.0]}, [(0, 1), (1, 2), (2, 3)],
        [10.0, 10.0, 10.0],
    )  # fmt: skip
    cluster = DeviceCluster([1.0, 8.0], np.ones((2, 1), bool), np.ones((2, 2)), np.full((2, 2), 5.0))
    placement, order, planned = heft_schedule(graph, cluster)
    assert placement.tolist() == [1, 1, 1, 1]
    assert planned == pytest.approx(1.5)
    assert Simulator(graph, cluster).makespan_in_order(placement, order) == pytest.approx(planned)


def test_heft_slot_search_matches_earliest_slot() -> None:
    from mlsysopt.placement.baselines.heft import _slots

    rng = np.random.default_rng(0)
    for _ in range(50):
        d, m = 3, int(rng.integers(0, 6))
        starts = np.zeros((d, 8))
        finishes = np.zeros((d, 8))
        count = np.full(d, m)
        for k in range(d):
            edges = np.sort(rng.uniform(0, 10, 2 * m))
            starts[k, :m], finishes[k, :m] = edges[0::2], edges[1::2]
        ready, duration = rng.uniform(0, 10, d), rng.uniform(0, 3, d)
        slot, eft = np.zeros(d), np.zeros(d)
        _slots(starts, finishes, count, ready, duration, np.ones(d, bool), slot, eft)
        for k in range(d):
            want = earliest_slot(list(starts[k, :m]), list(finishes[k, :m]), ready[k], duration[k])
            assert slot[k] == pytest.approx(want)


def test_fastest_device_puts_everything_on_one_device_when_it_can() -> None:
    from mlsysopt.placement.baselines import FastestDevice

    graph = layered_dag(12, num_types=2, seed=0)
    supports = np.array([[1, 1], [1, 0], [0, 1], [1, 1]], bool)
    cluster = DeviceCluster([1.0, 5.0, 3.0, 2.0], supports, np.ones((4, 4)), np.zeros((4, 4)))
    res = FastestDevice().place(graph, cluster)
    assert res.evaluations == 1 and (res.placement == 3).all()  # the fastest device that runs both types
    split = DeviceCluster([1.0, 5.0, 3.0], supports[:3] & [[0, 1], [1, 0], [0, 1]], np.ones((3, 3)), np.zeros((3, 3)))
    res = FastestDevice().place(graph, split)  # nobody runs both: each task on its fastest feasible device
    assert np.array_equal(res.placement, np.where(graph.hw_type == 0, 1, 2))
