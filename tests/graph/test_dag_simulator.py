"""The DAG simulator: hand-checked schedules, properties (hypothesis), bad placements, CP_MIN and SLR."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsysopt.errors import ConstraintViolation, InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import placement_from_dict, placement_to_dict, random_placement
from mlsysopt.graph.simulator import Simulator, cp_min, simulate, slr


def two_devices(bw: float = 10.0, delay: float = 0.5, speeds: tuple[float, float] = (1.0, 2.0)) -> DeviceCluster:
    return DeviceCluster(list(speeds), np.ones((2, 1), bool), np.full((2, 2), bw), np.full((2, 2), delay))


def diamond() -> CompGraph:
    return CompGraph.build(
        list("abcd"), ["task"] * 4, {"compute": [1, 2, 3, 1]}, [(0, 1), (0, 2), (1, 3), (2, 3)], [10] * 4
    )


@st.composite
def problems(draw: st.DrawFn, max_tasks: int = 25) -> tuple[CompGraph, DeviceCluster, np.ndarray]:
    n = draw(st.integers(1, max_tasks))
    pairs = [(u, v) for v in range(n) for u in range(v)]
    edges = sorted(set(draw(st.lists(st.sampled_from(pairs), max_size=3 * n)))) if pairs else []
    pos = st.floats(0.01, 100.0)
    g = CompGraph.build(
        [f"t{i}" for i in range(n)],
        ["task"] * n,
        {"compute": draw(st.lists(pos, min_size=n, max_size=n))},
        edges,
        draw(st.lists(st.floats(0.0, 1000.0), min_size=len(edges), max_size=len(edges))),
    )
    d = draw(st.integers(1, 5))
    sym = np.array(draw(st.lists(pos, min_size=d * d, max_size=d * d))).reshape(d, d)
    dl = np.array(draw(st.lists(st.floats(0.0, 10.0), min_size=d * d, max_size=d * d))).reshape(d, d)
    c = DeviceCluster(draw(st.lists(pos, min_size=d, max_size=d)), np.ones((d, 1), bool), sym, dl)
    p = np.array(draw(st.lists(st.integers(0, d - 1), min_size=n, max_size=n)))
    return g, c, p


def test_hand_checked_schedule() -> None:
    s = simulate(diamond(), two_devices(), [0, 1, 0, 1])
    # a: dev0 [0,1]; b: dev1 ready 1+0.5+10/10=2.5, runs 1s; c: dev0 [1,4]; d: dev1 waits for c: 4+1.5=5.5
    np.testing.assert_allclose(s.start, [0, 2.5, 1, 5.5])
    np.testing.assert_allclose(s.finish, [1, 3.5, 4, 6])
    assert s.makespan == 6.0 and s.critical_path == [0, 2, 3]


def test_device_queue_is_fifo_by_readiness_ties_by_id() -> None:
    # b and c become ready together on the same device: the lower id runs first
    g = CompGraph.build(list("abc"), ["task"] * 3, {"compute": [1, 5, 2]}, [(0, 1), (0, 2)])
    s = simulate(g, two_devices(), [0, 0, 0])
    np.testing.assert_allclose(s.start, [0, 1, 6])
    assert s.critical_path == [0, 1, 2]  # c waited for the device, so the path goes through b


@given(problems())
@settings(max_examples=150, deadline=None)
def test_makespan_at_least_cp_min_and_schedule_is_consistent(prob) -> None:
    g, c, p = prob
    s = simulate(g, c, p)
    assert s.makespan >= cp_min(g, c) * (1 - 1e-12)
    assert slr(s.makespan, g, c) >= 1 - 1e-12
    dur = g.compute / c.speed[p]
    # finish = start + dur in floats: finish - start is exact only to a few ulps of the finish time
    np.testing.assert_allclose(s.finish - s.start, dur, rtol=1e-9, atol=8 * np.finfo(float).eps * s.makespan)
    for k, (u, v) in enumerate(g.edge_index.T):
        assert s.start[v] >= s.finish[u] + c.comm_time(g.edge_bytes[k], p[u], p[v]) - 1e-9
    for d in range(c.num_devices):  # one task at a time per device
        on = np.flatnonzero(p == d)
        order = on[np.argsort(s.start[on], kind="stable")]
        assert np.all(s.start[order[1:]] >= s.finish[order[:-1]] - 1e-9)
    cp = s.critical_path
    assert s.finish[cp[-1]] == s.makespan and s.start[cp[0]] == 0.0


@given(problems())
@settings(max_examples=100, deadline=None)
def test_everything_on_one_device_sums_compute(prob) -> None:
    g, c, _ = prob
    for d in range(c.num_devices):
        ms = Simulator(g, c).makespan(np.full(g.num_nodes, d))
        assert ms == pytest.approx(g.compute.sum() / c.speed[d], rel=1e-9)


@given(problems(), st.data())
@settings(max_examples=150, deadline=None)
def test_raising_a_delay_never_lowers_a_fixed_schedule(prob, data) -> None:
    g, c, p = prob
    i, j = data.draw(st.integers(0, c.num_devices - 1)), data.draw(st.integers(0, c.num_devices - 1))
    slower_delay = c.delay.copy()
    slower_delay[i, j] += data.draw(st.floats(0.0, 50.0))
    slower = DeviceCluster(c.speed, c.supports, c.bandwidth, slower_delay, c.names)
    before = Simulator(g, c).makespan_in_order(p)
    assert Simulator(g, slower).makespan_in_order(p) >= before * (1 - 1e-12)


@given(problems(), st.data())
@settings(max_examples=100, deadline=None)
def test_raising_a_delay_never_lowers_makespan_without_device_contention(prob, data) -> None:
    g, _, _ = prob
    n = g.num_nodes
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    bw, dl = rng.uniform(0.1, 10, (n, n)), rng.uniform(0, 5, (n, n))
    c = DeviceCluster(rng.uniform(0.5, 2, n), np.ones((n, 1), bool), bw, dl)
    p = np.arange(n)  # one task per device: FIFO queues never reorder anything
    i, j = rng.integers(0, n, 2)
    dl2 = dl.copy()
    dl2[i, j] += data.draw(st.floats(0.0, 50.0))
    before = Simulator(g, c).makespan(p)
    after = Simulator(g, DeviceCluster(c.speed, c.supports, bw, dl2)).makespan(p)
    assert after >= before * (1 - 1e-12)


def test_fifo_makespan_has_graham_anomaly() -> None:
    # Documented behaviour of FIFO-by-readiness (the GiPH/SimPy semantics): a longer delay can reorder a
    # device's queue and shorten the makespan (Graham's anomaly). The fixed-order makespan stays monotone.
    g = CompGraph.build(list("swxyz"), ["task"] * 5, {"compute": [0.5, 1, 10, 1, 10]}, [(0, 2), (1, 3), (3, 4)])
    p = np.array([0, 2, 1, 1, 2])  # x and y share device 1; y feeds the long task z

    def cluster(delay_s_to_x: float) -> DeviceCluster:
        dl = np.zeros((3, 3))
        dl[0, 1] = delay_s_to_x
        return DeviceCluster([1.0] * 3, np.ones((3, 1), bool), np.full((3, 3), 1.0), dl)

    fast, slow = Simulator(g, cluster(0.0)), Simulator(g, cluster(1.0))
    assert fast.makespan(p) == pytest.approx(21.5)  # x ready at 0.5 runs first, y and z wait
    assert slow.makespan(p) == pytest.approx(12.0)  # x ready at 1.5: y (ready at 1) goes first
    assert fast.makespan_in_order(p) == pytest.approx(21.5)
    assert slow.makespan_in_order(p) == pytest.approx(22.5)


def test_placement_errors() -> None:
    g, c = diamond(), two_devices()
    with pytest.raises(InvalidPlacement, match="shape"):
        simulate(g, c, [0, 1])
    with pytest.raises(InvalidPlacement, match="task 'c' is placed on device 7"):
        simulate(g, c, [0, 0, 7, 0])
    with pytest.raises(InvalidPlacement, match="integer"):
        simulate(g, c, [0.0, 1.0, 0.0, 1.0])


def test_hardware_type_constraint() -> None:
    g = CompGraph.build(list("ab"), ["task"] * 2, {"compute": [1, 1]}, [(0, 1)], hw_type=[0, 1])
    c = DeviceCluster([1, 1], [[1, 0], [1, 1]], np.ones((2, 2)), np.zeros((2, 2)), ["cpu", "gpu"])
    with pytest.raises(ConstraintViolation, match="task 'b' needs hardware type 1, which device 'cpu'"):
        simulate(g, c, [0, 0])
    assert simulate(g, c, [0, 1]).makespan == pytest.approx(2.0)
    assert cp_min(g, c) == pytest.approx(2.0)


def test_placement_json_round_trip_and_errors() -> None:
    g, c = diamond(), two_devices()
    p = random_placement(g, c, np.random.default_rng(0))
    d = placement_to_dict(g, c, p)
    np.testing.assert_array_equal(placement_from_dict(g, c, d), p)
    np.testing.assert_array_equal(placement_from_dict(g, c, {"placement": d}), p)
    with pytest.raises(InvalidPlacement, match="unknown task 'zz'"):
        placement_from_dict(g, c, {**d, "zz": "dev0"})
    with pytest.raises(InvalidPlacement, match="task 'a' is placed on unknown device 'tpu9'"):
        placement_from_dict(g, c, {**d, "a": "tpu9"})
    with pytest.raises(InvalidPlacement, match="have no device, e.g. 'd'"):
        placement_from_dict(g, c, {k: v for k, v in d.items() if k != "d"})


def test_batch_matches_single() -> None:
    rng = np.random.default_rng(1)
    n, d = 60, 4
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < 0.1]
    g = CompGraph.build(
        [f"t{i}" for i in range(n)],
        ["task"] * n,
        {"compute": rng.uniform(1, 5, n)},
        edges,
        rng.uniform(0, 10, len(edges)),
    )
    c = DeviceCluster(rng.uniform(1, 3, d), np.ones((d, 1), bool), rng.uniform(1, 5, (d, d)), rng.uniform(0, 1, (d, d)))
    sim = Simulator(g, c)
    ps = rng.integers(0, d, (32, n))
    np.testing.assert_array_equal(sim.makespans(ps), [sim.makespan(p) for p in ps])
    with pytest.raises(InvalidPlacement):
        sim.makespans(np.full((2, n), d))


def test_in_order_checks_the_order() -> None:
    sim = Simulator(diamond(), two_devices())
    assert sim.makespan_in_order([0, 0, 0, 0], [0, 2, 1, 3]) == pytest.approx(7.0)
    assert sim.makespan_in_order([0, 1, 0, 1], [0, 2, 1, 3]) == pytest.approx(6.0)
    with pytest.raises(InvalidPlacement, match="not topological: 'b' comes before its input 'a'"):
        sim.makespan_in_order([0, 0, 0, 0], [1, 0, 2, 3])
    with pytest.raises(InvalidPlacement, match="permutation"):
        sim.makespan_in_order([0, 0, 0, 0], [0, 0, 1, 2])


def test_schedule_to_dict_names() -> None:
    g, c = diamond(), two_devices()
    out = simulate(g, c, [0, 1, 0, 1]).to_dict(g, c)
    assert out["makespan"] == 6.0 and out["critical_path"] == ["a", "c", "d"]
    assert out["tasks"][1] == {"task": "b", "device": "dev1", "start": 2.5, "finish": 3.5}


def test_slr_from_bound_edge_cases() -> None:
    from mlsysopt.graph.simulator import slr_from_bound

    assert slr_from_bound(6.0, 2.5) == pytest.approx(2.4)
    assert slr_from_bound(0.0, 0.0) == 1.0  # an all-zero-compute graph on zero-delay links
    assert slr_from_bound(1.0, 0.0) == float("inf")
