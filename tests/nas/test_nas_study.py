"""Your own problem in the library: a declared Space, the ask/tell Study with every method, resource measures."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlsysopt.errors import InvalidArchitecture, InvalidConstraint, InvalidSpace, MlsysoptError
from mlsysopt.nas import (
    METHOD_NAMES,
    Arch,
    Blocks,
    Constraints,
    Int,
    PriorConfig,
    ResourceMeasure,
    Space,
    Study,
    get_method,
    prior_from_records,
    run_search,
    with_measures,
)
from mlsysopt.nas.spaces.base import SearchSpace


def cost(params: dict[str, Any]) -> dict[str, float]:
    return {"params": float(sum(b["width"] for b in params["blocks"]) * params["mult"])}


def space() -> Space:
    return Space(knobs={"lr": [0.1, 0.01, 0.001], "mult": Int(1, 3)},
                 blocks=Blocks({"width": [8, 16, 32], "act": ["relu", "tanh"]}, min=1, max=3),
                 resources=cost, measured=("latency_ms",), name="toy")  # fmt: skip


def score(params: dict[str, Any]) -> float:
    """A synthetic objective: wide tanh blocks and lr 0.01 are best."""
    s = {0.1: 0.2, 0.01: 0.5, 0.001: 0.3}[params["lr"]]
    return s + sum(b["width"] / 64 + (0.1 if b["act"] == "tanh" else 0.0) for b in params["blocks"]) / 3


def test_a_declared_space_decodes_to_parameters_and_back() -> None:
    sp = space()
    assert sp.decisions(2) == [3, 3, 3, 2, 3, 2] and sp.min_blocks == 1 and sp.max_blocks == 3
    assert sp.decision_names(1) == ["lr", "mult", "b1.width", "b1.act"]
    arch = Arch((1, 2, 2, 1, 0, 0), 2)
    params = sp.params(arch)
    assert params == {"lr": 0.01, "mult": 3, "blocks": [{"width": 32, "act": "tanh"}, {"width": 8, "act": "relu"}]}
    assert sp.arch_from_params(params) == arch and sp.resources(arch) == {"params": 120.0}
    assert sp.resource_names == ("params", "latency_ms")  # found by calling cost() once, plus the measured one
    knobs_only = Space(knobs={"a": [1, 2], "b": ["x", "y", "z"]})
    assert knobs_only.max_blocks == 0 and knobs_only.params(Arch((1, 2), 0)) == {"a": 2, "b": "z"}
    with pytest.raises(InvalidArchitecture, match=r"b1.width=12 is not one of \[8, 16, 32\]"):
        sp.arch_from_params({"lr": 0.1, "mult": 1, "blocks": [{"width": 12, "act": "relu"}]})
    with pytest.raises(InvalidArchitecture, match="parameters lack knob 'mult'"):
        sp.arch_from_params({"lr": 0.1, "blocks": []})


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Space(), "needs knobs, blocks or both"),
        (lambda: Space(knobs={"a": []}), "knob 'a': a choice needs at least one value"),
        (lambda: Space(knobs={"a": [1, 1]}), "given twice"),
        (lambda: Space(knobs={"a": [float("nan")]}), "not a finite number"),
        (lambda: Space(knobs={"a": [[1]]}), "choices are numbers, strings, bools or None"),
        (lambda: Space(knobs={"a": "abc"}), "needs a list of values"),
        (lambda: Int(5, 1), "needs low <= high"),
        (lambda: Int(0, 10**9), "more than 10,000 values"),
        (lambda: Blocks({"w": [1]}, min=0), "needs 1 <= min <= max"),
        (lambda: Space(knobs={"blocks": [1]}), "'blocks' is reserved"),
        (lambda: Space(knobs={"a": [1]}, resources=lambda p: {"params": "big"}), "resource 'params' is 'big'"),
        (lambda: Space(knobs={"a": [1]}, resources=lambda p: 1 / 0), "ZeroDivisionError"),
        (lambda: Space(knobs={"a": [1]}, measured=("x",), resource_names=("y",)), r"resource\(s\) \['x'\]"),
    ],
)
def test_bad_spaces_are_one_clear_error(make: Any, match: str) -> None:
    with pytest.raises(InvalidSpace, match=match):
        make()


@pytest.mark.parametrize("method", sorted(set(METHOD_NAMES) - {"zero_shot", "bananas_prior"}))  # (need a prior)
def test_every_method_runs_ask_tell_on_a_declared_space(method: str) -> None:
    study = Study(space(), constraints={"max_params": 60}, method=method, budget=14, seed=1)
    for _ in range(14):
        trial = study.ask()
        assert cost(trial.params)["params"] <= 60  # hard: infeasible by the resources function is never proposed
        study.tell(trial, score(trial.params), resources={"latency_ms": 1.0})
    assert all(t.state == "complete" and t.feasible for t in study.trials)
    assert len({str(t.params) for t in study.trials}) == 14  # never the same architecture twice
    assert study.best_value == max(t.value for t in study.trials)  # type: ignore[type-var]


def test_asks_before_tells_measured_constraints_failures_and_minimising() -> None:
    study = Study(space(), constraints={"max_latency_ms": 2.0}, method="epnas", budget=12, seed=0)
    trials = [study.ask() for _ in range(3)]  # three workers asked at once
    assert len({str(t.params) for t in trials}) == 3
    study.tell(trials[1], 0.9, resources={"latency_ms": 5.0})  # measured by training: infeasible after all
    study.tell(trials[0], None)  # failed
    study.tell(trials[2], 0.4, resources={"latency_ms": 1.0})
    assert [t.state for t in trials] == ["failed", "complete", "complete"]
    assert study.best_trial is trials[2] and trials[1].feasible is False
    with pytest.raises(MlsysoptError, match="already told"):
        study.tell(trials[2], 0.5)
    loss = Study(space(), method="random", budget=6, seed=0, direction="minimize")
    loss.optimize(lambda p: score(p), n_trials=6)
    assert loss.best_value == min(t.value for t in loss.trials)  # type: ignore[type-var]
    with pytest.raises(ZeroDivisionError):
        Study(space(), method="random").optimize(lambda p: 1 / 0, n_trials=2)
    caught = Study(space(), method="random").optimize(lambda p: 1 / 0, n_trials=2, catch=(ZeroDivisionError,))
    assert [t.state for t in caught.trials] == ["failed", "failed"]
    with pytest.raises(InvalidConstraint, match="unknown constraint 'params'"):
        Study(space(), constraints={"params": 3})
    with pytest.raises(InvalidConstraint, match="needs resource 'memory_mb'"):
        Study(space(), constraints={"max_memory_mb": 3})


def test_records_of_a_study_make_the_prior_of_the_next() -> None:
    first = Study(space(), method="random", budget=60, seed=0).optimize(score, n_trials=60)
    records = first.records()
    assert records[0]["decoded"] == first.trials[0].params and records[0]["perf"] == first.trials[0].value
    prior = prior_from_records([(records, first.settings())], PriorConfig(hidden=16, epochs=60))
    warm = Study(space(), method="epnas", budget=10, seed=0, prior=prior)
    cold = Study(space(), method="epnas_cold", budget=10, seed=0)
    for s in (warm, cold):
        s.optimize(score, n_trials=10)
    assert warm.searcher.prior is prior and cold.searcher.prior is None
    assert warm.best_value >= cold.best_value  # the prior knows which region is good from the first trial
    assert np.mean([t.value for t in warm.trials]) > np.mean([t.value for t in cold.trials])
    zero = Study(space(), method="zero_shot", budget=5, seed=0, prior=prior)
    first = prior.score([zero.ask().params])[0]  # the prior's favourite of its 5,000 candidates
    assert first >= max(prior.score([space().params(a) for a in _all(space())]))
    with pytest.raises(MlsysoptError, match="needs a transfer prior"):
        Study(space(), method="zero_shot")
    started = Study(space(), method="bananas_prior", budget=12, seed=0, prior=prior)  # its 6 starts: zero_shot's 6
    zero = Study(space(), method="zero_shot", budget=12, seed=0, prior=prior)
    assert [started.ask().params for _ in range(6)] == [zero.ask().params for _ in range(6)]
    with pytest.raises(MlsysoptError, match="needs a transfer prior: .* or use bananas"):
        Study(space(), method="bananas_prior")


def _all(sp: Space) -> list[Arch]:
    rng = np.random.default_rng(0)
    return [sp.sample(rng) for _ in range(50)]


class Memory(ResourceMeasure):
    names = ("memory_mb",)
    costly = True

    def __init__(self) -> None:
        self.calls = 0

    def measure(self, space: SearchSpace, arch: Arch) -> dict[str, float]:
        self.calls += 1
        return {"memory_mb": float(sum(arch.choices))}


def test_a_resource_measure_plugs_into_any_space() -> None:
    from test_methods import FakeSpace

    mem = Memory()
    sp = with_measures(FakeSpace(), [mem])
    assert sp.resource_names[-1] == "memory_mb" and "memory_mb" in sp.costly_resources
    cons = Constraints.from_limits(max_memory_mb=4, max_params=6)
    result = run_search(get_method("evolution", sp, cons, budget=15, seed=0), workers=2)
    assert result.history and all(ev.resources["memory_mb"] <= 4 for ev in result.history)
    assert all("memory_mb" in ev.resources for ev in result.history)  # the records hold the measured figure
    plain = with_measures(FakeSpace(), [Memory()])
    run_search(get_method("random", plain, Constraints.from_limits(max_params=6), budget=5, seed=0))
    assert plain.measures[0].calls == 5  # type: ignore[attr-defined]  # only to complete the records: never to filter


def test_a_non_finite_or_negative_resource_is_refused_and_the_trial_stays_open() -> None:
    from mlsysopt.nas import Study
    from mlsysopt.nas.spaces.nasbench_graph import NasBenchGraphSpace

    study = Study(NasBenchGraphSpace("cora"), method="random", budget=3, seed=0)
    trial = study.ask()
    for bad in (float("nan"), float("inf"), -1.0, "3"):
        with pytest.raises(MlsysoptError, match=rf"trial 0: resource 'latency_ms' is {bad!r}"):
            study.tell(trial, 0.8, {"latency_ms": bad})
    assert trial.state == "running"
    assert study.tell(trial, 0.8, {"latency_ms": 1.5}).state == "complete"


def test_asking_past_the_budget_warns_once() -> None:
    import warnings

    from mlsysopt.errors import MlsysoptWarning
    from mlsysopt.nas import Study
    from mlsysopt.nas.spaces.nasbench_graph import NasBenchGraphSpace

    study = Study(NasBenchGraphSpace("cora"), method="random", budget=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        study.ask(), study.ask()
    with pytest.warns(MlsysoptWarning, match="trial 2 is past the budget of 2"):
        study.ask()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        study.ask()  # once
