"""Helpers of ``mlsysopt nas``: options, input checks, the space and constraints, result records, printing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.markup import escape

from mlsysopt.cli.common import check_run_state as common_check_run_state
from mlsysopt.cli.common import console
from mlsysopt.errors import MlsysoptError

if TYPE_CHECKING:
    from mlsysopt.nas.constraints import Constraints
    from mlsysopt.nas.search import SearchResult
    from mlsysopt.nas.spaces.base import Evaluation, SearchSpace

CNN_OPTIONS = {"epochs": "--epochs", "ops": "--ops", "max_blocks": "--max-blocks", "lr": "--lr"}
# settings that may change when a run is resumed (everything else must match the run being continued)
RESUMABLE = ("budget", "workers", "backend", "address")
MODES = ("hard", "soft")  # as mlsysopt.nas.constraints.MODES (not imported: that module pulls in torch)

OutOpt = Annotated[Path, typer.Option("--out", help="Run directory for result.json, checkpoint.pt and the plots.")]


def check_counts(budget: int, workers: int) -> None:
    """``--budget`` and ``--workers`` must be at least 1 (one clear line, not typer's usage box)."""
    if budget < 1:
        raise MlsysoptError(f"--budget must be >= 1 (evaluations), got {budget}")
    if workers < 1:
        raise MlsysoptError(f"--workers must be >= 1, got {workers}")


def parse_ops(value: str | None) -> list[str] | None:
    """``"conv3x3,identity"`` -> ``["conv3x3", "identity"]``; None stays None."""
    if value is None:
        return None
    ops = [o.strip() for o in value.split(",") if o.strip()]
    if not ops:
        raise MlsysoptError(f"--ops '{value}' names no op")
    return ops


def build_space(spec: str, cnn_options: dict[str, Any]) -> SearchSpace:
    """The space of ``--space``; the CNN-only options (``--epochs`` ...) are refused for NAS-Bench-Graph."""
    from mlsysopt.nas.spaces import get_space

    given = {k: v for k, v in cnn_options.items() if v is not None}
    if given and spec.startswith("nasbench-graph"):
        flags = ", ".join(CNN_OPTIONS[k] for k in given)
        verb = "apply" if len(given) > 1 else "applies"
        raise MlsysoptError(f"{flags} {verb} only to the CNN spaces (digits, cifar10:/folder), not to '{spec}'")
    return get_space(spec, **given)


def check_limits(mode: str, limits: dict[str, float | None]) -> None:
    """Each given limit must be a number > 0 (named by its option) and the mode hard or soft."""
    for name, v in limits.items():
        if v is not None and not (math.isfinite(v) and v > 0):
            raise MlsysoptError(f"--{name.replace('_', '-')} must be a number > 0, got {v:g}")
    if mode not in MODES:
        raise MlsysoptError(f"unknown --constraint-mode '{mode}' (choose from: {', '.join(MODES)})")


def build_constraints(mode: str, limits: dict[str, float | None]) -> Constraints:
    """``Constraints`` from the limit options (``None`` = no such constraint)."""
    from mlsysopt.nas.constraints import Constraints

    check_limits(mode, limits)
    return Constraints.from_limits(mode=mode, **limits)


def limits_for_plot(cons: Constraints) -> dict[str, tuple[float, str]]:
    """``{resource: (limit, "max" | "min")}`` for :func:`mlsysopt.report.nas.plot_pareto`."""
    return {c.resource: (c.limit, c.kind) for c in cons.constraints}


def space_info(space: SearchSpace) -> dict[str, Any]:
    """What result.json says about the space: its resources, decisions and, for a table, its statistics."""
    info: dict[str, Any] = {
        "name": space.name,
        "resources": list(space.resource_names),
        "blocks": [space.min_blocks, space.max_blocks],
        "decisions": space.decision_names(space.max_blocks),
    }
    if hasattr(space, "table_stats"):
        info["table"] = space.table_stats()
        info["data"] = "real: NAS-Bench-Graph's packaged tables (valid/test performance, latency, params)"
    else:
        info["data"] = "real training on " + ("scikit-learn's digits" if space.name == "digits" else space.name)
        info["options"] = {k: getattr(space, k) for k in ("epochs", "ops", "widths", "lr", "stem_width")}
    return info


def _jf(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def eval_record(index: int, ev: Evaluation, space: SearchSpace, cons: Constraints) -> dict[str, Any]:
    """One evaluation as result.json lists it: arch, decoded, perf, resources, constraint values, feasibility."""
    rec = {"index": index, **ev.to_dict()}
    try:
        rec["decoded"] = space.decode(ev.arch)
    except MlsysoptError:
        rec["decoded"] = None
    rec["constraints"] = {k: _jf(v) for k, v in cons.values(ev.resources).items()}
    rec["feasible"] = cons.feasible(ev.resources)
    return rec


def pareto_points(history: list[Evaluation], cons: Constraints, group: str = "") -> list[dict[str, Any]]:
    """Points for the Pareto plot (failed evaluations carry NaN performance)."""
    return [
        {"perf": ev.perf if ev.ok else math.nan, "resources": ev.resources, "feasible": cons.feasible(ev.resources),
         "group": group}
        for ev in history
    ]  # fmt: skip


def table_background(space: SearchSpace) -> dict[str, list[float]] | None:
    """Every cell of a NAS-Bench-Graph table as plot background (valid performance, params, latency)."""
    table = getattr(space, "table", None)
    if not isinstance(table, dict):
        return None
    entries = list(table.values())
    return {
        "perf": [float(e["valid_perf"]) for e in entries],
        "params": [float(e["para"]) * 1e6 for e in entries],
        "latency_ms": [float(e["latency"]) * 1000.0 for e in entries],
    }


def best_feasible_valid(background: dict[str, list[float]] | None, cons: Constraints) -> float | None:
    """Best validation performance among the background's (table's) cells that meet every constraint."""
    if background is None:
        return None
    perf = np.asarray(background["perf"], dtype=np.float64)
    ok = np.ones(perf.shape, dtype=bool)
    for c in cons.constraints:
        usage = np.asarray(background.get(c.resource, np.full(perf.shape, np.nan)), dtype=np.float64)
        ok &= usage <= c.limit if c.kind == "max" else usage >= c.limit
    return float(perf[ok].max()) if ok.any() else None


def best_feasible_test(space: SearchSpace, cons: Constraints) -> float | None:
    """Best test performance over a table's cells that meet every constraint (None: no table, or none meets them)."""
    fn = getattr(space, "best_feasible_test", None)
    return fn(cons.feasible) if callable(fn) else None


# ---------------------------------------------------------------------------- resume
def check_run_state(out: Path, resume: bool, settings: dict[str, Any]) -> Path:
    """The checkpoint path (see :func:`mlsysopt.cli.common.check_run_state`; RESUMABLE may change on resume)."""
    return common_check_run_state(out, resume, settings, RESUMABLE)


def checkpoint_evaluations(ckpt: Path) -> int:
    """How many evaluations a checkpoint already holds (0 if there is none or it cannot be read)."""
    if not ckpt.is_file():
        return 0
    import torch

    try:
        return len(torch.load(ckpt, weights_only=True).get("history", []))
    except Exception:
        return 0


# ---------------------------------------------------------------------------- printing
def _fmt(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def print_result(result: SearchResult, cons: Constraints, regret: float | None, out: Path, files: list[str]) -> None:
    """The best architecture (or why there is none), its resources against the limits, and the files written."""
    from rich.table import Table

    console.print(
        f"{result.method} on {result.space}: {len(result.history)} evaluation(s), {result.failed} failed, "
        f"{result.skipped} infeasible candidate(s) skipped, {result.wall_s:.1f} s"
    )
    best = result.best
    if best is None:
        console.print(f"[yellow]no architecture returned: {escape(result.message)}[/yellow]")
    else:
        console.print(f"best architecture: {escape(json.dumps(result.best_decoded))}")
        test = "-" if best.test_perf is None else f"{best.test_perf:.4g}"
        line = f"validation {best.perf:.4g}, test {test}"
        if regret is not None:
            line += f", regret vs the best feasible cell in the table {regret:.4g}"
        console.print(line)
        table = Table(title_justify="left")
        for col in ("resource", "value", "limit"):
            table.add_column(col, justify="left" if col == "resource" else "right")
        limits = {c.resource: c for c in cons.constraints}
        for name, v in best.resources.items():
            c = limits.get(name)
            table.add_row(name, _fmt(v), "-" if c is None else ("<= " if c.kind == "max" else ">= ") + _fmt(c.limit))
        console.print(table)
        console.print(escape(result.message))
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in files)}")
