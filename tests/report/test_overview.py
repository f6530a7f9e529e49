"""The demo summary (headline rows against baselines, verdicts, unreadable results), the glossary and provenance."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlsysopt.report.overview import COLUMNS, GLOSSARY, Headline, glossary_section, headlines, summary_section
from mlsysopt.report.provenance import environment, git_commit


def placement_and_serving() -> dict[str, Any]:
    """The figures the summary reads, in the shapes the placement and serving demo sections write them."""
    methods = {m: {"makespan": ms} for m, ms in (("heft", 3000.0), ("giph", 3300.0), ("saga_best", 2700.0))}
    return {
        "placement": {
            "cp_min": 1500.0,
            "methods": methods,
            "training": {"policy_used": "the shipped pretrained policy (benchmark training)"},
            "adaptation": {"removed": ["dev5", "dev4"], "makespans": {"GiPH adapt": 4000.0, "HEFT re-run": 4000.0}},
        },
        "serving_real": {
            "verdict": {"decision": "use the pick", "gain": 0.75, "pick_value": 5.0, "default_value": 20.0}
        },
        "serving_sim": {
            "budget": 30,
            "preset": {"name": "mobilenet@16"},
            "tuners": {
                "rrl_warm": {"evals_to_5pct": 2},
                "gp": {"evals_to_5pct": 12},
                "gp_warm": {"evals_to_5pct": None},
            },
        },
    }


def test_rows_values_and_verdicts() -> None:
    rows, errors = headlines(placement_and_serving())
    assert errors == []
    got = {(h.system, h.measure, h.ours): (h.ours_value, h.baseline_value, h.verdict()) for h in rows}
    assert got == {
        ("placement", "SLR (makespan / CP_MIN), fifo", "GiPH (shipped policy)"): (2.2, 2.0, "no (10.0% higher)"),
        ("placement", "SLR (makespan / CP_MIN), fifo", "best saga scheduler"): (1.8, 2.0, "yes (10.0% lower)"),
        ("placement", "makespan after losing 2 devices", "GiPH adapt"): (4000.0, 4000.0, "tie"),
        ("serving", "mean latency, confirmed (median of interleaved rounds)", "RRL's pick"): (
            5.0,
            20.0,
            "yes (75.0% lower, intervals apart)",
        ),
        (
            "serving",
            "measurements to within 5% of the optimum (31 = not within 30)",
            "RRL warm-started from the prior",
        ): (2.0, 31.0, "yes (93.5% lower)"),
    }
    sim = [h for h in rows if h.unit == "measurements"]
    assert [h.baseline for h in sim] == ["Optuna GP (cold)", "Optuna GP warm-started, same prior"]
    assert [h.baseline_value for h in sim] == [12.0, 31.0]
    assert [h.unit for h in rows] == ["ratio", "ratio", "s", "ms", "measurements", "measurements"]
    assert rows[0].data.startswith("synthetic") and rows[3].data.startswith("real")
    table = summary_section(rows)
    assert table.anchor == "summary" and table.columns == COLUMNS
    assert all(len(r) == len(COLUMNS) for r in table.table)  # type: ignore[union-attr]


def test_higher_is_better_no_baseline_and_missing_values() -> None:
    opa = Headline("cost model", "held-out OPA", "fraction of pairs", "GST+EFD", 0.66, "full graph", 0.6, False, "")
    assert opa.verdict() == "yes (10.0% higher)"
    alone = Headline("NAS", "test accuracy", "accuracy (0-1)", "EPNAS", 0.93, "", None, False, "")
    assert alone.verdict() == "no baseline in the demo" and alone.row()[5:7] == ["-", "-"]
    nothing = Headline("NAS", "regret", "accuracy (0-1)", "EPNAS", math.nan, "random", 0.07, True, "")
    assert nothing.verdict() == "n/a"
    assert opa.to_dict()["verdict"] == "yes (10.0% higher)"


def test_a_demo_policy_and_nothing_measured_are_labelled() -> None:
    res = placement_and_serving()
    res["placement"]["training"]["policy_used"] = "the tiny demo-trained policy (the shipped one did not load)"
    res["serving_real"]["verdict"] = {"decision": "keep the default", "gain": 0.084, "pick_value": 3.301,
                                      "default_value": 3.605}  # fmt: skip
    rows, errors = headlines(res)
    assert errors == []
    assert rows[0].ours == "GiPH (demo-trained policy)"
    serving = next(h for h in rows if h.unit == "ms")
    assert serving.verdict() == "tie: keep the default (intervals overlap)"  # never "8.4% lower" within the noise


def test_an_unreadable_section_is_named_and_the_others_stay() -> None:
    res = placement_and_serving()
    del res["placement"]["adaptation"]["makespans"]["HEFT re-run"]
    res["serving_sim"]["tuners"]["rrl_warm"] = None
    rows, errors = headlines(res)
    assert errors == [
        "summary unavailable for 'placement': result['placement'] has no adaptation/makespans/HEFT re-run "
        "(missing 'HEFT re-run')",
        "summary unavailable for 'serving_sim': result['serving_sim'] has no tuners/rrl_warm/evals_to_5pct "
        "(missing 'evals_to_5pct')",
    ]
    assert {h.system for h in rows} == {"serving"} and len(rows) == 1  # serving_real still summarized
    assert "summary unavailable for 'placement'" in summary_section(rows, errors).text
    assert headlines({"command": "demo", "seed": 0}) == ([], [])


def test_glossary_shows_the_terms_of_the_sections_that_ran() -> None:
    placement = glossary_section(["placement"]).table
    assert {"makespan", "SLR", "CP_MIN", "HEFT", "evaluation"} <= set(placement)  # type: ignore[arg-type]
    assert "OPA" not in placement and "p99" not in placement  # type: ignore[operator]
    everything = glossary_section(["cnn", "placement", "serving_real", "nas_graph", "costmodel_quality"]).table
    for term in ("SLR", "CP_MIN", "OPA", "Kendall τ", "regret", "p99", "SLO", "makespan", "segment", "history table"):
        assert term in everything, term  # type: ignore[operator]
    assert all(text.endswith(").") or text.endswith(".") for text, _ in GLOSSARY.values())


def test_environment_and_commit(tmp_path: Path) -> None:
    env = environment()
    assert env["mlsysopt"] and env["cpus"] >= 1 and env["python"].count(".") == 2 and env["torch"]
    assert git_commit(tmp_path) is None  # not mlsysopt's source tree
    source = Path(__file__).resolve().parents[2] / "src" / "mlsysopt"
    try:
        head = subprocess.run(["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert git_commit(source).split(" ")[0] == head  # type: ignore[union-attr]


def test_the_simulator_rows_say_which_placement_won_and_why() -> None:
    """Issue 25: 'all on the fastest device' losing to random needs its reason on the row itself."""

    def section(fast: float, rand: float, tasks: int, depth: int) -> dict[str, Any]:
        return {"graph": {"tasks": tasks, "depth": depth},
                "placements": {"fastest device": {"makespan": fast}, "random": {"makespan": rand}}}  # fmt: skip

    rows, errors = headlines({"cnn": section(0.0046, 0.0101, 30, 30), "montage": section(12669, 8060, 62, 8)})
    assert errors == []
    chain, wide = rows
    assert chain.verdict().startswith("yes") and "the fastest device won: 30 tasks in 30 levels" in chain.note
    assert wide.verdict().startswith("no")
    assert "the random spread won: 62 tasks in 8 levels (7.8 per level)" in wide.note
    assert chain.row()[-1] == chain.note and COLUMNS[-1] == "note"
    text = summary_section(rows).text
    assert "same budget" not in text and "not the benchmark's confirmed figures" in text


def test_the_placement_rows_say_which_method_won_the_section() -> None:
    """Issue 25: a headline where GiPH did not win names the method that did (EFT-greedy in the demo)."""
    res = placement_and_serving()
    rows, _ = headlines(res)
    assert rows[0].note == "a baseline won the section: saga_best (SLR 1.800, best of 3 methods), not GiPH"
    res["placement"]["methods"]["giph"] = {"makespan": 2600.0}
    assert headlines(res)[0][0].note == "the section's best of 3 methods: giph (SLR 1.733)"
    res["placement"]["methods"]["eft_greedy"] = {"makespan": 2400.0}
    res["placement"]["methods"]["broken"] = {"makespan": float("nan")}
    rows, errors = headlines(res)
    assert errors == []
    slr = [r for r in rows if r.measure.startswith("SLR")]
    assert len(slr) == 2 and all("a baseline won the section: eft_greedy (SLR 1.600" in r.note for r in slr)
    assert "not GiPH" in slr[0].row()[-1]


def test_the_ordered_headline_is_against_hefts_own_schedule() -> None:
    res = placement_and_serving()
    res["placement"]["methods"]["local_search"] = {"makespan": 1900.0}
    res["placement"]["ordered"] = {"makespans": {"heft": 1950.0, "local_search": 1850.0}}
    rows, errors = headlines(res)
    assert errors == []
    fifo = [r for r in rows if r.measure == "SLR (makespan / CP_MIN), fifo"]
    assert fifo[0].ours == "local search (the default)" and fifo[0].baseline == "HEFT's map run FIFO"
    (ordered,) = [r for r in rows if r.measure == "SLR (makespan / CP_MIN), ordered"]
    assert ordered.baseline == "HEFT's own schedule" and ordered.verdict().startswith("yes")
    assert ordered.ours_value == pytest.approx(1850.0 / 1500.0) and ordered.baseline_value == pytest.approx(1.3)
