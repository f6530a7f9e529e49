"""The one rule for the default method (by budget class) and EPNAS's prior that fades (``handover``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import Blocks, PriorConfig, Space, Study, prior_from_records
from mlsysopt.nas.defaults import (
    BUDGET_CLASSES,
    CLASS_BUDGETS,
    DEFAULT_METHODS,
    FALLBACK,
    NEEDS_PRIOR,
    budget_class,
    default_method,
    resolve_method,
    rule_text,
)
from mlsysopt.nas.experiment import SearchOptions, _started_with

TUNING = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "nas_tune34.json"


def test_each_budget_falls_in_one_class_and_gets_that_class_default() -> None:
    assert [budget_class(b) for b in (1, 19, 20, 59, 60, 10_000)] == ["small", "small", "medium", "medium",
                                                                       "large", "large"]  # fmt: skip
    assert [name for name, _ in BUDGET_CLASSES] == list(CLASS_BUDGETS) == list(DEFAULT_METHODS)
    for name, b in CLASS_BUDGETS.items():
        assert budget_class(b) == name and default_method(b) == DEFAULT_METHODS[name]
    assert resolve_method("auto", 100) == DEFAULT_METHODS["large"] and resolve_method("tpe", 100) == "tpe"
    for name, b in CLASS_BUDGETS.items():  # a default that needs a prior gives way on a space without one
        want = FALLBACK if DEFAULT_METHODS[name] in NEEDS_PRIOR else DEFAULT_METHODS[name]
        assert resolve_method("auto", b, _space()) == want  # your own space has no prior of its own
        assert resolve_method("auto", b, _space(), prior="given") == DEFAULT_METHODS[name]
        assert resolve_method("auto", b, "my.py:space") == want  # a --space string: only the tables have a prior
        assert resolve_method("auto", b, "nasbench-graph:cora") == DEFAULT_METHODS[name]
    assert all(f"({name}): {m}" in rule_text() for name, m in DEFAULT_METHODS.items())
    with pytest.raises(MlsysoptError, match="budget must be an integer >= 1"):
        budget_class(0)


def test_the_defaults_are_the_tuning_study_s_winners() -> None:
    """The shipped rule is what benchmarks/nas.py --tune measured on physics, arxiv and proteins (JSON in docs)."""
    tuning = json.loads(TUNING.read_text())["tuning"]
    assert set(tuning["datasets"]) == {"physics", "arxiv", "proteins"}
    for name, b in CLASS_BUDGETS.items():
        assert tuning["best_per_budget"][str(b)]["method"] == DEFAULT_METHODS[name], name
    from mlsysopt.nas.epnas import HANDOVER

    assert tuning["chosen_handover"] == HANDOVER


def test_nas_search_options_resolve_auto_and_a_resume_keeps_the_method_it_began_with(tmp_path: Path) -> None:
    small, large = SearchOptions(budget=10), SearchOptions(budget=100)
    assert (small.method, small.auto) == (DEFAULT_METHODS["small"], True)
    assert large.method == DEFAULT_METHODS["large"] and not SearchOptions(method="tpe", budget=10).auto
    (tmp_path / "settings.json").write_text(json.dumps({"method": "bananas"}))
    assert _started_with(tmp_path, "epnas") == "bananas" and _started_with(tmp_path / "none", "tpe") == "tpe"


# ---------------------------------------------------------------------------- the prior that fades
def _space() -> Space:
    return Space(knobs={"lr": [0.1, 0.01, 0.001]}, blocks=Blocks({"width": [8, 16, 32], "act": ["relu", "tanh"]},
                 min=1, max=3), name="fade")  # fmt: skip


def _score(p: dict[str, Any]) -> float:
    return {0.1: 0.2, 0.01: 0.5, 0.001: 0.3}[p["lr"]] + sum(b["width"] / 64 + (b["act"] == "tanh") / 10
                                                             for b in p["blocks"]) / 3  # fmt: skip


@pytest.fixture(scope="module")
def prior() -> Any:
    first = Study(_space(), method="random", budget=40, seed=0).optimize(_score, n_trials=40)
    return prior_from_records([(first.records(), first.settings())], PriorConfig(hidden=16, epochs=40))


def test_the_prior_steps_aside_after_handover_evaluations_and_a_resume_keeps_it_so(prior: Any) -> None:
    kept = Study(_space(), method="epnas", budget=12, seed=0, prior=prior, handover=0).optimize(_score, 12)
    fades = Study(_space(), method="epnas", budget=12, seed=0, prior=prior, handover=4)
    fades.optimize(_score, 4)
    assert fades.searcher.handed and fades.searcher.predictor.scorer is None  # cold GP on the same 4 points
    assert len(fades.searcher.predictor.data) == 4 and not kept.searcher.handed
    assert [t.params for t in fades.trials] == [t.params for t in kept.trials[:4]]  # the same search until then
    state = fades.searcher.state_dict()
    again = Study(_space(), method="epnas", budget=12, seed=0, prior=prior, handover=4)
    again.searcher.load_state_dict(state)
    assert again.searcher.handed and again.searcher.predictor.scorer is None
    fades.optimize(_score, 8)
    assert [t.params for t in fades.trials] != [t.params for t in kept.trials]  # after it, the cold search's
    assert Study(_space(), method="epnas_cold", budget=5, seed=0).searcher.cfg.handover == 0
