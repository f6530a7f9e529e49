"""The demo page's summary (each system's headline against its baseline, one table) and its glossary.

:func:`headlines` reads the demo's ``result.json`` dict (the keys each section builder writes) and returns one
:class:`Headline` per comparison; a section that did not run gives no rows. A section whose result lacks a figure
this module reads gives an error line instead (shown on the page, in ``summary.json`` and by the CLI), never a
silently missing row and never a lost demo.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.report.figures import time_unit
from mlsysopt.report.html import Section, fmt_value
from mlsysopt.report.labels import NAS_CELL, SERVING_LABEL, gnn_ops_text

COLUMNS = ["system", "measure", "unit", "method", "value", "baseline", "value", "better than the baseline?", "data",
           "note"]  # fmt: skip


@dataclass(frozen=True)
class Headline:
    """One row of the summary: ``ours`` against ``baseline`` on one measure (``lower_is_better`` decides)."""

    system: str
    measure: str
    unit: str
    ours: str
    ours_value: float
    baseline: str
    baseline_value: float | None
    lower_is_better: bool
    data: str
    verdict_text: str | None = None  # a section's own verdict when numbers alone mislead (e.g. overlapping intervals)
    #: What the two numbers alone do not say: the chance level, why the winner won, unequal budgets, who won.
    note: str = ""
    points: bool = False  # a fraction with a chance level (OPA): say the difference in points, not a ratio

    def verdict(self) -> str:
        """``yes``/``no``/``tie`` with the difference (points for ``points``), ``no baseline``, or the own words."""
        if self.verdict_text is not None:
            return self.verdict_text
        b, o = self.baseline_value, self.ours_value
        if b is None or not math.isfinite(b) or not math.isfinite(o):
            return "no baseline in the demo" if b is None else "n/a"
        if math.isclose(o, b, rel_tol=1e-9, abs_tol=1e-12):
            return "tie"
        better = o < b if self.lower_is_better else o > b
        if self.points:
            return f"{'yes' if better else 'no'} ({100 * (o - b):+.1f} points)"
        if b == 0:
            return "yes" if better else "no"
        rel = abs(o - b) / abs(b)
        word = "lower" if o < b else "higher"
        return f"{'yes' if better else 'no'} ({rel:.1%} {word})"

    def row(self) -> list[Any]:
        """The table row (numbers stay numbers so the page right-aligns them)."""
        base = "-" if self.baseline_value is None else self.baseline_value
        return [self.system, self.measure, self.unit, self.ours, self.ours_value, self.baseline or "-", base,
                self.verdict(), self.data, self.note]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with the verdict."""
        return {**asdict(self), "verdict": self.verdict()}


def _get(result: Mapping[str, Any], key: str, *path: str) -> Any:
    """``result[key][path[0]][path[1]]...``; a missing key is one error naming the result key and the path."""
    cur: Any = result
    for k in (key, *path):
        if not isinstance(cur, Mapping) or k not in cur:
            raise MlsysoptError(f"result['{key}'] has no {'/'.join(path)} (missing '{k}')")
        cur = cur[k]
    return cur


def _placements(key: str, system: str, data: str) -> Callable[[Mapping[str, Any]], list[Headline]]:
    """The simulator sections: everything on the fastest device vs a random placement, and why the winner won.

    Neither is a method of mlsysopt's: the row shows what the simulator charges for. One device pays no transfer
    but runs every task one after another; a random spread overlaps parallel tasks but pays for moving data. A
    chain (one task per level) has nothing to overlap, a wide graph much; the note says which this graph is.
    """

    def rows(res: Mapping[str, Any]) -> list[Headline]:
        fast = float(_get(res, key, "placements", "fastest device", "makespan"))
        rand = float(_get(res, key, "placements", "random", "makespan"))
        tasks, depth = int(_get(res, key, "graph", "tasks")), int(_get(res, key, "graph", "depth"))
        width = tasks / max(depth, 1)
        shape = f"{tasks} tasks in {depth} levels ({width:.1f} per level)"
        if fast <= rand:
            why = (f"the fastest device won: {shape}, little to run in parallel, so one device saves every "
                   "transfer a spread pays for")  # fmt: skip
        else:
            why = (f"the random spread won: {shape}, so one device runs parallel tasks one after another while a "
                   "spread overlaps them, transfers included")  # fmt: skip
        scale, unit = time_unit(max(fast, rand))
        return [
            Headline(system, "makespan", unit, "all on the fastest device", fast * scale,
                     "random placement", rand * scale, lower_is_better=True, data=data, note=why)
        ]  # fmt: skip

    return rows


