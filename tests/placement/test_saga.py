"""saga (anrg-saga) as the baselines library: the converter, saga's HEFT against mlsysopt's, saga_best, limits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.baselines import HEFT, SagaBest, SagaScheduler, SagaSkipped, heft_schedule
from mlsysopt.placement.baselines.heft import upward_rank
from mlsysopt.placement.saga_convert import effective_link_speeds, from_saga, saga_context, time_scale, to_saga


def _zero_delay(seed: int, devices: int = 4, types: int = 1) -> PlacementProblem:
    graph = layered_dag(16, alpha=0.4, num_types=types, seed=seed)
    return PlacementProblem(graph, random_cluster(devices, num_types=types, delay_avg=0.0, seed=seed + 100))


def test_converter_keeps_costs_and_folds_the_delay_into_link_speeds() -> None:
    problem = _zero_delay(0)
    network, tasks = to_saga(problem)
    unit = time_scale(problem)
    assert len(network.nodes) == 4 and len(tasks.tasks) == problem.num_tasks
    node = network.get_node("d2")
    assert node.speed * 1.0 == pytest.approx(problem.cluster.speed[2] * unit)
    # zero delay, symmetric links: saga's link speed is the bandwidth (in saga's time unit)
    assert network.get_edge("d0", "d1").speed == pytest.approx(problem.cluster.bandwidth[0, 1] * unit)
    assert [n.name for n in network.nodes] == ["d0", "d1", "d2", "d3"]  # deterministic order: by index
    # a delay is folded in at the mean transfer size: an edge of that size costs exactly delay + bytes / bandwidth
    c = problem.cluster
    delayed = DeviceCluster(c.speed, c.supports, c.bandwidth, np.full((4, 4), 0.3))
    slow = effective_link_speeds(PlacementProblem(problem.graph, delayed))
    mean = problem.graph.edge_bytes[problem.graph.edge_bytes > 0].mean()
    assert mean / slow[0, 1] == pytest.approx(0.3 + mean / c.bandwidth[0, 1])


def test_saga_heft_places_like_mlsysopt_heft_on_zero_delay_instances() -> None:
    import saga.schedulers
    from saga.schedulers.heft import heft_rank_sort

    compared = 0
    for seed in range(8):
        problem = _zero_delay(seed)
        network, tasks = to_saga(problem)
        with saga_context(0):
            saga_order = [int(t[1:]) for t in heft_rank_sort(network, tasks)]
            placement = from_saga(saga.schedulers.HeftScheduler().schedule(network, tasks), problem).placement
        n = problem.num_tasks
        topo = np.empty(n, np.int64)
        topo[problem.graph.topo_order] = np.arange(n)
        ours = np.lexsort((topo, -upward_rank(problem))).tolist()
        if saga_order != ours:
            continue  # saga averages transfer costs over self-links too, which can reorder tasks of close rank
        compared += 1
        assert np.array_equal(placement, heft_schedule(problem)[0]), seed
    assert compared >= 3  # the comparison must not be vacuous


def test_infeasible_saga_tasks_are_repaired() -> None:
    problem = _zero_delay(1, devices=3, types=2)
    res = SagaScheduler("met").solve(problem)
    assert problem.mask[np.arange(problem.num_tasks), res.placement].all()
    assert res.info["repaired_tasks"] >= 0 and res.info["saga_makespan"] > 0


def test_saga_best_is_the_best_member_and_reports_each() -> None:
    problem = _zero_delay(2)
    res = SagaBest().solve(problem)
    members = res.info["members"]
    assert len(members) >= 15
    assert res.makespan == pytest.approx(min(m["makespan"] for m in members.values()))
    assert res.info["best"] in members and res.evaluations == len(members)
    assert res.makespan <= HEFT().solve(problem).makespan * 1.5


def test_saga_scheduler_over_its_time_estimate_is_skipped() -> None:
    problem = _zero_delay(3)
    with pytest.raises(SagaSkipped, match="estimated .* over the limit"):
        SagaScheduler("minmin", time_limit=1e-9).solve(problem)
    best = SagaBest(schedulers=("heft", "minmin"), time_limit=1e-9)
    with pytest.raises(SagaSkipped, match="no saga scheduler could run"):
        best.solve(problem)


@pytest.mark.parametrize("zero", ["all", "some"])
def test_hbmct_schedules_zero_cost_tasks(tmp_path: Path, zero: str) -> None:
    """saga's HBMCT sorted a zero-cost parent after its child (equal upward ranks) and raised KeyError: 't0'."""
    from mlsysopt.placement.baselines.saga_schedulers import saga_run

    graph = layered_dag(12, num_types=1, seed=0)
    graph.save(tmp_path / "g.npz")
    with np.load(tmp_path / "g.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    names = list(arrays["feature_names"])
    rows = slice(None) if zero == "all" else slice(0, None, 2)
    for column in ("flops", "compute"):
        arrays["x"][rows, names.index(column)] = 0.0
    np.savez(tmp_path / "zero.npz", **arrays)
    zero_graph = type(graph).load(tmp_path / "zero.npz")
    assert (zero_graph.compute[rows] == 0).all()
    problem = PlacementProblem(zero_graph, random_cluster(3, num_types=1, delay_avg=0.0, seed=1))
    run = saga_run("hbmct", problem)
    assert run.valid and len(run.placement) == problem.num_tasks
