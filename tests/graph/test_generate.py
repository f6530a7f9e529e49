"""Tests for the seeded task-graph and cluster generators and the small fixtures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsysopt.errors import InvalidCluster, InvalidGraph, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import (
    chain,
    diamond,
    fork,
    fork_join,
    homogeneous_cluster,
    layered_dag,
    random_cluster,
)
from mlsysopt.graph.ir import CompGraph


def _sources_sinks(g: CompGraph) -> tuple[np.ndarray, np.ndarray]:
    indeg = np.bincount(g.edge_index[1], minlength=g.num_nodes)
    outdeg = np.bincount(g.edge_index[0], minlength=g.num_nodes)
    return np.flatnonzero(indeg == 0), np.flatnonzero(outdeg == 0)


@pytest.mark.parametrize(
    ("n", "alpha"),
    [(1, 0.2), (2, 0.2), (3, 0.1), (10, 0.1), (15, 0.3), (20, 0.2), (50, 1.0), (100, 0.5), (300, 2.0)],
)
def test_layered_dag_exact_count_single_source_and_sink(n: int, alpha: float) -> None:
    g = layered_dag(n, alpha=alpha, seed=7)
    assert g.num_nodes == n
    sources, sinks = _sources_sinks(g)
    assert sources.tolist() == [0]
    assert sinks.tolist() == [n - 1]
    assert g.names == [f"t{i}" for i in range(n)]
    assert set(g.ops) == {"task"}


def test_layered_dag_features_match_edges_and_ranges() -> None:
    g = layered_dag(60, alpha=0.4, compute_avg=10.0, compute_beta=1.0, bytes_avg=5.0, bytes_beta=0.4, seed=3)
    assert np.all((g.compute >= 5.0) & (g.compute <= 15.0))
    assert np.array_equal(g.feature("flops"), g.compute)
    assert np.all((g.edge_bytes >= 4.0) & (g.edge_bytes <= 6.0))
    out = np.bincount(g.edge_index[0], weights=g.edge_bytes, minlength=g.num_nodes)
    inn = np.bincount(g.edge_index[1], weights=g.edge_bytes, minlength=g.num_nodes)
    np.testing.assert_allclose(g.feature("bytes_out"), out)
    np.testing.assert_allclose(g.feature("bytes_in"), inn)
    assert g.hw_type.min() >= 0 and g.hw_type.max() < 5
    assert len(set(map(tuple, g.edge_index.T.tolist()))) == g.num_edges  # no parallel edges
    assert g.meta["generator"] == "layered_dag" and g.meta["num_tasks"] == 60


def test_layered_dag_shape_follows_alpha() -> None:
    thin = np.mean([layered_dag(100, alpha=0.1, seed=s).depth for s in range(5)])
    fat = np.mean([layered_dag(100, alpha=2.0, seed=s).depth for s in range(5)])
    assert thin > 3 * fat


def test_layered_dag_p_controls_density() -> None:
    sparse = layered_dag(80, alpha=0.5, p=0.0, seed=1)
    dense = layered_dag(80, alpha=0.5, p=0.9, seed=1)
    assert dense.num_edges > 5 * sparse.num_edges
    # with p = 0 only the mandatory parent/child edges remain: about one per task
    assert sparse.num_edges < 2 * sparse.num_nodes


def test_layered_dag_seed_determinism() -> None:
    a, b = layered_dag(40, seed=11), layered_dag(40, seed=11)
    assert np.array_equal(a.edge_index, b.edge_index)
    assert np.array_equal(a.compute, b.compute)
    assert np.array_equal(a.edge_bytes, b.edge_bytes)
    assert np.array_equal(a.hw_type, b.hw_type)
    c = layered_dag(40, seed=12)
    assert not (a.edge_index.shape == c.edge_index.shape and np.array_equal(a.edge_index, c.edge_index))
    assert not np.array_equal(a.compute, c.compute)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_tasks": 0},
        {"num_tasks": 2.5},
        {"num_tasks": True},
        {"alpha": 0.0},
        {"alpha": -1.0},
        {"alpha": float("nan")},
        {"p": -0.1},
        {"p": 1.5},
        {"compute_beta": 2.0},
        {"bytes_beta": -0.1},
        {"compute_avg": 0.0},
        {"bytes_avg": -1.0},
        {"num_types": 0},
        {"seed": "x"},
    ],
)
def test_layered_dag_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidGraph) as err:
        layered_dag(**kwargs)
    assert next(iter(kwargs)) in str(err.value)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 200),
    alpha=st.floats(0.05, 3.0),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_layered_dag_property_valid_single_source_sink(n: int, alpha: float, p: float, seed: int) -> None:
    g = layered_dag(n, alpha=alpha, p=p, seed=seed)
    g.validate()
    assert g.num_nodes == n
    sources, sinks = _sources_sinks(g)
    assert len(sources) == 1 and len(sinks) == 1
    assert np.all(g.edge_index[0] < g.edge_index[1])  # names are in a topological order


# ---------------------------------------------------------------------- clusters
def test_random_cluster_shapes_symmetry_and_ranges() -> None:
    c = random_cluster(12, num_types=4, speed_avg=2.0, speed_beta=1.0, bandwidth_avg=10.0, delay_avg=0.5, seed=2)
    assert isinstance(c, DeviceCluster)
    assert c.num_devices == 12 and c.num_types == 4
    assert c.names == [f"dev{i}" for i in range(12)]
    off = ~np.eye(12, dtype=bool)
    assert np.array_equal(c.bandwidth, c.bandwidth.T)
    assert np.array_equal(c.delay, c.delay.T)
    assert np.all((c.speed >= 1.0) & (c.speed <= 3.0))
    inv = 1.0 / c.bandwidth[off]
    assert np.all((inv >= 0.075 - 1e-12) & (inv <= 0.125 + 1e-12))
    assert np.all((c.delay[off] >= 0.0) & (c.delay[off] <= 1.0))
    assert len(np.unique(c.delay[off])) > 1


@pytest.mark.parametrize("q", [0.0, 0.05, 0.5, 1.0])
@pytest.mark.parametrize("seed", range(5))
def test_random_cluster_every_type_and_device_covered(q: float, seed: int) -> None:
    c = random_cluster(6, num_types=8, q=q, seed=seed)
    assert c.supports.any(axis=0).all()
    assert c.supports.any(axis=1).all()
    if q == 1.0:
        assert c.supports.all()


def test_random_cluster_seed_determinism() -> None:
    a, b, c = random_cluster(seed=4), random_cluster(seed=4), random_cluster(seed=5)
    for key in ("speed", "bandwidth", "delay", "supports"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.speed, c.speed)


def test_random_cluster_places_a_generated_graph() -> None:
    g = layered_dag(30, num_types=5, seed=0)
    c = random_cluster(4, num_types=5, q=0.2, seed=0)
    assert c.check_feasible(g).any(axis=1).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_devices": 0},
        {"num_types": 0},
        {"speed_avg": 0.0},
        {"bandwidth_avg": -1.0},
        {"delay_avg": -0.1},
        {"q": 1.1},
        {"speed_beta": 2.0},
        {"bandwidth_beta": 3.0},
    ],
)
def test_random_cluster_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidCluster) as err:
        random_cluster(**kwargs)
    assert next(iter(kwargs)) in str(err.value)


# ---------------------------------------------------------------------- fixtures
def test_fixtures_structure() -> None:
    c = chain(5)
    assert c.num_nodes == 5 and c.depth == 5 and c.num_edges == 4
    f = fork(4)
    assert f.children(0).tolist() == [1, 2, 3] and f.depth == 2
    fj = fork_join(6)
    assert fj.num_edges == 8 and fj.depth == 3 and fj.parents(5).tolist() == [1, 2, 3, 4]
    d = diamond(compute=2.0, nbytes=3.0)
    assert d.meta["name"] == "diamond"
    assert d.edge_index.T.tolist() == [[0, 1], [0, 2], [1, 3], [2, 3]]
    assert d.compute.tolist() == [2.0] * 4
    assert d.feature("bytes_out").tolist() == [6.0, 3.0, 3.0, 0.0]
    assert chain(1).num_edges == 0


@pytest.mark.parametrize(("fn", "n"), [(chain, 0), (fork, 1), (fork_join, 2)])
def test_fixtures_reject_too_small(fn, n: int) -> None:
    with pytest.raises(MlsysoptError):
        fn(n)


def test_homogeneous_cluster() -> None:
    c = homogeneous_cluster(3, speed=2.0, bandwidth=4.0, delay=0.5, num_types=2)
    assert c.speed.tolist() == [2.0, 2.0, 2.0]
    assert c.supports.all() and c.num_types == 2
    assert c.comm_time(8.0, 0, 1) == pytest.approx(0.5 + 2.0)
    assert c.comm_time(8.0, 1, 1) == 0.0
    with pytest.raises(InvalidCluster):
        homogeneous_cluster(0)
