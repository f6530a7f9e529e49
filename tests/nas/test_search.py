"""The search driver: retries, failures, NaN, hard constraints, no feasible architecture, budget, resume, errors."""

from __future__ import annotations

import itertools
import json
import math
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest
import torch
from test_methods import CostlySpace, FakeSpace, constraints

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import (
    METHOD_NAMES,
    Arch,
    Constraint,
    Constraints,
    Evaluation,
    Searcher,
    SearcherConfig,
    evaluate_one,
    get_method,
    run_search,
)
from mlsysopt.runtime import Executor, LocalExecutor


def test_failing_evaluation_is_retried_once() -> None:
    space = FakeSpace(flaky=1)  # the very first evaluation raises, its retry succeeds
    result = run_search(get_method("random", space, constraints(), budget=6, seed=0), workers=2)
    assert len(result.history) == 6 and result.failed == 0
    first = result.history[0]
    assert first.ok and first.extra["retried"] and "boom" in first.extra["first_error"]
    assert space.calls == 7  # 6 evaluations + 1 retry


def test_permanent_failure_is_recorded_and_the_search_goes_on() -> None:
    space, cons = FakeSpace(), constraints()
    probe = get_method("random", space, cons, budget=8, seed=5)
    doomed = probe.ask(1)[0]  # the first candidate seed 5 proposes
    space.fail = {doomed}
    result = run_search(get_method("random", space, cons, budget=8, seed=5), workers=3)
    assert len(result.history) == 9  # recorded as failed; the budget counts the 8 successful evaluations
    counted = run_search(get_method("random", space, cons, budget=8, seed=5), workers=3, count_failed=True)
    assert len(counted.history) == 8 and counted.failed == 1  # asked for: the failure uses up the budget too
    bad = [ev for ev in result.history if not ev.ok]
    assert [ev.arch for ev in bad] == [doomed] and result.failed == 1
    assert "RuntimeError: boom" in bad[0].error and bad[0].extra["retried"]
    assert math.isnan(bad[0].perf)
    assert result.best is not None and result.best.ok


def test_nan_performance_is_a_failure() -> None:
    space = FakeSpace()
    arch = Arch((0, 0, 0), 1)
    space.nan = {arch}
    ev = evaluate_one(space, arch, 0)
    assert not ev.ok and math.isnan(ev.perf) and "non-finite" in ev.error
    ok = evaluate_one(space, Arch((0, 0, 1), 1), 0)
    assert ok.ok and ok.perf == space.true_perf(Arch((0, 0, 1), 1))


def test_no_feasible_architecture_returns_none_and_says_why() -> None:
    space = FakeSpace()
    cons = Constraints([Constraint("max_params", 0.5), Constraint("max_latency_ms", 100)])  # params >= 1 always
    for method in ("random", "epnas", "tpe"):
        result = run_search(get_method(method, space, cons, budget=10, seed=0), workers=2)
        assert result.best is None and result.history == []
        assert "never met params <= 0.5" in result.message and "latency" not in result.message


def test_constraints_met_separately_but_never_together() -> None:
    space = FakeSpace()  # intensity = params in the fake space: each constraint alone is satisfiable, not both
    cons = Constraints([Constraint("max_params", 4), Constraint("min_intensity", 5)])
    result = run_search(get_method("random", space, cons, budget=5, seed=0))
    assert result.best is None and "no architecture met all constraints at once" in result.message


def test_hard_mode_never_evaluates_an_infeasible_proposal() -> None:
    class Careless(Searcher[SearcherConfig]):
        name = "careless"

        def setup(self) -> None:
            self.queue = [Arch((2, 2, 2), 1), Arch((0, 0, 0), 1)]  # the first breaks max_params <= 5
            self.told: list[Evaluation] = []

        def ask(self, n: int) -> list[Arch]:
            out, self.queue = self.queue[:n], self.queue[n:]
            return out

        def tell(self, evals: list[Evaluation]) -> None:
            self.told += evals

    space = FakeSpace()
    s = Careless(space, constraints(), budget=2)
    result = run_search(s, workers=2)
    assert [ev.arch for ev in result.history] == [Arch((0, 0, 0), 1)]
    assert result.skipped == 1 and space.calls == 1
    refused = [ev for ev in s.told if not ev.ok]
    assert refused[0].arch == Arch((2, 2, 2), 1) and "infeasible" in refused[0].error


def test_soft_mode_evaluates_everything_and_maximises_the_soft_reward() -> None:
    space, cons = FakeSpace(), constraints("soft")
    result = run_search(get_method("random", space, cons, budget=30, seed=1), workers=3)
    assert len(result.history) == 30
    assert any(not cons.feasible(ev.resources) for ev in result.history)
    best_reward = max(cons.reward(ev.perf, ev.resources) for ev in result.history)
    assert cons.reward(result.best.perf, result.best.resources) == best_reward


