"""Fixtures of the placement tests: the random problems they place, a layered DAG on a random cluster.

Each test file keeps its own sizes (tasks ``n``, devices ``d``, hardware ``types``, the DAG's ``alpha``/``p``)::

    def test_something(make_problem) -> None:
        p = make_problem(18, 4, seed=1, alpha=0.4)  # a PlacementProblem
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem


def layered_graph_and_cluster(
    n: int, d: int, seed: int, *, types: int = 2, alpha: float = 0.2, p: float = 0.3
) -> tuple[CompGraph, DeviceCluster]:
    """An ``n``-task layered DAG of ``types`` hardware types and a random ``d``-device cluster, both drawn from
    ``seed`` (``alpha``, ``p``: the DAG's shape and edge probability, :func:`~mlsysopt.graph.generate.layered_dag`)."""
    graph = layered_dag(n, alpha=alpha, p=p, num_types=types, seed=seed)
    return graph, random_cluster(d, num_types=types, seed=seed)


@pytest.fixture
def make_graph_and_cluster() -> Callable[..., tuple[CompGraph, DeviceCluster]]:
    """``make_graph_and_cluster(n, d, seed, types=2, alpha=0.2, p=0.3) -> (graph, cluster)``, not yet checked."""
    return layered_graph_and_cluster


@pytest.fixture
def make_problem() -> Callable[..., PlacementProblem]:
    """``make_problem(n, d, seed, types=2, alpha=0.2, p=0.3) -> PlacementProblem`` of that graph and cluster."""

    def make(n: int, d: int, seed: int, *, types: int = 2, alpha: float = 0.2, p: float = 0.3) -> PlacementProblem:
        return PlacementProblem(*layered_graph_and_cluster(n, d, seed, types=types, alpha=alpha, p=p))

    return make
