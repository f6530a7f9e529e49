"""``serving tune``'s default tuner: one rule by budget class and prior, applied by the job and shown in --help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.tuner_rule import (
    AUTO,
    FIGURES,
    RULE,
    budget_class,
    default_tuner,
    describe_rule,
    resolve_tuner,
    split_label,
)
from mlsysopt.serving.tuners import TUNERS
from mlsysopt.serving.tuning_job import WARM_TUNERS, TuningJob

#: the rule as chosen on the tuning presets (docs/methods.md, BENCHMARKS.md): a change must be a deliberate one
CHOSEN = {
    ("small", False): "rrl",
    ("medium", False): "rrl",
    ("large", False): "rrl",
    ("small", True): "rrl",
    ("medium", True): "rrl:ei",
    ("large", True): "rrl",
}


def test_budget_classes_have_the_documented_edges() -> None:
    budgets = (1, 10, 11, 30, 31, 100_000)
    assert [budget_class(b) for b in budgets] == ["small", "small", "medium", "medium", "large", "large"]
    with pytest.raises(MlsysoptError, match="--budget 0"):
        budget_class(0)


def test_the_rule_is_the_chosen_one_and_every_pick_can_run() -> None:
    assert RULE == CHOSEN
    for (cls, warm), label in RULE.items():
        name, knobs = split_label(label)
        assert name in TUNERS
        assert not warm or name in WARM_TUNERS  # a prior must reach the tuner it picks
        for budget in {"small": (1, 10), "medium": (11, 30), "large": (31, 500)}[cls]:
            assert default_tuner(budget, warm) == label and resolve_tuner(AUTO, budget, warm) == (name, knobs)
    assert split_label("rrl:ei") == ("rrl", {"acquisition": "ei"})
    assert resolve_tuner("tpe", 5) == ("tpe", {})  # a tuner the user names is kept, with no knobs
    line = describe_rule()
    assert "budget <= 10" in line and "11-30" in line and "> 30" in line


def test_auto_follows_budget_and_prior_and_resume_keeps_the_started_tuner(tmp_path) -> None:
    common = {"rates": (400.0,), "tuner": AUTO, "engine": "sim", "profile": "synthetic:4", "requests": 60}
    with TuningJob(tmp_path / "a", budget=5, **common) as job:
        assert job.tuner_name == RULE[("small", False)]
        assert "the default for a small budget" in job.describe()
    with TuningJob(tmp_path / "b", budget=40, warm=True, **common) as job:
        assert job.tuner_name == "rrl" and job.tuner.knobs.acquisition == "boltzmann"
    with TuningJob(tmp_path / "m", budget=20, warm=True, **common) as job:  # medium, with a prior: expected improvement
        assert job.tuner_name == "rrl" and job.tuner.knobs.acquisition == "ei"
        assert job.settings["tuner_knobs"] == {"acquisition": "ei"} and "expected improvement" in job.describe()
    started = tmp_path / "c"
    started.mkdir()
    (started / "settings.json").write_text(json.dumps({"tuner": "rrl", "tuner_knobs": {"acquisition": "ei"}}))
    assert TuningJob._resolve_tuner(started, AUTO, 50, False, resume=True) == ("rrl", {"acquisition": "ei"})
    assert TuningJob._resolve_tuner(started, AUTO, 50, False, resume=False) == ("rrl", {})
    assert TuningJob._resolve_tuner(started, "random", 50, True, resume=True) == ("random", {})


def test_the_figures_in_help_are_the_validation_benchmarks() -> None:
    bench = json.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "serving_tuning.json").read_text())
    shares = {}
    for key, block in bench["default_tuner"].items():
        if key != "targets":
            for tuner, share in block["share_within_5pct"].items():
                shares.setdefault(tuner, []).append((block["budget"], share))
    for tuner, figures in FIGURES.items():
        measured = tuple(round(100 * s) for _, s in sorted(shares[tuner]))
        assert figures == measured, (tuner, figures, measured)
    for (cls, warm), label in RULE.items():  # the rule's pick is the best there
        name, _, tag = label.partition(":")
        key = f"{cls}_{'warm' if warm else 'cold'}"
        assert bench["default_tuner"][key]["best"] == name + ("_warm" if warm else "") + (f":{tag}" if tag else "")