def test_result_is_json_ready_and_best_so_far_is_monotone() -> None:
    result = run_search(get_method("evolution", FakeSpace(), constraints(), budget=12, seed=0), workers=2)
    d = json.loads(json.dumps(result.to_dict()))
    assert d["evaluations"] == 12 and d["best"]["perf"] == result.best.perf and d["best_decoded"]
    curve = result.best_so_far()
    assert len(curve) == 12 and all(b >= a for a, b in itertools.pairwise(curve) if not math.isnan(a))


@pytest.mark.parametrize("method", sorted(METHOD_NAMES))
def test_resume_from_checkpoint_gives_the_same_result(method: str, tmp_path: Path) -> None:
    space, cons = FakeSpace(), constraints()
    knobs = {"warmup": 4} if method == "epnas" else {}
    full = run_search(get_method(method, space, cons, budget=14, seed=2, **knobs), workers=3)

    class Crash(Exception):
        pass

    def crash_at_8(ev: Evaluation, i: int) -> None:
        if i == 8:
            raise Crash

    ckpt = tmp_path / "search.pt"
    with pytest.raises(Crash):
        run_search(
            get_method(method, space, cons, budget=14, seed=2, **knobs), workers=3, checkpoint=ckpt, on_eval=crash_at_8
        )
    assert ckpt.exists()
    resumed = run_search(get_method(method, space, cons, budget=14, seed=2, **knobs), workers=3, checkpoint=ckpt)
    assert [ev.arch for ev in resumed.history] == [ev.arch for ev in full.history]
    assert [ev.perf for ev in resumed.history] == [ev.perf for ev in full.history]
    assert resumed.best.arch == full.best.arch


def test_checkpoint_of_another_search_is_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "c.pt"
    run_search(get_method("random", FakeSpace(), constraints(), budget=2, seed=0), checkpoint=ckpt)
    with pytest.raises(MlsysoptError, match="checkpoint is for method 'random', not 'evolution'"):
        run_search(get_method("evolution", FakeSpace(), constraints(), budget=2, seed=0), checkpoint=ckpt)
    old = torch.load(ckpt, weights_only=True)
    torch.save({**old, "version": 1}, tmp_path / "v1.pt")  # an earlier format: refused by name, not a KeyError
    with pytest.raises(MlsysoptError, match="not a search checkpoint of version 2"):
        run_search(get_method("random", FakeSpace(), constraints(), budget=2, seed=0), checkpoint=tmp_path / "v1.pt")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(MlsysoptError, match="not a readable checkpoint"):
        run_search(get_method("random", FakeSpace(), constraints(), budget=2), checkpoint=tmp_path / "junk.pt")


@pytest.mark.parametrize("budget", [0, -3, 2.5])
def test_bad_budget(budget: float) -> None:
    with pytest.raises(MlsysoptError, match="budget must be an integer >= 1"):
        get_method("random", FakeSpace(), constraints(), budget=budget)


def test_unknown_method_and_knob() -> None:
    with pytest.raises(MlsysoptError, match="unknown NAS method 'darts'.*epnas"):
        get_method("darts", FakeSpace())
    with pytest.raises(MlsysoptError, match="unknown knob.*'epnas': candidatez"):
        get_method("epnas", FakeSpace(), candidatez=3)
    with pytest.raises(MlsysoptError, match="workers must be >= 1"):
        run_search(get_method("random", FakeSpace()), workers=0)


def test_parallel_evaluation_in_a_process_pool_matches_serial() -> None:
    space, cons = FakeSpace(), constraints()
    serial = run_search(get_method("epnas", space, cons, budget=6, seed=1), workers=2)
    with LocalExecutor(2) as pool:
        parallel = run_search(get_method("epnas", space, cons, budget=6, seed=1), pool, workers=2)
    assert [ev.arch for ev in parallel.history] == [ev.arch for ev in serial.history]
    assert parallel.failed == 0 and parallel.best.perf == serial.best.perf


@pytest.mark.parametrize("method", sorted(METHOD_NAMES))
def test_costly_resources_are_fetched_late_and_only_when_constrained(method: str) -> None:
    space, cons = CostlySpace(), constraints()  # params <= 5 (cheap) and latency <= 2.4 (costly)
    result = run_search(get_method(method, space, cons, budget=24, seed=3), workers=3)
    assert result.best is not None and cons.feasible(space.resources(result.best.arch))
    assert all(cons.feasible(space.resources(ev.arch)) for ev in result.history)
    # c-TPE is told every constraint's value, so it needs the latency of all it suggests; local search evaluates
    # every neighbour that passes params, so it times each one (just before proposing it)
    if method not in ("tpe", "local_search"):
        assert space.timed < 0.55 * space.cheap, (space.timed, space.cheap)  # only candidates passing params
    else:
        assert space.timed <= space.cheap, (space.timed, space.cheap)
    space = CostlySpace()
    result = run_search(get_method(method, space, Constraints([Constraint("max_params", 5)]), budget=8, seed=3))
    assert len(result.history) == 8 and space.timed == 0  # no latency constraint: no latency fetched at all


