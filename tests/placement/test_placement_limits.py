"""Size limits from memory and time (before anything is allocated) and the wall-clock timeout of a search."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.placement import GiPH, run_method
from mlsysopt.placement.base import Evaluator, TimeUp
from mlsysopt.placement.limits import (
    TIME_LIMIT_S,
    check_devices,
    check_num_tasks,
    check_search,
    episode_bytes,
    memory_limit,
)
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_memory_estimate_grows_with_every_size_and_the_limit_is_this_machines() -> None:
    base = episode_bytes(50, 20, 32)
    assert episode_bytes(100, 20, 32) > 2 * base and episode_bytes(50, 40, 32) > base
    assert episode_bytes(50, 20, 64) == 2 * base
    # one measured point: 200 tasks x 10 devices x 32 hidden took ~10 GB of RSS; the estimate must not be below it
    assert episode_bytes(200, 10, 32) >= 10e9
    assert 2**28 < memory_limit() < 2**50


@pytest.mark.parametrize(
    ("check", "needle"),
    [
        (lambda: check_devices(10**7), r"--devices 10000000: .* at most --devices \d+"),
        (lambda: check_devices(10**13), "beyond any limit"),
        (lambda: check_num_tasks(10**9), r"--num-tasks 1000000000: .* at most --num-tasks \d+"),
        (lambda: check_search(10**5, 10**6, 10**4, 10, hidden=32), "GiPH's gpNet need an estimated"),
        (lambda: check_search(100, 300, 8, 10**12, runs=18), r"over the limit of 7 days; at most --budget \d+"),
    ],
)
def test_oversized_problems_are_refused_naming_the_limit(check, needle: str) -> None:
    with pytest.raises(InvalidOption, match=needle):
        check()


def test_ordinary_sizes_pass_and_a_timeout_bounds_the_time_estimate() -> None:
    check_devices(64)
    check_num_tasks(10_000)
    check_search(1000, 3000, 32, 2000, runs=18, hidden=32)
    check_search(100, 300, 8, 10**12, runs=18, timeout=TIME_LIMIT_S / 100)  # the timeout caps each search


@pytest.mark.parametrize("method", ["random", "annealing", "eft_greedy", "giph"])
def test_a_search_stops_at_its_timeout_with_the_best_placement_so_far(method: str, make_problem) -> None:
    p = make_problem(40, 6, seed=3)
    giph = GiPH(GiPHPolicy(PolicyConfig(hidden=8)))
    t0 = time.perf_counter()
    res = run_method(method, p, budget=10**7, seed=1, giph=giph, timeout=0.3)
    assert time.perf_counter() - t0 < 5
    assert res.stopped_by == "timeout" and 1 <= res.evaluations < 10**7
    assert res.makespan == min(res.history) == p.makespan(res.placement)
    full = run_method(method, p, budget=5, seed=1, giph=giph, timeout=60)
    assert full.stopped_by == "budget" and full.evaluations <= 5
    assert full.history == run_method(method, p, budget=5, seed=1, giph=giph).history  # a timeout changes nothing


def test_the_first_evaluation_always_runs_and_then_the_evaluator_refuses(make_problem) -> None:
    p = make_problem(40, 6, seed=3)
    ev = Evaluator(p, budget=100, timeout=1e-9)
    time.sleep(0.01)
    assert ev.remaining == 100  # nothing evaluated yet
    ev(p.random_placement(np.random.default_rng(0)))
    assert ev.remaining == 0 and ev.timed_out
    with pytest.raises(TimeUp):
        ev(p.random_placement(np.random.default_rng(1)))
    assert ev.result("random").stopped_by == "timeout"
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(MlsysoptError, match="timeout must be a finite number"):
            Evaluator(p, budget=10, timeout=bad)


def test_a_batch_that_passes_its_check_is_evaluated_even_if_the_deadline_passes_meanwhile(
    monkeypatch: pytest.MonkeyPatch, make_problem
) -> None:
    """The deadline was read twice per batch: passing in between gave an empty batch (the search then crashed)."""
    import mlsysopt.placement.base as base

    p = make_problem(40, 6, seed=3)
    rng = np.random.default_rng(0)
    ev = Evaluator(p, budget=100, timeout=60)
    ev(p.random_placement(rng))
    clock = iter([0.0, 1e9, 1e9, 1e9])  # the check sees time left; any later read sees the deadline passed
    monkeypatch.setattr(base.time, "monotonic", lambda: next(clock) + (ev.deadline or 0) - 30)
    ms = ev.batch(np.stack([p.random_placement(rng) for _ in range(4)]))
    assert ms.shape == (4,) and len(ev.history) == 5


@pytest.mark.parametrize("seeds", [0, 1001, 100_000])
def test_seeds_are_bounded_up_front_with_the_bound_named(seeds: int, tmp_path) -> None:
    from mlsysopt.errors import InvalidOption
    from mlsysopt.placement.jobs import AdaptRequest, CompareRequest
    from mlsysopt.placement.problem_spec import ProblemSpec

    spec = ProblemSpec("montage", devices=4)
    with pytest.raises(InvalidOption, match=rf"--seeds {seeds:,}: must be between 1 and 1,000"):
        CompareRequest(spec, tmp_path / "c", ("heft",), seeds=seeds)
    with pytest.raises(InvalidOption, match=rf"--seeds {seeds:,}: must be between 1 and 1,000"):
        AdaptRequest(spec, tmp_path / "a", remove=("dev1",), seeds=seeds)
    assert not (tmp_path / "c").exists() and not (tmp_path / "a").exists()
