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
    choose_defaults,
    default_method,
    resolve_method,
    rule_text,
)
from mlsysopt.nas.experiment import SearchOptions, _started_with

TUNING = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "nas_tune34.json"
HELD_OUT = TUNING.with_name("nas34.json")


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


def test_the_defaults_are_the_rule_applied_to_the_tuning_study_and_the_held_out_ablation() -> None:
    """The shipped defaults are what :func:`choose_defaults` picks from benchmarks/nas.py --tune (physics, arxiv and
    proteins) and the held-out run's transfer ablation (JSON in docs)."""
    tuning = json.loads(TUNING.read_text())["tuning"]
    assert set(tuning["datasets"]) == {"physics", "arxiv", "proteins"}
    held_out = json.loads(HELD_OUT.read_text())
    assert set(held_out["settings"]["datasets"]).isdisjoint(tuning["datasets"])
    val = {b: row["val_regret"] for b, row in tuning["best_per_budget"].items()}
    assert choose_defaults(val, held_out["transfer_ablation"]) == DEFAULT_METHODS
    assert held_out["default_method"] == {str(CLASS_BUDGETS[c]): m for c, m in DEFAULT_METHODS.items()}
    from mlsysopt.nas.baselines.bananas_prior import BananasPriorConfig
    from mlsysopt.nas.epnas import HANDOVER

    assert tuning["chosen_handover"] == HANDOVER
    assert tuning["chosen_prior_init"] == BananasPriorConfig().prior_init


def test_a_prior_that_does_not_add_on_the_held_out_tables_keeps_its_method_out_of_the_defaults() -> None:
    val = {b: {"epnas": 0.1, "zero_shot": 0.2, "bananas": 0.3, "epnas_cold": 0.4} for b in ("10", "30", "100")}
    adds = {"epnas": {"adds": True}, "zero_shot": {"adds": True}}
    assert choose_defaults(val, dict.fromkeys(("10", "30", "100"), adds)) == dict.fromkeys(CLASS_BUDGETS, "epnas")
    ablation = {"10": adds, "30": {"epnas": {"adds": False}, "zero_shot": {"adds": True}}, "100": {}}
    assert choose_defaults(val, ablation) == {"small": "epnas", "medium": "zero_shot", "large": "bananas"}


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
