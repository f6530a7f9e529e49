"""Placement under ``ordered`` execution: HEFT's and saga's own schedules, schedules as results, schedule.json."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.problem import PlacementProblem
from schedule_helpers import simpy_ordered


def _problem(seed: int, execution: str = "ordered", delay: float | None = None, types: int = 2) -> PlacementProblem:
    graph = layered_dag(40, alpha=0.3, p=0.25, num_types=types, seed=seed)
    kw = {} if delay is None else {"delay_avg": delay}
    return PlacementProblem(graph, random_cluster(6, num_types=types, seed=seed + 50, **kw), execution)


def test_heft_is_its_own_schedule_under_ordered_and_its_map_under_fifo() -> None:
    from mlsysopt.placement.baselines import HEFT, heft_schedule
    from mlsysopt.placement.methods import heft_makespan

    for seed in range(4):
        ordered = _problem(seed)
        fifo = ordered.with_execution("fifo")
        placement, order, planned = heft_schedule(ordered)
        assert HEFT().solve(ordered).makespan == pytest.approx(planned, rel=1e-12) == heft_makespan(ordered)
        assert simpy_ordered(ordered, placement, order) == pytest.approx(planned, rel=1e-12)
        assert HEFT().solve(fifo).makespan == fifo.makespan(placement) == heft_makespan(fifo)
        res = HEFT().solve(ordered)
        assert res.execution == "ordered" and np.array_equal(res.order, order)
        assert HEFT().solve(fifo).order is None


def test_search_results_carry_the_schedule_they_were_scored_with() -> None:
    from mlsysopt.placement.methods import heft_makespan, run_method

    problem = _problem(5)
    heft = heft_makespan(problem)
    for method in ("local_search", "annealing", "saga_best"):
        res = run_method(method, problem, 200, 0)
        assert res.order is not None
        assert problem.makespan(res.placement, order=res.order) == pytest.approx(res.makespan, rel=1e-12)
        assert simpy_ordered(problem, res.placement, res.order) == pytest.approx(res.makespan, rel=1e-12)
    assert run_method("local_search", problem, 200, 0).makespan <= heft * (1 + 1e-12)  # starts from HEFT's own


def test_every_valid_saga_schedule_re_runs_to_sagas_own_makespan_on_zero_delay_instances() -> None:
    from mlsysopt.placement.baselines.saga_schedulers import SAGA_SCHEDULERS, saga_run

    checked: set[str] = set()
    invalid: set[str] = set()
    for seed in range(2):
        graph = layered_dag(24, alpha=0.4, num_types=1, seed=seed)
        problem = PlacementProblem(graph, random_cluster(4, num_types=1, delay_avg=0.0, seed=seed + 100), "ordered")
        for name in SAGA_SCHEDULERS:
            run = saga_run(name, problem, 0, None)
            if not run.valid:
                invalid.add(name)
                continue
            # saga's own schedule (map and order) in mlsysopt's simulator: saga's makespan, to rounding
            assert problem.makespan(run.placement, order=run.order) == pytest.approx(run.saga_makespan, rel=1e-9)
            assert simpy_ordered(problem, run.placement, run.order) == pytest.approx(run.saga_makespan, rel=1e-9)
            checked.add(name)
    assert len(checked) == len(SAGA_SCHEDULERS) - len(invalid) and len(checked) >= 17
    assert invalid <= {"hbmct"}  # saga's HBMCT leaves tasks out of its schedule on some graphs


def test_link_delays_saga_approximates_them_mlsysopt_simulates_them() -> None:
    """saga has no link delay: the converter folds it into link speeds at the mean transfer size, so saga's own
    makespan is its model's; mlsysopt re-runs saga's schedule (map and order) with the delay of every transfer."""
    from mlsysopt.placement.baselines.saga_schedulers import saga_run

    problem = _problem(7, delay=0.5, types=1)
    run = saga_run("heft", problem, 0, None)
    ours = problem.makespan(run.placement, order=run.order)
    assert ours == pytest.approx(simpy_ordered(problem, run.placement, run.order), rel=1e-12)
    assert ours != pytest.approx(run.saga_makespan, rel=1e-6)


def test_a_saga_schedule_that_leaves_tasks_out_is_invalid_and_never_ranked() -> None:
    from mlsysopt.placement.baselines import SagaBest, SagaScheduler
    from mlsysopt.placement.baselines.saga_schedulers import saga_run

    for seed in range(6):
        graph = layered_dag(30, alpha=0.4, num_types=1, seed=seed)
        problem = PlacementProblem(graph, random_cluster(4, num_types=1, delay_avg=0.0, seed=seed + 100), "ordered")
        if not saga_run("hbmct", problem, 0, None).valid:
            break
    else:
        pytest.fail("no graph where saga's HBMCT leaves tasks out (the test needs one)")
    res = SagaScheduler("hbmct").solve(problem)
    assert res.info["valid"] is False and res.info["missing_tasks"] > 0
    best = SagaBest().solve(problem)
    assert "hbmct" not in best.info["members"] and best.info["skipped"]["hbmct"].startswith("invalid")


def test_the_portfolio_is_never_worse_than_heft_or_any_valid_saga_schedule() -> None:
    from mlsysopt.placement.baselines import SagaBest
    from mlsysopt.placement.methods import heft_makespan, run_method

    for seed in (8, 9):
        problem = _problem(seed, types=1)
        res = run_method("local_search", problem, 300, 0)
        assert res.makespan <= heft_makespan(problem) * (1 + 1e-12)
        assert res.makespan <= SagaBest().solve(problem).makespan * (1 + 1e-12)


def test_place_ordered_writes_a_schedule_a_script_can_follow(tmp_path) -> None:
    from mlsysopt.placement.jobs import PlaceRequest, place
    from mlsysopt.placement.problem_spec import ProblemSpec

    out = tmp_path / "p"
    spec = ProblemSpec("montage", devices=4, num_tasks=60, execution="ordered")
    outcome = place(PlaceRequest(spec, out, method="local_search", budget=150))
    assert "schedule.json" in outcome.files
    import json

    sched = json.loads((out / "schedule.json").read_text())
    result = json.loads((out / "result.json").read_text())
    assert sched["execution"] == result["execution"] == "ordered"
    assert result["comparison"]["heft_reference"].startswith("HEFT's own schedule")
    # follow the file: each device's list in order, and compare with the reported makespan
    problem = outcome.problem
    names = {n: i for i, n in enumerate(problem.graph.names)}
    devs = {n: i for i, n in enumerate(problem.cluster.names)}
    placement = np.empty(problem.num_tasks, np.int64)
    starts = np.empty(problem.num_tasks)
    for dev, tasks in sched["devices"].items():
        for t in tasks:
            placement[names[t["task"]]] = devs[dev]
            starts[names[t["task"]]] = t["start"]
    order = np.lexsort((np.arange(problem.num_tasks), starts))
    assert simpy_ordered(problem, placement, order) == pytest.approx(sched["makespan"], rel=1e-9)
    assert sched["makespan"] == pytest.approx(result["makespan"], rel=1e-12)
    with pytest.raises(Exception, match="--execution"):
        ProblemSpec("montage", devices=4, execution="static")


def test_graph_simulate_runs_a_schedule_file_in_its_order(tmp_path) -> None:
    import json

    from cli_helpers import run_inprocess

    args = ["genome", "--devices", "6", "--num-tasks", "60", "--execution", "ordered", "--budget", "80"]
    ran = run_inprocess("placement", "place", *args, "--out", "p", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    ran = run_inprocess("graph", "simulate", "genome", "--num-tasks", "60", "--cluster", "p/cluster.json",
                        "--placement", "p/schedule.json", "--out", "s", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    placed = json.loads((tmp_path / "p" / "result.json").read_text())
    simulated = json.loads((tmp_path / "s" / "result.json").read_text())
    assert simulated["makespan"] == pytest.approx(placed["makespan"], rel=1e-12)
    assert simulated["schedule"]["execution"] == "ordered" and "schedule.json" in simulated["placement_source"]


def test_order_moves_keep_the_schedule_valid_and_re_simulate_to_their_makespan() -> None:
    from mlsysopt.graph.list_schedule import ordered_args, schedule_in_priority
    from mlsysopt.placement.baselines import heft_schedule
    from mlsysopt.placement.moves import ORDER, node_ids, order_moves

    problem = _problem(11)
    placement = heft_schedule(problem)[0]
    seq = problem.simulator.sequence
    moves = order_moves(problem, placement, problem.simulate(placement), seq, node_ids(problem))
    assert moves.size > 0 and (moves.kind == ORDER).all()
    rows = np.arange(moves.size)
    places, seqs = moves.apply(placement, rows), moves.sequences(seq, rows)
    assert (places == placement).all()  # an order move keeps the map
    src, dst = problem.graph.edge_index
    for m in rows.tolist():
        pos = np.empty(problem.num_tasks, np.int64)
        pos[seqs[m]] = np.arange(problem.num_tasks)
        assert np.array_equal(np.sort(seqs[m]), np.arange(problem.num_tasks))  # every task once
        assert (pos[src] < pos[dst]).all()  # still topological
        assert abs(pos[moves.task[m]] - pos[moves.partner[m]]) == 1  # next to its partner
    makespans, orders = schedule_in_priority(ordered_args(problem.graph, problem.cluster), places, seqs)
    assert len({round(v, 9) for v in makespans}) > 1  # the order matters on this problem
    for m in rows[:: max(1, rows.size // 4)].tolist():  # a few rows through the independent SimPy executor
        assert problem.makespan(places[m], order=orders[m]) == pytest.approx(makespans[m], rel=1e-12)
        assert simpy_ordered(problem, places[m], orders[m]) == pytest.approx(makespans[m], rel=1e-9)


def test_the_search_with_order_moves_returns_the_order_it_was_scored_with() -> None:
    from mlsysopt.errors import InvalidOption
    from mlsysopt.placement import LocalSearch, SearchConfig
    from mlsysopt.placement.methods import heft_makespan

    problem = _problem(12)
    res = LocalSearch(SearchConfig(order_share=0.5), portfolio=("heft",)).solve(problem, budget=300, seed=0)
    assert res.info["search"]["accepted"]["order"] >= 1  # order moves were drawn and some were kept
    assert res.evaluations == 300 and np.all(np.diff(res.history) <= 0)
    assert res.makespan <= heft_makespan(problem) * (1 + 1e-12)
    assert problem.makespan(res.placement, order=res.order) == pytest.approx(res.makespan, rel=1e-12)
    assert simpy_ordered(problem, res.placement, res.order) == pytest.approx(res.makespan, rel=1e-9)
    with pytest.raises(InvalidOption, match="order_share"):
        SearchConfig(order_share=1.0)