def _section_best(methods: Mapping[str, Any], bound: float, learned: tuple[str, ...]) -> str:
    """Which method of the placement section had the lowest makespan, said on the SLR rows (issue 25: a headline
    where the learned method did not win says which method did)."""
    spans = {m: float(r["makespan"]) for m, r in methods.items() if isinstance(r, Mapping) and "makespan" in r}
    spans = {m: v for m, v in spans.items() if math.isfinite(v)}
    if not spans:
        return ""
    best = min(spans, key=lambda m: (spans[m], m))
    ties = sorted(m for m, v in spans.items() if math.isclose(v, spans[best], rel_tol=1e-9))
    who = ", ".join(ties)
    if any(m in learned for m in ties):
        return f"the section's best of {len(spans)} methods: {who} (SLR {spans[best] / bound:.3f})"
    return (f"a baseline won the section: {who} (SLR {spans[best] / bound:.3f}, best of {len(spans)} methods), "
            "not GiPH")  # fmt: skip


def _placement(res: Mapping[str, Any]) -> list[Headline]:
    data = "synthetic cluster, WfCommons Montage recipe (60 tasks)"
    heft = float(_get(res, "placement", "methods", "heft", "makespan"))
    bound = float(_get(res, "placement", "cp_min"))
    note = _section_best(_get(res, "placement", "methods"), bound, learned=("giph", "giph_from_heft", "giph_walk"))
    out = []
    shipped = "demo-trained" not in str(_get(res, "placement", "training", "policy_used"))
    giph = "GiPH (shipped policy)" if shipped else "GiPH (demo-trained policy)"
    methods = _get(res, "placement", "methods")
    pairs = [("local_search", "local search (the default)"), ("giph", giph), ("saga_best", "best saga scheduler")]
    for method, label in [(m, lab) for m, lab in pairs if m in methods]:
        ms = float(_get(res, "placement", "methods", method, "makespan"))
        out.append(
            Headline("placement", "SLR (makespan / CP_MIN), fifo", "ratio", label, ms / bound,
                     "HEFT's map run FIFO", heft / bound, lower_is_better=True, data=data, note=note)
        )  # fmt: skip
    ordered = res["placement"].get("ordered") if isinstance(res.get("placement"), Mapping) else None
    if ordered and "local_search" in ordered.get("makespans", {}):
        own = float(ordered["makespans"]["heft"])
        out.append(
            Headline("placement", "SLR (makespan / CP_MIN), ordered", "ratio", "local search (the default)",
                     float(ordered["makespans"]["local_search"]) / bound, "HEFT's own schedule", own / bound,
                     lower_is_better=True, data=data)
        )  # fmt: skip
    giph = float(_get(res, "placement", "adaptation", "makespans", "GiPH adapt"))
    rerun = float(_get(res, "placement", "adaptation", "makespans", "HEFT re-run"))
    removed = len(_get(res, "placement", "adaptation", "removed"))
    out.append(
        Headline("placement", f"makespan after losing {removed} devices", "s", "GiPH adapt", giph,
                 "HEFT re-run", rerun, lower_is_better=True, data=data)
    )  # fmt: skip
    return out


