"""What the store knows about each command: its system, which way its objective goes, and its headline figure.

The headline is the one figure ``mlsysopt runs list`` shows for a run, read from the run's ``result.json`` when it
closes (best validation accuracy of a NAS search, the confirmed pick of a serving tune, the best mean makespan of
a placement comparison, test OPA of a cost model...). One-shot commands whose work happens before their folder
opens (``placement place``, ``placement adapt``, ``graph simulate``) get their trial from ``result.json`` too
(:func:`result_trials`); searches record theirs as they go, from their experiment layer.
"""

from __future__ import annotations

import math
from typing import Any

from mlsysopt.store.trials import TrialRecord

#: command -> (system, objective direction)
COMMANDS: dict[str, tuple[str, str]] = {
    "nas search": ("nas", "maximize"),
    "nas export": ("nas", "maximize"),
    "serving tune": ("serving", "minimize"),
    "serving serve": ("serving", "minimize"),
    "serving profile": ("serving", "minimize"),
    "serving study": ("serving", "minimize"),
    "placement place": ("placement", "minimize"),
    "placement compare": ("placement", "minimize"),
    "placement adapt": ("placement", "minimize"),
    "placement train": ("placement", "maximize"),
    "costmodel train": ("costmodel", "maximize"),
    "costmodel evaluate": ("costmodel", "maximize"),
    "costmodel predict": ("costmodel", "maximize"),
    "graph simulate": ("graph", "minimize"),
    "demo": ("demo", "minimize"),
}
SYSTEMS = ("nas", "serving", "placement", "costmodel", "graph", "demo")


def system_of(command: str | None) -> str | None:
    """The system of a command (``nas search`` -> ``nas``), None when unknown."""
    if not command:
        return None
    if command in COMMANDS:
        return COMMANDS[command][0]
    first = command.split()[0]
    return first if first in SYSTEMS else None


def direction_of(command: str | None) -> str | None:
    """``minimize`` or ``maximize`` for a known command, else None."""
    return COMMANDS[command][1] if command in COMMANDS else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _figure(name: str, value: Any, unit: str = "", text: str | None = None) -> dict[str, Any] | None:
    v = _num(value)
    if v is None:
        return None
    return {"name": name, "value": v, "unit": unit, "text": text or f"{name} {v:.4g}{' ' + unit if unit else ''}"}


def headline(command: str | None, result: dict[str, Any]) -> dict[str, Any] | None:
    """The run's headline figure from its result.json: ``{"name", "value", "unit", "text"}`` (None: none)."""
    try:
        return _headline(command or str(result.get("command", "")), result)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None


def _headline(command: str, r: dict[str, Any]) -> dict[str, Any] | None:
    if command == "nas search":
        best = r.get("best") or {}
        text = f"best validation {best.get('perf', float('nan')):.4f}"
        if _num(best.get("test_perf")) is not None:
            text += f", test {best['test_perf']:.4f}"
        if _num(r.get("regret")) is not None:
            text += f", regret {r['regret']:.4f}"
        return _figure("best validation accuracy", best.get("perf"), "", text)
    if command == "serving tune":
        unit = (r.get("objective") or {}).get("unit", "")
        last = (r.get("per_rate") or [{}])[-1]
        text = f"confirmed {last.get('confirmed', '')} at {last.get('rate', 0):g} req/s"
        return _figure("confirmed value", r.get("confirmed_value"), unit, text)
    if command == "serving serve":
        last = r["curve"][-1]
        return _figure("p99", last["p99_ms"], "ms", f"p99 {last['p99_ms']:.4g} ms at {last['offered_rps']:g} req/s")
    if command == "serving profile":
        return _figure("fit median relative error", r.get("fit_median_rel_error"))
    if command == "placement compare":
        res = r["results"]
        best = min(res, key=lambda m: res[m]["mean_makespan"])
        ms = res[best]["mean_makespan"]
        text = f"best {best}: mean makespan {ms:.4g} s (HEFT {r.get('heft_makespan', float('nan')):.4g} s)"
        return _figure("best mean makespan", ms, "s", text)
    if command == "placement place":
        return _figure("makespan", r["makespan"], "s", f"{r.get('method', '')} makespan {r['makespan']:.4g} s")
    if command == "placement adapt":
        ms = r["giph"]["makespan"]
        return _figure("makespan", ms, "s", f"adapted makespan {ms:.4g} s (was {r.get('old_makespan', 0):.4g} s)")
    if command == "placement train":
        last = (r.get("history") or [{}])[-1]
        return _figure(
            "improvement", last.get("improvement"), "", f"last update improvement {last.get('improvement', 0):.1%}"
        )
    if command == "costmodel train":
        for split in ("test", "valid"):
            m = r.get(split) or {}
            for name in ("opa", "accuracy", "kendall_tau"):
                if _num(m.get(name)) is not None:
                    return _figure(f"{split} {name}", m[name])
        return None
    if command == "graph simulate":
        return _figure("makespan", r.get("makespan"), (r.get("units") or {}).get("time", "s"))
    return None


def result_trials(command: str | None, r: dict[str, Any]) -> list[TrialRecord]:
    """The trial of a one-shot command, from its result.json (empty for commands that record as they go)."""
    try:
        if command == "placement place":
            p = {"method": r["method"], "seed": r["seed"], "budget": r["budget"]}
            figures = {"evaluations": r["evaluations"], "steps_to_best": r["steps_to_best"], "seconds": r["seconds"]}
            return [TrialRecord(p, [r["makespan"]], attrs=figures, key="place", record=_slim(r))]
        if command == "placement adapt":
            g = r["giph"]
            p = {"method": g["method"], "seed": r["seed"], "budget": r["budget"]}
            figures = {"old_makespan": r["old_makespan"], "heft_makespan": r["heft"]["makespan"]}
            return [TrialRecord(p, [g["makespan"]], attrs=figures, key="adapt", record=_slim(r))]
        if command == "graph simulate":
            return [TrialRecord({"seed": r.get("seed", 0)}, [r["makespan"]], attrs={"slr": r.get("slr")},
                                key="simulate")]  # fmt: skip
    except (KeyError, TypeError):
        return []
    return []


def _slim(r: dict[str, Any]) -> dict[str, Any]:
    """A result without its bulky parts (placements, histories), as a trial's record."""
    return {k: v for k, v in r.items() if k not in ("placement", "history", "cluster", "keep")}
