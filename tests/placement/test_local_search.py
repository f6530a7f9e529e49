"""GiPH's local search: the moves, best-of-K batches, monotonicity, restarts; the portfolio it starts from."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.placement.base import Evaluator
from mlsysopt.placement.baselines import LocalSearch, heft_schedule
from mlsysopt.placement.baselines.portfolio import run_portfolio
from mlsysopt.placement.move_search import SearchConfig, gumbel_top_k, local_search
from mlsysopt.placement.moves import CHAIN, RELOCATE, SWAP, critical_chains, move_set, node_ids, other_moves


def test_moves_are_valid_and_apply_as_named(make_problem) -> None:
    p = make_problem(18, 4, seed=1, alpha=0.4)
    placement = heft_schedule(p)[0]
    sched = p.simulate(placement)
    moves = move_set(p, placement, sched, node_ids(p))
    path = set(sched.critical_path)
    assert moves.size > 0 and set(moves.task.tolist()) <= path and (moves.tier == 0).all()
    out = moves.apply(placement, np.arange(moves.size))
    assert p.mask[np.arange(p.num_tasks)[None, :], out].all()  # every move keeps every hardware type
    for m in range(moves.size):
        changed = np.flatnonzero(out[m] != placement)
        t, d, k = int(moves.task[m]), int(moves.device[m]), int(moves.kind[m])
        assert out[m, t] == d and t in changed
        if k == RELOCATE:
            assert changed.tolist() == [t]
        elif k == SWAP:
            u = int(moves.partner[m])
            assert sorted(changed.tolist()) == sorted([t, u]) and out[m, u] == placement[t]
        else:
            assert k == CHAIN and len(changed) > 1 and set(changed.tolist()) <= path
    assert p.graph.num_nodes == placement.size
    more = other_moves(p, placement, moves, node_ids(p))
    assert more.size > moves.size and (more.tier[moves.size :] == 1).all()
    assert not set(more.task[moves.size :].tolist()) & path


def test_critical_chains_split_where_the_path_waits_for_a_device(make_problem) -> None:
    p = make_problem(18, 4, seed=2, alpha=0.4)
    sched = p.simulate(heft_schedule(p)[0])
    ids = critical_chains(p, sched.critical_path)
    assert ids.size == len(sched.critical_path) and (np.diff(ids) >= 0).all()


def test_gumbel_top_k_draws_without_replacement_in_proportion() -> None:
    rng = np.random.default_rng(0)
    picks = gumbel_top_k(np.array([0.0, 0.0, 5.0, -50.0]), 3, 1.0, rng)
    assert len(set(picks.tolist())) == 3 and 3 not in picks
    firsts = [int(gumbel_top_k(np.array([0.0, np.log(3.0)]), 1, 1.0, rng)[0]) for _ in range(2000)]
    assert np.mean(firsts) == pytest.approx(0.75, abs=0.04)


@pytest.mark.parametrize("proposals", [1, 8])
def test_search_is_monotone_spends_its_budget_and_never_loses_its_start(proposals: int, make_problem) -> None:
    p = make_problem(18, 4, seed=3, alpha=0.4)
    ev = Evaluator(p, 120)
    heft = heft_schedule(p)[0]
    start = ev(heft)
    trace = local_search(p, ev, [("heft", heft, start)], None, np.random.default_rng(0), SearchConfig(proposals))
    assert len(ev.history) == 120 and np.all(np.diff(ev.history) <= 0)
    assert ev.best_makespan <= start and trace.start == "heft" and trace.steps > 0
    assert ev.best_makespan == pytest.approx(p.makespan(ev.best_placement))


def test_search_restarts_when_every_move_was_tried(make_problem) -> None:
    p = make_problem(6, 2, seed=4, alpha=0.4)  # tiny: every move is tried quickly
    ev = Evaluator(p, 300)
    heft = heft_schedule(p)[0]
    trace = local_search(p, ev, [("heft", heft, ev(heft))], None, np.random.default_rng(0), SearchConfig(patience=1))
    assert trace.restarts >= 1 and len(ev.history) == 300


def test_portfolio_members_are_evaluated_once_best_first(make_problem) -> None:
    p = make_problem(18, 4, seed=5, alpha=0.4)
    ev = Evaluator(p, 100)
    out = run_portfolio(p, ev)
    assert {"heft", "fastest_device", "saga_cpop", "saga_best"} <= set(out.makespans)
    assert [s[2] for s in out.starts] == sorted(s[2] for s in out.starts)
    assert len(ev.history) == len(out.starts)  # one evaluation per distinct placement
    assert out.makespans["saga_best"] == min(v for k, v in out.makespans.items() if k.startswith("saga_"))
    assert out.to_dict()["best"] == out.starts[0][0]


def test_local_search_placer_never_worse_than_its_portfolio(make_problem) -> None:
    p = make_problem(18, 4, seed=6, alpha=0.4)
    res = LocalSearch().solve(p, budget=80, seed=1)
    assert res.makespan <= min(res.info["portfolio"]["makespans"].values())
    assert res.info["search"]["steps"] > 0
    assert LocalSearch().solve(p, budget=80, seed=1).history == res.history
