"""Each system's history record as a stored trial: parameters and value for Optuna, figures for the dashboard.

The record itself (the dict exactly as the run folder's ``result.json`` lists it, see the board's contract) is kept
whole in the trial, so warm starts get back what they would have read from the folder:

* NAS: :func:`~mlsysopt.nas.report.eval_record` entries (``result.json["evaluations"]``);
* serving: ``Measurement.to_dict()`` entries (``result.json["measurements"]``);
* placement: one search per (method, seed) of a comparison;
* cost models: one training, its per-epoch validation metric as intermediate values.

The experiment layers call the ``record_*`` functions: one line each, nothing when no run (or no store) is open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mlsysopt.store.session import current_run
from mlsysopt.store.trials import TrialRecord


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def nas_trial(rec: Mapping[str, Any], params: Mapping[str, Any] | None = None,
              distributions: Mapping[str, Any] | None = None, direction: str = "maximize") -> TrialRecord:  # fmt: skip
    """A NAS evaluation: its parameters (the space's decision names and option values, e.g. ``lr``, ``b1.width``;
    without them ``choice_0 ...`` indices) and its value in the objective's own direction (``perf`` is maximised:
    a minimised objective's value is ``-perf``)."""
    arch = rec.get("arch") or {}
    if params is None:
        params = {f"choice_{i}": int(c) for i, c in enumerate(arch.get("choices", []))}
        params["blocks"] = int(arch.get("blocks", len(params)))
    perf = _finite(rec.get("perf")) if rec.get("ok", True) else None
    if perf is not None and direction == "minimize":
        perf = -perf
    attrs: dict[str, Any] = {"test_perf": rec.get("test_perf"), "feasible": rec.get("feasible"),
                             "cost_s": rec.get("cost_s"), "architecture": rec.get("decoded")}  # fmt: skip
    attrs |= {f"resource.{k}": v for k, v in (rec.get("resources") or {}).items()}
    if rec.get("error"):
        attrs["error"] = str(rec["error"])[:500]
    return TrialRecord(dict(params), None if perf is None else [perf], record=dict(rec), attrs=attrs,
                       key=rec.get("index"), distributions=dict(distributions or {}))  # fmt: skip


def record_objective(direction: str, name: str | None = None) -> bool:
    """Set the open run's study objective: its direction and, when given, its name (Optuna's metric name, which
    optuna-dashboard shows on its axes). False when no run or store is open."""
    run = current_run()
    return False if run is None else run.set_objective(direction, name)


def serving_trial(rec: Mapping[str, Any], score: float | None, key: Any, phase: str = "search") -> TrialRecord:
    """A serving measurement: the configuration's knobs as parameters, the objective's score (lower is better)."""
    cfg = rec.get("config") or {}
    params = {k: v for k, v in cfg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    params |= {f"workload.{k}": v for k, v in (rec.get("workload") or {}).items() if isinstance(v, (int, float))}
    figures = ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "throughput", "violation_rate", "windows", "stable",
               "saturated", "dropped")  # fmt: skip
    attrs: dict[str, Any] = {k: rec.get(k) for k in figures}
    attrs |= {f"ci.{k}": v for k, v in (rec.get("ci") or {}).items()}
    attrs["phase"] = phase
    value = _finite(score)
    return TrialRecord(params, None if value is None else [value], record=dict(rec), attrs=attrs, key=key)


def placement_trial(method: str, seed: int, budget: int, result: Mapping[str, Any], key: Any,
                    methods: Sequence[str] = ()) -> TrialRecord:  # fmt: skip
    """A placement search: method (a categorical over ``methods``) and seed as parameters, makespan as the value."""
    # deferred: Optuna loads only when a trial's distributions are built
    from optuna.distributions import CategoricalDistribution

    history = [float(v) for v in result.get("history", [])]
    attrs = {"evaluations": result.get("evaluations"), "steps_to_best": result.get("steps_to_best"),
             "stopped_by": result.get("stopped_by"), "curve_first": history[0] if history else None,
             "curve_last": history[-1] if history else None, "curve_length": len(history)}  # fmt: skip
    record = {k: v for k, v in result.items() if k not in ("placement", "history")}
    record |= {"method": method, "seed": seed, "budget": budget, "curve": _thin(history)}
    ms = _finite(result.get("makespan"))
    dists = {"method": CategoricalDistribution(tuple(methods))} if method in methods else {}
    return TrialRecord({"seed": int(seed), "budget": int(budget), "method": method}, None if ms is None else [ms],
                       record=record, attrs=attrs, key=key, distributions=dists)  # fmt: skip


