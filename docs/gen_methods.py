"""The "which method should I use" tables, built from the benchmark JSON files (never typed by hand).

The docs hook (``docs/hooks.py``) puts the tables where ``methods.md`` says ``<!-- methods-table -->``; run this file
to print them: ``python docs/gen_methods.py [BENCHMARK_DIR]`` (default ``benchmarks/results``). Each row is one
situation (a budget, an execution semantics, a data set): the best method measured there, the command's default
and its figure, and the file the figures come from.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the benchmark result files (JSON) the figures are read from
BENCH = HERE.parent / "benchmarks" / "results"


def _load(bench: Path, name: str) -> dict:
    return json.loads((bench / name).read_text())


def _ci(pair) -> str:
    return f" [{pair[0]:.3f}, {pair[1]:.3f}]" if pair else ""


def _best(values: Mapping[str, float], lower_is_better: bool, key: Callable[[str], float] | None = None) -> str:
    order = sorted(values, key=key or (lambda name: values[name]))
    return order[0] if lower_is_better else order[-1]


def _mode(key: str) -> str:
    """A benchmark key as the CLI spells the mode (``gst_efd`` -> ``gst+efd``)."""
    return key.replace("gst_", "gst+") if key.startswith("gst_") else key


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def placement(bench: Path) -> str:
    data = _load(bench, "placement.json")
    default = data["default_method"]
    rows = []
    for semantics in ("ordered", "fifo"):
        block = data["semantics"][semantics]
        for label, part in (("equal evaluations", block), ("1 s of wall clock", block["wall_clock"])):
            ratios, cis = part["geomean_ratio_to_heft"], part["ci95_ratio_to_heft"]
            best = _best(ratios, lower_is_better=True)
            low, high = cis[best]
            verdict = (
                "is the best"
                if best == default
                else ("ties (inside the best's 95% CI)" if low <= ratios[default] <= high else "is behind")
            )
            rows.append(
                [
                    f"`--execution {semantics}`, {label}",
                    f"`{best}` {ratios[best]:.3f}×{_ci(cis.get(best))}",
                    f"`{default}` {ratios[default]:.3f}×{_ci(cis.get(default))}: {verdict}",
                    f"`heft` 1.000×, `saga_best` {ratios['saga_best']:.3f}×",
                ]
            )
    anytime = data["semantics"]["ordered"]["anytime"]["learned_over_uniform"]
    why = (
        f"The default needs no policy: GiPH's learned proposals reach 1% of the final makespan in "
        f"{anytime['evals_to_1pct']:.2f}× the evaluations of uniform ones but take {anytime['seconds_to_1pct']:.2f}× "
        f"the seconds (`ordered`), so at a time budget they do not pay. Problems: {len(data['problems'])} held-out, "
        f"{data['setup']['seeds']} seeds; date {data['setup']['date'][:10]}; `benchmarks/results/placement.json`."
    )
    header = ["situation", "best measured (geomean makespan ÷ HEFT, 95% CI)", "default", "references"]
    return _table(header, rows) + "\n\n" + why


def serving(bench: Path) -> str:
    data = _load(bench, "serving_heldout.json")
    rule = data.get("default_tuner")
    if rule is None:  # a benchmark run before the rule (issue 34)
        return "The held-out benchmark JSON has no `default_tuner` block yet: run `benchmarks/serving.py`."
    tuning = _load(bench, "serving_tuning.json")["default_tuner"] if (bench / "serving_tuning.json").is_file() else {}
    classes = {"small": "`--budget` ≤ 10", "medium": "`--budget` 11–30", "large": "`--budget` > 30"}
    rows = []
    for key, block in rule.items():
        if key == "targets":
            continue
        cls, prior = key.rsplit("_", 1)
        pick, best, budget = block["rule"], block["best"], block["budget"]
        share = block["share_within_5pct"]
        val = tuning.get(key, {}).get("share_within_5pct", {})
        low, high = block["rule_minus_best_share_ci95"][1:]
        verdict = "the best" if pick == best else ("ties the best" if low <= 0 <= high else "behind the best")
        rows.append(
            [
                f"{classes[cls]}, {'with a prior' if prior == 'warm' else 'no prior'} (judged at {budget})",
                f"`{pick.replace('_warm', '')}`",
                f"{val[pick]:.0%} (runner-up {max((v for t, v in val.items() if t != pick), default=0):.0%})"
                if pick in val
                else "–",
                f"{share[pick]:.0%}: {verdict} (`{best}` {share[best]:.0%})",
            ]
        )
    targets = rule.get("targets", {})
    tuners = data["heldout"]
    warm = targets.get("default_warm_tuner", "rrl_warm")
    why = (
        "Share of tunes within 5% of the optimum after the class's budget of measurements (the first tune at a rate "
        "and the re-tune after it rises 1.5× pooled; simulated; 14 tuning presets × 10 seeds chose the rule,"
        f" {len(data['heldout_study']['split'])} held-out presets × "
        f"{data['heldout_study']['seeds']} seeds confirm it; a tie is inside the 95% bootstrap interval of the "
        f"difference). With a prior, mean / p90 measurements to within 5% on the held-out presets: `{warm}` "
        f"{tuners[warm]['mean']:.1f} / {tuners[warm]['p90']:g}, warm GP {tuners['gp_warm']['mean']:.1f} / "
        f"{tuners['gp_warm']['p90']:g}, warm TPE {tuners['tpe_warm']['mean']:.1f} / {tuners['tpe_warm']['p90']:g}; "
        f"after a rate change (median) {tuners[warm]['shift_median']:g}, warm GP {tuners['gp_warm']['shift_median']:g}."
        f" Date {data['date']}; `benchmarks/results/serving_heldout.json`, `benchmarks/results/serving_tuning.json`."
    )
    header = ["situation", "`serving tune` default", "within 5%, tuning presets", "within 5%, held-out presets"]
    return _table(header, rows) + "\n\n" + why


def nas(bench: Path) -> str:
    data = _load(bench, "nas34.json")
    rows = []
    for budget, regrets in data["val_regret"].items():
        default = data["default_method"][budget]
        best = _best(regrets, lower_is_better=True)
        ratios = data["ci95_val_regret_ratio"][budget]  # the default over each baseline
        if best == default:
            runner = _best({m: regrets[m] for m in ratios}, lower_is_better=True)
            ratio = ratios[runner]
            verdict = f"is the best; ÷ `{runner}` {ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]"
        else:
            ratio = ratios[best]
            verdict = f"÷ `{best}` {ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]"
        refs = [m for m in ("epnas", "epnas_cold", "bananas", "tpe", "random") if m != default][:3]
        rows.append(
            [
                f"`--budget {budget}`",
                f"`{best}` {regrets[best]:.4f}",
                f"`{default}` {regrets[default]:.4f}: {verdict}",
                ", ".join(f"`{m}` {regrets[m]:.4f}" for m in refs),
            ]
        )
    settings = data["settings"]
    why = (
        f"Mean validation regret (lower is better) on {len(settings['datasets'])} held-out NAS-Bench-Graph tables "
        f"({', '.join(settings['datasets'])}), {settings['seeds']} seeds, tight and single-limit constraints; every "
        f"returned cell met the hard limits. The default (`--method auto`) is chosen per budget class on the tuning "
        f"tables (physics, arxiv, proteins), among the methods whose transfer prior adds on the held-out ablation: "
        f"{data['default_rule']}. Date {data['date'][:10]}; "
        "`benchmarks/results/nas34.json`."
    )
    header = ["budget", "best measured (mean validation regret)", "`nas search` default", "references"]
    return _table(header, rows) + "\n\n" + why


def costmodel(bench: Path) -> str:
    data = _load(bench, "gst_full.json")
    default = "gst_efd"
    rows = []
    synthetic = {name: q for name, q in data["quality"].items() if name != "real"}
    for label, quality in (
        ("SYNTHETIC layout graphs of 21k–88k nodes", synthetic),
        ("REAL `real:cpu`", data["quality"]["real"]),
    ):
        opa = {name: q["opa"] for name, q in quality.items()}
        best = _best(opa, lower_is_better=False)
        rows.append(
            [
                label,
                f"`{_mode(best)}` {opa[best]:.4f}{_ci(quality[best].get('opa_ci'))}, {quality[best]['run_s']:.0f} s",
                f"`gst+efd` {opa[default]:.4f}{_ci(quality[default].get('opa_ci'))}, {quality[default]['run_s']:.0f} s",
                f"`full` {opa['full']:.4f}, `lightgbm` {opa['lightgbm']:.4f}",
            ]
        )
    memory = data["memory_mb"]
    rows.append(
        [
            f"graphs of {memory['nodes'][0]:,}–{memory['nodes'][-1]:,} nodes (training-step memory)",
            f"`gst` {memory['gst'][0]:.1f} → {memory['gst'][-1]:.1f} MB",
            "`gst+efd` (segments)",
            f"`full` {memory['full'][0]:.0f} → {memory['full'][-1]:,.0f} MB",
        ]
    )
    oracle = _load(bench, "latency_oracle.json")
    within = oracle["within10"]
    best = _best(within, lower_is_better=False)
    rows.append(
        [
            "latency oracle: predicted ms of a held-out model",
            f"`{best}` {within[best]:.0%} within ±10%, Spearman {oracle['spearman'][best]:.3f}",
            f"`builtin` = `{oracle['default_oracle']}`",
            f"`flops` {within['flops']:.0%} within ±10%",
        ]
    )
    why = (
        "Held-out ordered-pair accuracy (OPA, higher is better) and training seconds, 3 seeds. On the small real "
        "graphs LightGBM ties GST+EFD and trains in a fraction of the time (`--mode lightgbm`); GST+EFD is for graphs "
        "too big for full-graph training, where its step memory stays flat. Dates "
        f"{data['date']} (`benchmarks/results/gst_full.json`) and `benchmarks/results/latency_oracle.json` "
        f"(default oracle: {oracle['default_rule']})."
    )
    header = ["data", "best measured", "`costmodel train` default", "references"]
    return _table(header, rows) + "\n\n" + why


SECTIONS = (
    ("Placement: `mlsysopt placement place --method`", placement),
    ("Serving: `mlsysopt serving tune --tuner`", serving),
    ("NAS: `mlsysopt nas search --method`", nas),
    ("Cost models: `mlsysopt costmodel train --mode` and the latency oracle", costmodel),
)


def methods_markdown(bench: Path = BENCH) -> str:
    """Every system's table as Markdown (``###`` sections)."""
    return "\n\n".join(f"### {title}\n\n{build(Path(bench))}" for title, build in SECTIONS) + "\n"


if __name__ == "__main__":
    print(methods_markdown(Path(sys.argv[1]) if len(sys.argv) > 1 else BENCH))
