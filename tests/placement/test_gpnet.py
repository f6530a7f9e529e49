"""gpNet construction: hand-checked structure and features, feasibility, levels, incremental rebuilds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsysopt.errors import ConstraintViolation, InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import diamond, homogeneous_cluster, layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement.gpnet import EDGE_DIM, EDGE_FEATURES, NODE_DIM, NODE_FEATURES, GpNet, GpNetBuilder

DIAMOND_EDGES = [(0, 1), (0, 2), (1, 3), (2, 3)]


def built(graph: CompGraph, cluster: DeviceCluster, placement: list[int] | np.ndarray) -> tuple[GpNetBuilder, GpNet]:
    b = GpNetBuilder(graph, cluster)
    pl = np.asarray(placement, np.int64)
    return b, b.build(pl, Simulator(graph, cluster).run(pl))


def edge_set(net: GpNet) -> set[tuple[int, int]]:
    return set(map(tuple, net.edge_index.T.tolist()))


def random_problem(seed: int = 3, q: float = 0.5) -> tuple[CompGraph, DeviceCluster, np.ndarray]:
    g = layered_dag(40, alpha=0.3, p=0.15, num_types=3, seed=seed)
    c = random_cluster(6, num_types=3, q=q, delay_avg=0.3, seed=seed)
    feas = c.feasible(g)
    rng = np.random.default_rng(seed)
    pl = np.array([rng.choice(np.flatnonzero(row)) for row in feas])
    return g, c, pl


def test_diamond_structure_by_hand() -> None:
    b, net = built(diamond(), homogeneous_cluster(3), [0, 1, 2, 0])
    assert net.x.shape == (12, NODE_DIM) and net.x.dtype == torch.float32
    assert len(NODE_FEATURES) == NODE_DIM and len(EDGE_FEATURES) == EDGE_DIM == net.edge_attr.shape[1]
    assert net.num_tasks == 4 and net.num_devices == 3
    node = {(t, d): b.node_of(t, d) for t in range(4) for d in range(3)}
    assert sorted(node.values()) == list(range(12))
    assert np.flatnonzero(net.pivot).tolist() == sorted([node[0, 0], node[1, 1], node[2, 2], node[3, 0]])
    pl = [0, 1, 2, 0]
    expected = {(node[p, pl[p]], node[t, d]) for p, t in DIAMOND_EDGES for d in range(3)}
    expected |= {(node[p, d], node[t, pl[t]]) for p, t in DIAMOND_EDGES for d in range(3) if d != pl[p]}
    assert net.edge_index.shape == (2, 4 * 3 + 4 * 2) == (2, len(expected))
    assert edge_set(net) == expected
    assert (node[0, 0], node[1, 2]) in expected and (node[1, 0], node[3, 0]) in expected
    assert (node[1, 1], node[3, 0]) in expected and (node[1, 1], node[3, 2]) in expected  # pivot -> all of t3
    assert (node[0, 1], node[1, 1]) in expected and (node[0, 1], node[1, 2]) not in expected  # t1 pivot: dev 1
    assert (node[1, 0], node[3, 1]) not in expected and (node[2, 0], node[3, 2]) not in expected


def test_only_feasible_pairs() -> None:
    g = CompGraph.build(list("abcd"), ["task"] * 4, {"compute": [1, 2, 3, 1]}, DIAMOND_EDGES, [1] * 4, [0, 1, 0, 1])
    supports = np.array([[1, 0], [1, 1], [0, 1]], bool)
    c = DeviceCluster([1.0, 2.0, 3.0], supports, np.full((3, 3), 2.0), np.full((3, 3), 0.1))
    b, net = built(g, c, [0, 2, 1, 1])
    pairs = set(zip(net.task.tolist(), net.device.tolist(), strict=True))
    assert pairs == {(t, d) for t in range(4) for d in range(3) if supports[d, g.hw_type[t]]}
    assert net.x.shape[0] == 8
    ncand = [2, 2, 2, 2]
    assert net.edge_index.shape[1] == sum(ncand[t] for _, t in DIAMOND_EDGES) + sum(
        ncand[p] - 1 for p, _ in DIAMOND_EDGES
    )
    with pytest.raises(ConstraintViolation):
        b.node_of(0, 2)
    with pytest.raises(ConstraintViolation):
        b.pivots([2, 2, 1, 1])


def test_matches_loop_reference() -> None:
    g, c, pl = random_problem()
    _, net = built(g, c, pl)
    s = Simulator(g, c).run(pl)
    node = {(int(t), int(d)): k for k, (t, d) in enumerate(zip(net.task, net.device, strict=True))}
    expected = set()
    for p, t in g.edge_index.T.tolist():
        expected |= {(node[p, int(pl[p])], node[t, d]) for (tt, d) in node if tt == t}
        expected |= {(node[p, d], node[t, int(pl[t])]) for (pp, d) in node if pp == p and d != pl[p]}
    assert edge_set(net) == expected and net.edge_index.shape[1] == len(expected)
    raw = np.empty(len(node))
    for (t, d), k in node.items():
        arrive = [s.finish[p] + c.comm_time(bb, int(pl[p]), d) for p, bb in zip(*_parents(g, t), strict=True)]
        raw[k] = max(arrive, default=0.0) - s.start[t]
    np.testing.assert_allclose(net.x[:, 3].numpy(), raw / np.abs(raw).max(), atol=1e-6)
    # comm-time column against cluster.comm_time, min-max after log1p
    ei, ea = net.edge_index.numpy(), net.edge_attr.numpy()
    nbytes = {(u, v): bb for (u, v), bb in zip(g.edge_index.T.tolist(), g.edge_bytes, strict=True)}
    comm = np.log1p(
        [
            c.comm_time(nbytes[int(net.task[u]), int(net.task[v])], int(net.device[u]), int(net.device[v]))
            for u, v in ei.T
        ]
    )
    np.testing.assert_allclose(ea[:, 3], (comm - comm.min()) / (comm.max() - comm.min()), atol=1e-6)


def _parents(g: CompGraph, t: int) -> tuple[list[int], list[float]]:
    idx = np.flatnonzero(g.edge_index[1] == t)
    return g.edge_index[0, idx].tolist(), g.edge_bytes[idx].tolist()


def test_levels_increase_along_every_edge() -> None:
    g, c, pl = random_problem(seed=5)
    _, net = built(g, c, pl)
    assert net.level.dtype == torch.long
    assert torch.equal(net.level, torch.as_tensor(g.levels[net.task]))
    src, dst = net.edge_index
    assert (net.level[src] < net.level[dst]).all()


def test_features_finite_and_scaled() -> None:
    g, c, pl = random_problem(seed=7)
    _, net = built(g, c, pl)
    for t in (net.x, net.edge_attr):
        assert torch.isfinite(t).all()
    signed = [NODE_FEATURES.index("start_potential"), NODE_FEATURES.index("finish_potential")]
    cols = [i for i in range(NODE_DIM) if i not in signed]
    assert (net.x[:, cols] >= 0).all() and (net.x[:, cols] <= 1).all()
    for col in signed:
        assert (net.x[:, col].abs() <= 1).all() and net.x[:, col].abs().max() == 1.0
    assert (net.edge_attr >= 0).all() and (net.edge_attr <= 1).all()
    for col in (0, 1, 2):  # heterogeneous inputs span the whole [0, 1] range
        assert net.x[:, col].min() == 0.0 and net.x[:, col].max() == 1.0
    assert net.edge_attr[:, 1].max() == 1.0 and net.edge_attr[:, 3].max() == 1.0


def test_start_potential_and_criticality_by_hand() -> None:
    # all on device 0: t0 [0,1], t1 [1,2], t2 ready 1 but waits until 2 -> [2,3], t3 [3,4]; path t0 t1 t2 t3
    b, net = built(diamond(), homogeneous_cluster(3, bandwidth=1.0, delay=0.5), [0, 0, 0, 0])
    pot = net.x[:, 3]
    # raw potentials: t2 pivot 1 - 2 = -1, t2@1: 1 + 1.5 - 2 = 0.5, t1@1: 1.5, t3@1: 3 + 1.5 - 3 = 1.5 (max)
    assert pot[b.node_of(0, 0)] == 0.0 and pot[b.node_of(0, 2)] == 0.0
    assert pot[b.node_of(1, 0)] == 0.0 and pot[b.node_of(3, 0)] == 0.0  # pivots that did not wait
    assert pot[b.node_of(2, 0)].item() == pytest.approx(-2 / 3)
    assert pot[b.node_of(2, 1)].item() == pytest.approx(1 / 3)
    assert pot[b.node_of(3, 2)].item() == 1.0 and pot[b.node_of(1, 1)].item() == 1.0
    assert (net.x[:, 4] == 1.0).all()  # every task is on the critical path
    assert (net.x[:, :3] == 0.0).all()  # constant columns
    ts = net.task[net.edge_index.numpy()]
    crit = {(int(u), int(v)) for u, v, f in zip(ts[0], ts[1], net.edge_attr[:, 4].tolist(), strict=True) if f == 1}
    assert crit == {(0, 1), (2, 3)}  # consecutive on the path: t0->t1 and t2->t3
    same = net.device[net.edge_index[0].numpy()] == net.device[net.edge_index[1].numpy()]
    assert (net.edge_attr[same, 1:4] == 0).all() and (net.edge_attr[~same, 1:4] == 1).all()


def test_pivot_potential_zero_iff_no_wait() -> None:
    g, c, pl = random_problem(seed=11)
    s = Simulator(g, c).run(pl)
    b = GpNetBuilder(g, c)
    net = b.build(pl, s)
    piv_pot = net.x[b.pivots(pl), 3].numpy()
    waited = s.start > s.ready
    assert (piv_pot[~waited] == 0).all() and (piv_pot[waited] < 0).all() and waited.any()


def test_move_rebuild_matches_fresh_builder() -> None:
    g, c, pl = random_problem(seed=13)
    sim = Simulator(g, c)
    b = GpNetBuilder(g, c)
    b.build(pl, sim.run(pl))
    feas = c.feasible(g)
    t = int(np.flatnonzero(feas.sum(axis=1) > 1)[0])
    d = int(next(d for d in np.flatnonzero(feas[t]) if d != pl[t]))
    new = pl.copy()
    new[t] = d
    s2 = sim.run(new)
    net = b.build(new, s2)
    assert net.pivot[b.node_of(t, d)] and not net.pivot[b.node_of(t, int(pl[t]))]
    fresh = GpNetBuilder(g, c).build(new, s2)
    for name in ("x", "edge_index", "edge_attr", "level", "action_mask"):
        assert torch.equal(getattr(net, name), getattr(fresh, name)), name
    for name in ("task", "device", "pivot"):
        assert np.array_equal(getattr(net, name), getattr(fresh, name)), name
    with pytest.raises(InvalidPlacement):
        b.build(pl, s2)  # schedule of another placement


def test_action_mask() -> None:
    _, net = built(diamond(), homogeneous_cluster(3), [0, 1, 2, 0])
    assert net.action_mask.dtype == torch.bool
    assert torch.equal(net.action_mask, torch.from_numpy(~net.pivot))
    assert int(net.action_mask.sum()) == 12 - 4
    _, single = built(diamond(), homogeneous_cluster(1), [0, 0, 0, 0])
    assert single.pivot.all() and single.action_mask.all() and single.edge_index.shape[1] == 4


def test_node_of_move_round_trip() -> None:
    g, c, _ = random_problem(seed=17)
    b = GpNetBuilder(g, c)
    for k in range(b.num_nodes):
        t, d = b.move(k)
        assert b.node_of(t, d) == k
    assert set(b.candidates(0).tolist()) == {b.node_of(0, int(d)) for d in np.flatnonzero(c.feasible(g)[0])}
    with pytest.raises(InvalidPlacement):
        b.node_of(g.num_nodes, 0)


def test_finish_potential_by_hand() -> None:
    # diamond (compute 1, bytes 1) all on dev0 of speeds [1, 2], bandwidth 1, no delay:
    # t0 [0,1], t1 [1,2], t2 ready 1 but waits -> [2,3], t3 [3,4]
    from mlsysopt.graph.cluster import DeviceCluster

    c = DeviceCluster([1.0, 2.0], np.ones((2, 1), bool), np.ones((2, 2)), np.zeros((2, 2)))
    b, net = built(diamond(), c, [0, 0, 0, 0])
    fin = net.x[:, NODE_FEATURES.index("finish_potential")]
    # raw: est(t on d) + compute/speed(d) - finish[t]; the largest magnitude (t2's pivot, -1) scales to -1
    expected = {(0, 0): 0.0, (0, 1): -0.5, (1, 0): 0.0, (1, 1): 0.5, (2, 0): -1.0, (2, 1): -0.5, (3, 0): 0.0}
    for (t, d), value in expected.items():
        assert fin[b.node_of(t, d)].item() == pytest.approx(value), (t, d)
    assert fin[b.node_of(3, 1)].item() == pytest.approx(0.5)