def test_a_costly_constraint_nobody_looked_at_is_not_reported_as_never_met() -> None:
    space = CostlySpace()
    cons = Constraints([Constraint("max_params", 0.5), Constraint("max_latency_ms", 100)])
    result = run_search(get_method("epnas", space, cons, budget=4, seed=0))
    assert result.best is None and space.timed == 0
    assert "never met params <= 0.5" in result.message and "latency" not in result.message


@pytest.mark.parametrize("method", sorted(METHOD_NAMES))
def test_a_costly_limit_nothing_meets_stops_the_search_early_with_the_closest_value(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predicted latency costs ~0.05 s: 3 asks of 2,000 draws each under an unmeetable limit took minutes."""
    monkeypatch.setattr("mlsysopt.nas.candidates.UNREACHABLE_AFTER", 10)  # the fake space has 270 architectures
    space = CostlySpace()
    cons = Constraints([Constraint("max_params", 5), Constraint("max_latency_ms", 1e-9)], mode="hard")
    searcher = get_method(method, space, cons, budget=10, seed=0)
    result = run_search(searcher, workers=2)
    assert result.stopped == "unreachable" and result.history == [] and result.best is None, result.message
    assert 10 <= searcher.costly_checked <= space.timed < 20  # stopped at the first miss after 10 checks
    closest = min(space.resources(a)["latency_ms"] for a in searcher._full)
    assert searcher.closest["max_latency_ms"][1] == closest
    assert f"max_latency_ms (limit 1e-09; the closest was latency_ms {closest:.4g})" in result.message
    assert "--max-latency-ms" in result.message and result.message.startswith("stopped early: none of the")
    # a limit some architectures meet (74 of 270) is never called out of reach, nor one in soft mode
    space = CostlySpace()
    result = run_search(get_method(method, space, constraints(), budget=24, seed=0), workers=2)
    assert result.stopped == "budget" and len(result.history) == 24
    soft = Constraints(cons.constraints, mode="soft")
    result = run_search(get_method(method, CostlySpace(), soft, budget=6, seed=0), workers=2)
    assert result.stopped == "budget" and len(result.history) == 6


class BrokenExecutor(Executor):
    """Raises on the first ``failures`` calls of ``map``, then evaluates in-process."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def map(self, fn: Any, items: Any) -> list[Any]:
        self.calls += 1
        if self.calls <= self.failures:
            raise BrokenProcessPool("A process in the process pool was terminated abruptly")
        return [fn(x) for x in items]


def test_a_broken_executor_stops_the_search_with_a_clear_error(tmp_path: Path) -> None:
    ex = BrokenExecutor(failures=1)  # the first batch breaks once; its retry (one call per candidate) works
    result = run_search(get_method("random", FakeSpace(), constraints(), budget=6, seed=0), ex, workers=2)
    assert result.failed == 0 and len(result.history) == 6 and result.history[0].extra["retried"]
    ckpt = tmp_path / "s.pt"
    ex = BrokenExecutor(failures=10**6)
    with pytest.raises(MlsysoptError, match=r"executor failed on 3 batches in a row.*BrokenProcessPool.*s\.pt"):
        run_search(get_method("random", FakeSpace(), constraints(), budget=50, seed=0), ex, workers=2, checkpoint=ckpt)
    assert ex.calls == 3 * 3  # each batch: one call, then one retry per candidate; then the driver gives up
    resumed = run_search(get_method("random", FakeSpace(), constraints(), budget=8, seed=0), checkpoint=ckpt)
    assert len(resumed.history) == 14 and resumed.failed == 6  # the 3 broken batches stay recorded as failed
    assert sum(ev.ok for ev in resumed.history) == 8  # and do not use up the budget


def test_a_worker_that_dies_fails_its_candidate_alone() -> None:
    space, cons = FakeSpace(), constraints()
    doomed = get_method("random", space, cons, budget=6, seed=5).ask(1)[0]
    space.exit_on = {doomed}
    with LocalExecutor(2) as pool:
        result = run_search(get_method("random", space, cons, budget=6, seed=5), pool, workers=2)
    bad = [ev for ev in result.history if not ev.ok]
    assert [ev.arch for ev in bad] == [doomed] and len(result.history) == 7  # 6 successful + 1 failed
    assert "ExecutorLost: a worker process died" in bad[0].error and bad[0].extra["retried"]
    assert result.best is not None and result.best.ok
