"""EPNAS: stage budgets, progression, predictor ranking in ask, penalties for infeasible samples, exact state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_methods import CostlySpace, FakeSpace, best_feasible, constraints

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import EPNAS, EPNASConfig, Stages, get_method, run_search, stage_budgets
from mlsysopt.nas.spaces.base import Arch, Evaluation
from mlsysopt.nas.spaces.nasbench_graph import NasBenchGraphSpace
from mlsysopt.nas.stages import resolve_split


def test_stage_budgets() -> None:
    assert stage_budgets(100, 4, "linear") == [10, 20, 30, 40]
    assert stage_budgets(10, 3, "equal") == [3, 3, 4]
    assert stage_budgets(7, 3, "last") == [0, 0, 7]
    assert stage_budgets(5, 1) == [5]
    assert sum(stage_budgets(101, 4)) == 101
    with pytest.raises(MlsysoptError, match="unknown stage_split 'cosine'"):
        stage_budgets(10, 2, "cosine")
    # "auto" (the default): everything in the last stage only where it contains the smaller architectures
    assert resolve_split(FakeSpace(), "auto") == "linear" and resolve_split(FakeSpace(), "equal") == "equal"
    assert resolve_split(NasBenchGraphSpace("cora"), "auto") == "last"  # fewer blocks = skip nodes of a 4-node cell
    assert Stages.for_space(FakeSpace(), 30, "auto").quota == [10, 20]


def test_stages_carry_leftover_budget_forward() -> None:
    st = Stages([1, 2, 3], [2, 3, 5])
    st.consume(2)
    assert st.blocks == 2
    st.consume(1)
    assert st.advance() and st.blocks == 3 and st.quota == [2, 1, 7]
    assert not st.advance() and st.last
    st.consume(100)
    assert st.blocks == 3  # the last stage never ends
    assert Stages([1, 2], [0, 4]).blocks == 2  # an empty stage is skipped


def test_search_progresses_from_min_to_max_blocks() -> None:
    space, cons = FakeSpace(), constraints()
    result = run_search(EPNAS(space, cons, budget=30, seed=0), workers=2)
    blocks = [ev.arch.blocks for ev in result.history]
    assert len(blocks) == 30 and blocks == sorted(blocks)
    assert blocks.count(1) == 10 and blocks.count(2) == 20  # the linear split of 30 over 2 stages


def test_exhausted_stage_hands_its_budget_on() -> None:
    space, cons = FakeSpace(), constraints()  # only 23 feasible one-block architectures
    result = run_search(EPNAS(space, cons, budget=60, seed=0, config=EPNASConfig(stage_split="equal")), workers=3)
    blocks = [ev.arch.blocks for ev in result.history]
    assert len(blocks) == 60 and blocks.count(1) == 23


def test_ask_returns_the_top_predicted_candidates() -> None:
    space, cons = FakeSpace(), constraints()
    s = EPNAS(space, cons, budget=40, seed=1, config=EPNASConfig(warmup=4))
    run_search(s, workers=4)  # 40 evaluations: the predictor is fitted
    assert s.predictor.fitted
    pool = [a for a in space.all_archs() if a.blocks == 2 and s.admissible(a)]
    s._candidates = lambda n: list(pool)  # type: ignore[method-assign]
    mean, std = s.predictor.predict_dist(pool)
    chosen = s.ask(3)  # ranked by mean + ucb * std (ucb 0.5 by default)
    assert chosen == [pool[i] for i in np.argsort(-(mean + s.cfg.ucb * std), kind="stable")[:3]]


def test_costly_constraints_are_checked_lazily_in_predicted_order() -> None:
    space, cons = CostlySpace(), constraints()  # params (cheap) and latency (costly, counted)
    s = EPNAS(space, cons, budget=40, seed=1, config=EPNASConfig(warmup=4))
    run_search(s, workers=4)
    pool = [a for a in space.all_archs() if a.blocks == 2 and s.admissible(a, costly=False)]
    mean, std = s.predictor.predict_dist(pool)
    order = np.argsort(-(mean + s.cfg.ucb * std), kind="stable")
    ranked = [pool[i] for i in order]
    ok = [a for a in ranked if cons.feasible(space.resources(a))]
    prefix = ranked[: ranked.index(ok[2]) + 1]  # what must be checked to find the 3 best-predicted feasible ones
    assert 3 < len(prefix) < len(pool)  # the test exercises both skipping and stopping early
    s._candidates = lambda n: list(pool)  # type: ignore[method-assign]
    s.policy.infeasible, timed = [], space.timed
    assert s.ask(3) == ok[:3]
    assert s.policy.infeasible == [a for a in prefix if a not in ok]  # rejected ones feed the controller's penalty
    assert 0 < space.timed - timed <= len(prefix)  # latency looked up for (at most) the checked prefix only


def test_a_costly_limit_nothing_meets_ends_the_search_after_a_bounded_number_of_checks() -> None:
    """A predicted latency costs ~0.05 s: walking every 500-candidate pool for an unmeetable limit took minutes."""
    from mlsysopt.nas.constraints import Constraint, Constraints
    from mlsysopt.nas.epnas import COSTLY_CHECKS, RESAMPLES
    from mlsysopt.nas.search import PATIENCE

    space = CostlySpace()
    cons = Constraints([Constraint("max_params", 5), Constraint("max_latency_ms", 1e-9)], mode="hard")
    s = EPNAS(space, cons, budget=10, seed=0)
    pool = [a for a in space.all_archs() if a.blocks == 2 and s.admissible(a, costly=False)]
    assert len(pool) > COSTLY_CHECKS  # 96 fake architectures pass the cheap limit
    assert s._pick(pool, 3) == [] and space.timed == COSTLY_CHECKS  # one pool: at most COSTLY_CHECKS looked up
    space = CostlySpace()
    result = run_search(EPNAS(space, cons, budget=10, seed=0), workers=2)
    assert result.history == [] and result.stopped == "exhausted"
    assert 0 < space.timed <= PATIENCE * RESAMPLES * COSTLY_CHECKS
    assert "never met latency_ms <= 1e-09" in result.message


def test_infeasible_samples_get_the_penalty_in_the_controller_update() -> None:
    space, cons = FakeSpace(), constraints()
    s = EPNAS(space, cons, budget=12, seed=0, config=EPNASConfig(penalty=-2.0))
    updates = []
    real = s.policy.pg.update

    def spy(choices, rewards, penalised, penalty):
        updates.append((list(choices), list(rewards), list(penalised), penalty))
        return real(choices, rewards, penalised, penalty)

    s.policy.pg.update = spy  # type: ignore[method-assign]
    result = run_search(s, workers=3)
    assert len(updates) == 4
    perf = {ev.arch.choices: ev.perf for ev in result.history}
    for choices, rewards, penalised, penalty in updates:
        assert len(choices) == 3 and rewards == [perf[c] for c in choices]  # hard mode: reward = performance
        assert 1 <= len(penalised) <= 3  # most samples break the constraints; at most as many as evaluated
        for c in penalised:
            assert not cons.feasible(space.resources(Arch(tuple(c), (len(c) - 1) // 2)))
        assert penalty == -2.0


def test_state_dict_resumes_exactly() -> None:
    space, cons = FakeSpace(), constraints()
    a = EPNAS(space, cons, budget=30, seed=4, config=EPNASConfig(warmup=3))
    run_search(a, workers=2)
    b = EPNAS(space, cons, budget=30, seed=4, config=EPNASConfig(warmup=3))
    b.load_state_dict(a.state_dict())
    assert a.ask(3) == b.ask(3)


def test_a_warm_start_trains_the_prior_on_earlier_records_and_resumes_exactly() -> None:
    from test_methods import fake_records

    records, settings = fake_records(seed=5)
    histories = [{"study": "earlier", "settings": settings, "records": records}]
    space, cons = FakeSpace(), constraints()
    a = EPNAS(space, cons, budget=20, seed=1)
    assert a.warm_start(histories) == len(records)
    assert a.prior.tasks == ["earlier"]  # FakeSpace has no tables of its own: the records alone
    run_search(a, workers=2)
    b = EPNAS(space, cons, budget=20, seed=1)
    b.load_state_dict(a.state_dict())  # the warm prior comes back from the state, not from the store
    assert b.prior.tasks == a.prior.tasks and a.ask(2) == b.ask(2)
    with pytest.raises(MlsysoptError, match="no usable evaluation"):
        EPNAS(space, cons).warm_start([{"study": "x", "settings": {}, "records": [{"ok": False}]}])


def test_a_fixed_round_size_makes_the_search_independent_of_the_workers(tmp_path: Path) -> None:
    space, cons = FakeSpace(), constraints()
    fixed, follows = EPNASConfig(warmup=4, round_size=2), EPNASConfig(warmup=4)
    runs = {w: run_search(EPNAS(space, cons, budget=16, seed=2, config=fixed), workers=w) for w in (1, 2, 3)}
    archs = {w: [ev.arch for ev in r.history] for w, r in runs.items()}
    assert len(archs[1]) == 16 and archs[1] == archs[2] == archs[3]
    default = {w: [ev.arch for ev in run_search(EPNAS(space, cons, budget=16, seed=2, config=follows),
                                                workers=w).history]
               for w in (1, 2)}  # fmt: skip
    assert default[2] == archs[2] and default[1] != archs[1]  # round_size 0 follows the driver's batch

    class Crash(Exception):
        pass

    def crash_at_8(ev: Evaluation, i: int) -> None:  # checkpointed after 7: mid-round, half of it told, not learnt
        if i == 8:
            raise Crash

    ckpt = tmp_path / "epnas.pt"

    def fresh() -> EPNAS:
        return EPNAS(space, cons, budget=16, seed=2, config=fixed)

    with pytest.raises(Crash):
        run_search(fresh(), workers=1, checkpoint=ckpt, on_eval=crash_at_8)
    resumed = run_search(fresh(), workers=1, checkpoint=ckpt)
    assert [ev.arch for ev in resumed.history] == archs[1]


def test_epnas_finds_the_constrained_optimum_on_the_fake_space() -> None:
    space, cons = FakeSpace(), constraints()
    target = best_feasible(space, cons)
    found = [run_search(EPNAS(space, cons, budget=30, seed=s), workers=3).best.perf for s in (0, 2, 3)]
    assert sum(f == target for f in found) >= 2, f"{found} vs the optimum {target}"


def test_bad_knobs() -> None:
    with pytest.raises(MlsysoptError, match="candidates >= 1"):
        get_method("epnas", FakeSpace(), constraints(), candidates=0)
    with pytest.raises(MlsysoptError, match="round_size >= 0"):
        get_method("epnas", FakeSpace(), constraints(), round_size=-1)
    with pytest.raises(MlsysoptError, match="unknown stage_split"):
        get_method("epnas", FakeSpace(), constraints(), stage_split="fast")


def test_grow_completes_prefixes_of_the_best_architectures() -> None:
    space, cons = FakeSpace(), constraints()
    s = EPNAS(space, cons, budget=30, seed=0, config=EPNASConfig(grow=0.5, beam=2))
    assert s._prefixes(1) == []  # nothing evaluated yet
    run_search(s, workers=2)
    best = {a.choices for a, _ in sorted(s.predictor.data, key=lambda p: -p[1])[:2]}
    prefixes = s._prefixes(2)
    assert len(prefixes) == round(0.5 * s.cfg.candidates)  # a grow fraction of each batch
    for p in prefixes:
        assert any(b[: len(p)] == p for b in best)
        assert 1 <= len(p) < 5  # one-block parents are grown; two-block ones get a suffix re-sampled