def _serving_real(res: Mapping[str, Any]) -> list[Headline]:
    """Serving (#22): RRL's pick against ONNX Runtime's default, both *confirmed* (interleaved re-measurements);
    overlapping 95% intervals are a tie in words ("keep the default"), never "x% lower"."""
    data = "real: ONNX Runtime on this machine"
    v = _get(res, "serving_real", "verdict")
    ours, base = float(_get(res, "serving_real", "verdict", "pick_value")), float(v["default_value"])
    decision, gain = str(v["decision"]), v.get("gain")
    if decision == "keep the default":
        words = "tie: keep the default (" + ("the pick is the default)" if gain == 0 else "intervals overlap)")
    elif decision == "use the pick":
        words = f"yes ({abs(float(gain)):.1%} {'lower' if ours < base else 'higher'}, intervals apart)"
    else:
        words = "no: SLO missed"
    return [
        Headline("serving", "mean latency, confirmed (median of interleaved rounds)", "ms", "RRL's pick", ours,
                 "ONNX Runtime default, confirmed", base, lower_is_better=True, data=data, verdict_text=words)
    ]  # fmt: skip


def _serving_sim(res: Mapping[str, Any]) -> list[Headline]:
    """Serving (#22): measurements until within 5% of the optimum on a held-out model, RRL warm vs GP."""
    budget = int(_get(res, "serving_sim", "budget"))
    name = str(_get(res, "serving_sim", "preset", "name"))
    data = f"simulated: held-out preset {name} (extrapolated profile)"

    def evals(label: str) -> float:
        v = _get(res, "serving_sim", "tuners", label, "evals_to_5pct")
        return float(budget + 1) if v is None else float(v)

    ours = evals("rrl_warm")
    return [
        Headline("serving", f"measurements to within 5% of the optimum ({budget + 1} = not within {budget})",
                 "measurements", "RRL warm-started from the prior", ours, baseline, evals(key), True, data)
        for key, baseline in (("gp", "Optuna GP (cold)"), ("gp_warm", "Optuna GP warm-started, same prior"))
    ]  # fmt: skip


def _number(v: Any) -> float:
    return math.nan if v is None else float(v)


def _nas_graph(res: Mapping[str, Any]) -> list[Headline]:
    space = str(_get(res, "nas_graph", "space"))
    budget = _get(res, "nas_graph", "budget")
    base = str(_get(res, "nas_graph", "best_baseline"))
    ours = _number(_get(res, "nas_graph", "methods", "epnas", "val_regret"))
    theirs = _number(_get(res, "nas_graph", "methods", base, "val_regret"))
    return [
        Headline("NAS", f"validation regret on {space}, {budget} evaluations (one seed)", "accuracy (0-1)",
                 "EPNAS (transfer)", ours, f"{base} (best baseline here)", theirs, lower_is_better=True,
                 data="real: NAS-Bench-Graph's table")
    ]  # fmt: skip


def _nas_digits(res: Mapping[str, Any]) -> list[Headline]:
    acc = _number(_get(res, "nas_digits", "result", "best_test_perf"))
    return [
        Headline("NAS", "test accuracy on digits", "accuracy (0-1)", "EPNAS", acc,
                 "", None, lower_is_better=False, data="real: scikit-learn digits, trained here")
    ]  # fmt: skip


def _costmodel_memory(res: Mapping[str, Any]) -> list[Headline]:
    nodes = _get(res, "costmodel_memory", "nodes")
    full = _get(res, "costmodel_memory", "peak_step_mb", "full")
    gst = _get(res, "costmodel_memory", "peak_step_mb", "gst")
    return [
        Headline("cost model", f"peak training-step memory, {int(nodes[-1]):,} nodes", "MB", "GST", float(gst[-1]),
                 "full graph", float(full[-1]), lower_is_better=True, data="SYNTHETIC layout graphs")
    ]  # fmt: skip