def _thin(curve: Sequence[float], most: int = 200) -> list[float]:
    """At most ``most`` points of a best-so-far curve (its last point kept)."""
    if len(curve) <= most:
        return list(curve)
    step = math.ceil(len(curve) / most)
    return [*curve[::step], curve[-1]] if (len(curve) - 1) % step else list(curve[::step])


def costmodel_trial(settings: Mapping[str, Any], history: Sequence[Mapping[str, Any]], final: bool,
                    result: Mapping[str, Any] | None = None) -> TrialRecord:  # fmt: skip
    """A training: its options as parameters, per-epoch validation metric (else loss) as intermediate values.

    The value is the last validation metric (OPA or accuracy, higher is better); a training still going (or
    stopped by its time budget, to be resumed) stays a running trial that later epochs update.
    """
    metric = next((m for m in ("valid_opa", "valid_accuracy", "valid_kendall_tau") if any(m in h for h in history)),
                  None)  # fmt: skip
    steps = {int(h.get("epoch", i + 1)): float(h[metric] if metric else h.get("loss", math.nan))
             for i, h in enumerate(history) if (metric and metric in h) or (not metric and "loss" in h)}  # fmt: skip
    keep = ("mode", "segment_size", "k", "sed_p", "epochs", "finetune_epochs", "lr", "hidden", "layers", "seed")
    params = {k: settings[k] for k in keep if isinstance(settings.get(k), (int, float)) and settings.get(k) is not None}
    params |= {k: settings[k] for k in ("mode", "backbone", "loss") if isinstance(settings.get(k), str)}
    last = [v for v in steps.values() if math.isfinite(v)]
    value = last[-1] if (final and last and metric) else None
    attrs: dict[str, Any] = {"metric": metric or "loss", "epochs_done": len(history)}
    if result is not None:
        attrs |= {f"test.{k}": v for k, v in (result.get("test") or {}).items() if _finite(v) is not None}
        attrs["peak_step_mb"] = result.get("peak_step_mb")
    state = "running" if not final else ("complete" if value is not None else "fail")
    record = {"settings": dict(settings), "history": list(history), **({"result": "see result.json"} if final else {})}
    return TrialRecord(params, None if value is None else [value], state=state, record=record, attrs=attrs,
                       intermediate=steps, key="training")  # fmt: skip


def record_comparison(comparison: Any) -> int:
    """Record every (method, seed) search of a placement comparison (``placement.experiment.Comparison``)."""
    if current_run() is None:
        return 0
    methods = list(comparison.runs)
    done = 0
    for method, runs in comparison.runs.items():
        for seed, r in zip(comparison.seeds, runs, strict=False):
            heft = comparison.heft_makespan
            summary = {"makespan": r.makespan, "evaluations": r.evaluations, "steps_to_best": r.steps_to_best,
                       "history": list(r.history), "stopped_by": r.stopped_by,
                       "ratio_to_heft": r.makespan / heft if heft else None}  # fmt: skip
            done += record(placement_trial(method, seed, comparison.budget, summary, f"{method}:{seed}", methods))
    return done


def record_headlines(rows: Sequence[Any]) -> int:
    """Record each summary row of the demo report (``report.overview.Headline``) as a trial of the demo's study."""
    done = 0
    for i, h in enumerate(rows):
        attrs = {"system": h.system, "measure": h.measure, "unit": h.unit, "ours": h.ours, "baseline": h.baseline,
                 "baseline_value": h.baseline_value, "verdict": h.verdict(), "data": h.data}  # fmt: skip
        rec = {"measure": h.measure, "ours": h.ours_value, "baseline": h.baseline_value}
        done += record(TrialRecord({"row": i}, [h.ours_value], attrs=attrs, key=f"headline:{i}", record=rec))
    return done


def store_links() -> dict[str, str]:
    """Where the open run's study is, and how to look at it (for a report's footer); empty without a store."""
    run = current_run()
    if run is None or not run.enabled or run.spec is None:
        return {}
    name = run.study_name or run.path.name
    where = f"--storage {run.spec.display}" if run.spec.source != "default" else f"--storage {run.spec.path}"
    return {"study store": f"{run.spec.display} · study '{name}'",
            "look at it": f"mlsysopt runs show {name} {where} · mlsysopt runs dashboard {where}"}  # fmt: skip


def record(trial: TrialRecord, direction: str | None = None, live: bool = False) -> bool:
    """Record ``trial`` in the study of the innermost open run (False: none open, or the store is off)."""
    run = current_run()
    return False if run is None else run.record(trial, direction, live)
