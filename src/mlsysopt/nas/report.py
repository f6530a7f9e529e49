"""What a NAS search is judged by: regret against a table's oracle, Pareto points, result records and the plots.

Shared by ``mlsysopt nas search``, the demo and the benchmark. *Regret* (NAS-Bench-Graph) is the best test
performance among the table's cells that meet every constraint minus the test performance of the returned cell; a
search that returns nothing (or, where the caller says so, an infeasible cell) scores the whole best feasible value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import MlsysoptError

if TYPE_CHECKING:
    from mlsysopt.nas.constraints import Constraints
    from mlsysopt.nas.search import SearchResult
    from mlsysopt.nas.spaces.base import Evaluation, SearchSpace


# ---------------------------------------------------------------------------- the table's oracle
def table_background(space: SearchSpace) -> dict[str, list[float]] | None:
    """Every cell of a NAS-Bench-Graph table as plot background (valid performance, params, latency).

    Args:
        space: Any space; only a table space (``space.table`` a dict) gives a background.

    Returns:
        dict[str, list[float]] | None: ``perf`` (validation), ``params`` and ``latency_ms`` per cell; None without
        a table.
    """
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
    """Best validation performance among the background's (table's) cells that meet every constraint.

    Args:
        background: Output of :func:`table_background` (None: no table).
        cons: The constraints a cell must meet (a missing resource counts as violated).

    Returns:
        float | None: The best validation performance, or None without a table or a feasible cell.
    """
    if background is None:
        return None
    perf = np.asarray(background["perf"], dtype=np.float64)
    ok = np.ones(perf.shape, dtype=bool)
    for c in cons.constraints:
        usage = np.asarray(background.get(c.resource, np.full(perf.shape, np.nan)), dtype=np.float64)
        ok &= usage <= c.limit if c.kind == "max" else usage >= c.limit
    return float(perf[ok].max()) if ok.any() else None


def best_feasible_test(space: SearchSpace, cons: Constraints) -> float | None:
    """Best test performance over a table's cells that meet every constraint (None: no table, or none meets them).

    Args:
        space: The search space (only table spaces answer).
        cons: The constraints a cell must meet.

    Returns:
        float | None: The best test performance, or None.
    """
    fn = getattr(space, "best_feasible_test", None)
    return fn(cons.feasible) if callable(fn) else None


def returned_feasible(result: SearchResult, space: SearchSpace, cons: Constraints) -> bool:
    """Whether the search returned an architecture and it meets every constraint (on the space's resources).

    Args:
        result: The search result.
        space: The space (its cheap ``resources`` judge the returned architecture).
        cons: The constraints.

    Returns:
        bool: True when an architecture was returned and it meets every constraint.
    """
    return result.best is not None and cons.feasible(space.resources(result.best.arch))


def regret(top: float | None, test: float | None, feasible: bool = True) -> float | None:
    """``top - test``; the whole of ``top`` when nothing (or nothing feasible) was returned; None without a table.

    Args:
        top: the best feasible test performance in the table (:func:`best_feasible_test`).
        test: the test performance of the returned architecture (None: nothing returned).
        feasible: whether the returned architecture counts (False: it scores like returning nothing).
    """
    if top is None:
        return None
    return top - test if feasible and test is not None else top


class TableOracle:
    """What a table space knows about the feasible cells, to judge a returned architecture by its *validation*
    performance (the searcher's objective) and its test performance.

    * ``val_regret(v)``: best feasible validation performance minus ``v`` (``v`` None: nothing returned, which scores
      the whole best value, as :func:`regret` does for test);
    * ``rank_pct(v)``: the percentage of feasible cells with a strictly better validation performance (0 = the best);
    * ``top1(v)``: whether ``v`` is in the top 1 % of the feasible cells (``rank_pct < 1``).

    Args:
        space: a table space (``space.table`` with ``valid_perf``, ``perf``, ``latency``, ``para``).
        cons: the constraints the cells must meet.
    """

    def __init__(self, space: SearchSpace, cons: Constraints) -> None:
        bg = table_background(space)
        if bg is None:
            raise MlsysoptError(f"{space.name} has no table: no oracle")
        table = space.table  # type: ignore[attr-defined]
        entries = list(table.values())
        valid = np.array([float(e["valid_perf"]) for e in entries])
        test = np.array([float(e["perf"]) for e in entries])
        res = [{"params": float(round(float(e["para"]) * 1e6)), "latency_ms": float(e["latency"]) * 1e3}
               for e in entries]  # fmt: skip
        ok = np.array([cons.feasible(r) for r in res], dtype=bool)
        if not ok.any():
            raise MlsysoptError(f"no cell of {space.name} meets {cons.describe()}")
        self.valid = np.sort(valid[ok])
        self.best_valid, self.best_test = float(self.valid[-1]), float(test[ok].max())
        self.feasible_cells = int(ok.sum())

    def val_regret(self, v: float | None) -> float:
        """Best feasible validation performance minus ``v`` (the whole of it when nothing was returned)."""
        return self.best_valid - (0.0 if v is None else float(v))

    def rank_pct(self, v: float | None) -> float:
        """Percentage of feasible cells strictly better than ``v`` on validation (100 when nothing was returned)."""
        if v is None:
            return 100.0
        return 100.0 * float(len(self.valid) - np.searchsorted(self.valid, float(v), side="right")) / len(self.valid)

    def top1(self, v: float | None) -> bool:
        """Whether ``v`` is among the top 1 % of the feasible cells."""
        return self.rank_pct(v) < 1.0


# ---------------------------------------------------------------------------- records
def _jf(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def eval_record(index: int, ev: Evaluation, space: SearchSpace, cons: Constraints) -> dict[str, Any]:
    """One evaluation as result.json lists it: arch, decoded, perf, resources, constraint values, feasibility.

    Args:
        index: Position of the evaluation in the history.
        ev: The evaluation.
        space: The space (decodes the architecture).
        cons: The constraints.

    Returns:
        dict[str, Any]: :meth:`Evaluation.to_dict` plus ``index``, ``decoded`` (None if it cannot be decoded),
        ``constraints`` (value per constraint, <= 0 satisfied) and ``feasible``.
    """
    rec = {"index": index, **ev.to_dict()}
    try:
        rec["decoded"] = space.decode(ev.arch)
    except MlsysoptError:
        rec["decoded"] = None
    rec["constraints"] = {k: _jf(v) for k, v in cons.values(ev.resources).items()}
    rec["feasible"] = cons.feasible(ev.resources)
    return rec


def space_info(space: SearchSpace) -> dict[str, Any]:
    """What result.json says about the space: its resources, decisions and, for a table, its statistics.

    Args:
        space: The search space.

    Returns:
        dict[str, Any]: ``name``, ``resources``, ``blocks``, ``decisions``, ``data`` and the table statistics, your
        space's sources or the CNN options.
    """
    info: dict[str, Any] = {
        "name": space.name,
        "resources": list(space.resource_names),
        "blocks": [space.min_blocks, space.max_blocks],
        "decisions": space.decision_names(space.max_blocks),
    }
    if hasattr(space, "table_stats"):
        info["table"] = space.table_stats()
        info["data"] = "real: NAS-Bench-Graph's packaged tables (valid/test performance, latency, params)"
    elif hasattr(space, "objective_spec"):
        info["data"] = "your training function"
        info["space_source"], info["objective"] = space.space_spec, space.objective_spec  # type: ignore[attr-defined]
        info["direction"] = space.direction  # type: ignore[attr-defined]
        info["measured"] = list(getattr(space, "measured", ()))
    else:
        info["data"] = "real training on " + ("scikit-learn's digits" if space.name == "digits" else space.name)
        info["options"] = {k: getattr(space, k) for k in ("epochs", "ops", "widths", "lr", "stem_width")}
    return info


# ---------------------------------------------------------------------------- plots
def limits_for_plot(cons: Constraints) -> dict[str, tuple[float, str]]:
    """``{resource: (limit, "max" | "min")}`` for :func:`mlsysopt.report.nas.plot_pareto`."""
    return {c.resource: (c.limit, c.kind) for c in cons.constraints}


def pareto_points(results: Sequence[SearchResult], cons: Constraints) -> list[dict[str, Any]]:
    """Every evaluation of every result as a Pareto-plot point, grouped by method (failed ones carry NaN).

    Args:
        results: Search results (one group per method).
        cons: The constraints that set each point's feasibility.

    Returns:
        list[dict[str, Any]]: One point per evaluation: ``perf``, ``resources``, ``feasible`` and ``group``.
    """
    return [
        {"perf": ev.perf if ev.ok else math.nan, "resources": ev.resources, "feasible": cons.feasible(ev.resources),
         "group": r.method}
        for r in results
        for ev in r.history
    ]  # fmt: skip


def plot_search(
    results: Sequence[SearchResult],
    space: SearchSpace,
    cons: Constraints,
    pareto_png: str | Path,
    curve_png: str | Path,
    pareto_title: str,
    curve_title: str,
    perf_label: str = "validation performance",
) -> list[Path]:
    """The Pareto view (over the table's cells when there is a table) and the best-feasible-so-far curves.

    Args:
        results: Search results to draw.
        space: The space (its table, if any, is drawn as background).
        cons: The constraints (drawn as limits).
        pareto_png: Output path of the Pareto plot.
        curve_png: Output path of the best-so-far plot.
        pareto_title: Title of the Pareto plot.
        curve_title: Title of the best-so-far plot.
        perf_label: Axis label of the performance.

    Returns:
        list[Path]: The written plot files.
    """
    from mlsysopt.report.nas import plot_best_so_far, plot_pareto  # deferred: mlsysopt.report.nas imports matplotlib

    background = table_background(space)
    chosen = [{"perf": r.best.perf, "resources": r.best.resources, "group": r.method} for r in results if r.best]
    return [
        plot_pareto(
            pareto_points(results, cons),
            space.resource_names,
            pareto_png,
            limits=limits_for_plot(cons),
            chosen=chosen,
            background=background,
            perf_label=perf_label,
            title=pareto_title,
        ),
        plot_best_so_far(
            {r.method: r.best_so_far() for r in results},
            curve_png,
            reference=best_feasible_valid(background, cons),
            reference_label="best feasible validation in the table",
            ylabel=f"best feasible {perf_label}",
            title=curve_title,
        ),
    ]