def _costmodel_quality(res: Mapping[str, Any]) -> list[Headline]:
    ours = float(_get(res, "costmodel_quality", "modes", "gst+efd", "test", "opa"))
    key = str(res["costmodel_quality"].get("baseline", "full"))
    base = float(_get(res, "costmodel_quality", "modes", key, "test", "opa"))
    names = {"full": "full graph", "lightgbm": "LightGBM lambdarank", "xgboost": "XGBoost pairwise"}
    data = str(res["costmodel_quality"].get("data", "SYNTHETIC layout graphs"))
    return [
        Headline("cost model", "held-out OPA (0.5 = chance)", "fraction of pairs", "GST+EFD", ours,
                 names.get(key, key), base, lower_is_better=False, data=data, points=True)
    ]  # fmt: skip


#: result key -> the rows it gives, in the order of the summary.
EXTRACTORS: dict[str, Callable[[Mapping[str, Any]], list[Headline]]] = {
    "cnn": _placements("cnn", "simulator (zoo CNN)", "synthetic cluster, real PyTorch graph"),
    "montage": _placements("montage", "simulator (Montage)", "synthetic cluster, WfCommons recipe"),
    "placement": _placement,
    "serving_real": _serving_real,
    "serving_sim": _serving_sim,
    "nas_graph": _nas_graph,
    "nas_digits": _nas_digits,
    "costmodel_quality": _costmodel_quality,
    "costmodel_memory": _costmodel_memory,
}


def headlines(result: Mapping[str, Any]) -> tuple[list[Headline], list[str]]:
    """The :class:`Headline` rows of every section present in the demo's ``result``, and one error per section
    whose result lacks a figure the summary reads (that section then gives no rows; the page says so)."""
    rows: list[Headline] = []
    errors: list[str] = []
    for key, extract in EXTRACTORS.items():
        if key in result:
            try:
                rows.extend(extract(result))
            except (MlsysoptError, TypeError, ValueError) as exc:
                errors.append(f"summary unavailable for '{key}': {exc}")
    return rows, errors


def summary_section(rows: Iterable[Headline], errors: Sequence[str] = ()) -> Section:
    """The page's first section: every headline in one table (and any section the summary could not read)."""
    text = (
        "Each row compares two methods of one section below on the same problem with the same seed; the budget "
        "each method got is stated in its section, and the note says when the budgets differ, what chance is, "
        "or which method won where the first-named one did not. 'better than the baseline?' reads the two values "
        "in the direction that is better for that measure. These are single demo runs at small budgets, not the "
        "benchmark's confirmed figures (BENCHMARKS.md has those, with intervals over seeds). Terms are defined in "
        "the glossary at the end."
    )
    if errors:
        text += "\n\n" + " ".join(f"{e}." for e in errors)
    return Section("Summary", text=text, table=[h.row() for h in rows], columns=COLUMNS, anchor="summary")


#: term -> (definition, result keys whose section uses it; empty: always shown).
GLOSSARY: dict[str, tuple[str, tuple[str, ...]]] = {
    "makespan": ("Time from the first task's start to the last task's finish of a placed graph, in the simulator "
                 "(seconds).", ("cnn", "montage", "placement")),
    "CP_MIN": ("A lower bound on the makespan: the longest path with every task on its fastest feasible device "
               "and free communication (seconds).", ("cnn", "montage", "placement")),
    "SLR": ("Schedule length ratio = makespan / CP_MIN (≥ 1; lower is better).", ("cnn", "montage", "placement")),
    "critical path": ("The chain of tasks and transfers that determines the makespan (hatched in Gantt charts).",
                      ("cnn", "montage", "placement")),
    "HEFT": ("Heterogeneous Earliest Finish Time: the classic list-scheduling heuristic, one evaluation.",
             ("placement",)),
    "x HEFT": ("A makespan divided by HEFT's on the same problem (below 1: better than HEFT): under fifo execution "
               "HEFT's map run with ready tasks in arrival order, under ordered execution HEFT's own schedule.",
               ("placement",)),
    "steps to best": ("The evaluation at which a search found the best result it returned.", ("placement",)),
    "GiPH": ("The learned placement policy: improves a placement one task relocation at a time.", ("placement",)),
    "evaluation": ("One simulator run of a placement, one measured configuration, or one trained or looked-up "
                   "architecture; searches get the same budget of them.", ()),
    "p99": ("The 99th-percentile request latency: 99% of requests finished within it (milliseconds).",
            ("serving_real", "serving_sim")),
    "SLO": ("Service-level objective: the p99 latency a serving configuration must stay under.", ("serving_real",)),
    "saturated": ("The engine could not keep up with the offered request rate during the measurement.",
                  ("serving_real",)),
    "ONNX Runtime default": ("One session with ONNX Runtime's default thread settings, no batching.",
                             ("serving_real",)),
    "RRL": ("Region-based reinforcement learning: tunes serving parallelism from few measurements.",
            ("serving_real", "serving_sim")),
    "configuration label": (f"{SERVING_LABEL}.", ("serving_real", "serving_sim")),
    "cell (link, ops)": (f"A NAS-Bench-Graph architecture, printed as {NAS_CELL}.", ("nas_graph",)),
    "GNN ops": (f"The ops of a NAS-Bench-Graph cell: {gnn_ops_text()}.", ("nas_graph",)),
    "note": ("The summary's last column: what the two numbers alone do not say (the chance level, why the "
             "winner won, unequal budgets, which method won the section).", ()),
    "EPNAS": ("Efficient progressive NAS: a controller trained with REINFORCE plus a performance predictor.",
              ("nas_graph", "nas_digits")),
    "regret": ("Best test accuracy among the feasible architectures of the whole table minus the test accuracy of "
               "the returned one (0 is perfect).", ("nas_graph",)),
    "validation regret": ("The same on validation accuracy, which every search optimises: the headline of NAS.",
                          ("nas_graph",)),
    "feasible": ("Meets every hard resource limit (params, FLOPs, latency).", ("nas_graph", "nas_digits")),
    "Pareto front": ("Architectures no other evaluated one beats on both accuracy and the resource.",
                     ("nas_graph", "nas_digits")),
    "segment": ("A contiguous chunk of a large graph; GST backpropagates through sampled segments only.",
                ("costmodel_memory", "costmodel_quality")),
    "history table": ("Stored embeddings of segments from earlier steps, reused instead of recomputing them.",
                      ("costmodel_quality",)),
    "GST+EFD": ("Graph Segment Training with the history table (E), finetuning the head (F) and stale embedding "
                "dropout (D).", ("costmodel_memory", "costmodel_quality")),
    "OPA": ("Ordered pair accuracy: the fraction of configuration pairs ranked in the right order (0.5 = chance).",
            ("costmodel_quality",)),
    "Kendall τ": ("Rank correlation between predicted and true runtimes, from -1 to 1 (0 = chance).",
                  ("costmodel_quality",)),
    "top-1 slowdown": ("How much slower the predicted-best configuration is than the true best (fraction).",
                       ("costmodel_quality",)),
    "SYNTHETIC": ("Generated data in a real dataset's format (the real dataset is not available offline).",
                  ("costmodel_memory", "costmodel_quality")),
}  # fmt: skip


def glossary_section(result_keys: Iterable[str]) -> Section:
    """The terms the sections that ran use (and the general ones), as a two-column table."""
    keys = set(result_keys)
    table = {term: text for term, (text, used) in GLOSSARY.items() if not used or keys & set(used)}
    return Section("Glossary", table=table, anchor="glossary")


def format_headline(h: Headline) -> str:
    """One line for a terminal: ``ours value vs baseline value unit (verdict)``."""
    ours = fmt_value(h.ours_value)
    if h.baseline_value is None:
        return f"{h.ours} {ours} {h.unit}"
    return f"{h.ours} {ours} vs {h.baseline} {fmt_value(h.baseline_value)} {h.unit} ({h.verdict()})"
