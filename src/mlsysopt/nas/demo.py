"""The ``nas`` section of ``mlsysopt demo``: EPNAS vs random search under two resource constraints.

Registered in :data:`mlsysopt.demo.BUILDERS` as ``"mlsysopt.nas.demo:demo_section"``. About half a minute:

1. NAS-Bench-Graph on cora (real table: 26,206 GNN cells with measured validation/test accuracy, latency and
   parameters): EPNAS and random search, :data:`GRAPH_BUDGET` evaluations each, latency <= the table's median
   latency and params <= its median params (hard). Regret = best test accuracy among the table's feasible cells
   minus the test accuracy of the returned cell.
2. A tiny EPNAS search on scikit-learn's digits (real training, :data:`DIGITS_BUDGET` candidates of at most 2
   blocks, :data:`DIGITS_EPOCHS` epochs, 2 worker processes) under params and FLOPs limits set near the medians of
   40 random architectures of that space (3,698 params, 467,178 FLOPs), with EPNAS's default knobs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mlsysopt.nas.report import regret, returned_feasible
from mlsysopt.report.html import Section

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext
    from mlsysopt.nas.constraints import Constraints
    from mlsysopt.nas.search import SearchResult
    from mlsysopt.nas.spaces.base import SearchSpace

GRAPH_DATASET = "cora"
GRAPH_BUDGET = 40
GRAPH_METHODS = ("epnas", "random")
DIGITS_BUDGET = 4
DIGITS_EPOCHS = 3
DIGITS_LIMITS = {"max_params": 3700.0, "max_flops": 470_000.0}
COLUMNS = ["method", "returned architecture", "valid accuracy", "test accuracy", "regret", "feasible", "evaluations"]


def demo_section(ctx: DemoContext) -> list[Section]:
    """EPNAS vs random on NAS-Bench-Graph cora, then a tiny EPNAS search on digits with real training."""
    return [_graph(ctx), _digits(ctx)]


def _short(space: SearchSpace, decoded: dict[str, Any] | None) -> str:
    """A one-line name of a decoded architecture."""
    if decoded is None:
        return "none (nothing feasible)"
    if "ops" in decoded:
        return f"link {decoded['link']} ops {'/'.join(decoded['ops'][: decoded['blocks']])}"
    return " | ".join(f"{b['op_a']}+{b['op_b']}→{b['width']}" for b in decoded["blocks"])


def _row(space: SearchSpace, cons: Constraints, res: SearchResult, top: float | None) -> list[Any]:
    best = res.best
    if best is None:
        return [res.method, _short(space, None), "-", "-", "-" if top is None else top, False, len(res.history)]
    test = best.test_perf if best.test_perf is not None else math.nan
    gap = regret(top, best.test_perf)
    return [res.method, _short(space, res.best_decoded), best.perf, test, "-" if gap is None else gap,
            returned_feasible(res, space, cons), len(res.history)]  # fmt: skip


def _record(space: SearchSpace, cons: Constraints, res: SearchResult, top: float | None) -> dict[str, Any]:
    best = res.best
    out = res.to_dict()
    out.pop("history")
    out["best_so_far"] = [None if math.isnan(v) else v for v in res.best_so_far()]
    out["best_test_perf"] = None if best is None else best.test_perf
    out["regret"] = regret(top, None if best is None else best.test_perf)
    out["feasible"] = returned_feasible(res, space, cons)
    return out


def _graph(ctx: DemoContext) -> Section:
    from mlsysopt.nas import best_feasible_test, get_method, get_space, median_constraints, plot_search, run_search

    out = ctx.out / "nas"
    out.mkdir(parents=True, exist_ok=True)
    ctx.step(f"nas: loading the NAS-Bench-Graph table of {GRAPH_DATASET}")
    space = get_space(f"nasbench-graph:{GRAPH_DATASET}")
    stats = space.table_stats()
    cons = median_constraints(space)
    top = best_feasible_test(space, cons)
    results = []
    for method in GRAPH_METHODS:
        ctx.step(f"nas: {method} on {space.name} ({GRAPH_BUDGET} evaluations)")
        results.append(run_search(get_method(method, space, cons, budget=GRAPH_BUDGET, seed=ctx.seed), workers=2))
    plot_search(
        results,
        space,
        cons,
        out / "graph_pareto.png",
        out / "graph_best_so_far.png",
        pareto_title=f"NAS-Bench-Graph {GRAPH_DATASET}: EPNAS vs random ({GRAPH_BUDGET} evaluations each)",
        curve_title=f"NAS-Bench-Graph {GRAPH_DATASET}: best feasible validation accuracy so far",
        perf_label="validation accuracy",
    )
    ctx.results["nas_graph"] = {
        "data": "real: NAS-Bench-Graph's packaged table (accuracy, latency and params measured by its authors)",
        "space": space.name,
        "table": stats,
        "constraints": cons.to_dict(),
        "best_feasible_test_in_table": top,
        "methods": {r.method: _record(space, cons, r, top) for r in results},
    }
    ctx.results["nas_graph"]["headline"] = {
        f"{name} regret on {GRAPH_DATASET}": "nothing feasible" if rec["regret"] is None else f"{rec['regret']:.4f}"
        for name, rec in ctx.results["nas_graph"]["methods"].items()
    }
    rows = [_row(space, cons, r, top) for r in results]
    rows.append(["best feasible in the table", "(oracle)", "-", top, 0.0, True, int(stats["n_archs"])])
    text = (
        f"Real data: NAS-Bench-Graph's table for {GRAPH_DATASET} ({int(stats['n_archs']):,} GNN cells, each with the "
        f"validation and test accuracy, latency and parameter count its authors measured). Constraints (hard): "
        f"latency <= {stats['median_latency_ms']:.3g} ms and params <= {stats['median_params']:,.0f}, the table's "
        f"medians. A search sees only validation accuracy; the table reports the test accuracy of the returned cell. "
        f"Regret = best test accuracy among the feasible cells of the whole table minus that of the returned cell."
    )
    return Section(
        heading=f"NAS: EPNAS vs random on NAS-Bench-Graph ({GRAPH_DATASET})",
        text=text,
        table=rows,
        columns=COLUMNS,
        images=["nas/graph_pareto.png", "nas/graph_best_so_far.png"],  # relative to the run directory
        captions=[
            "validation accuracy vs each resource (grey: every cell in the table; dashed: the limit; star: returned)",
            "best feasible validation accuracy after each evaluation",
        ],
        anchor="nas",
    )


def _digits(ctx: DemoContext) -> Section:
    from mlsysopt.nas import Constraints, get_method, get_space, plot_search, run_search
    from mlsysopt.runtime import make_executor

    out = ctx.out / "nas"
    space = get_space("digits", max_blocks=2, epochs=DIGITS_EPOCHS, latency_runs=5)
    cons = Constraints.from_limits(**DIGITS_LIMITS)
    searcher = get_method("epnas", space, cons, budget=DIGITS_BUDGET, seed=ctx.seed)
    ctx.step(f"nas: EPNAS on digits, {DIGITS_BUDGET} candidates trained for real on 2 worker processes")
    with make_executor("local", 2) as executor:
        res = run_search(searcher, executor, workers=2)
    plot_search(
        [res],
        space,
        cons,
        out / "digits_pareto.png",
        out / "digits_best_so_far.png",
        pareto_title=f"digits: EPNAS, {len(res.history)} architectures trained ({cons.describe()})",
        curve_title="digits: EPNAS",
        perf_label="validation accuracy",
    )
    ctx.results["nas_digits"] = {
        "data": "real: scikit-learn's bundled digits images, every candidate trained here",
        "space": space.name,
        "epochs": DIGITS_EPOCHS,
        "max_blocks": 2,
        "constraints": cons.to_dict(),
        "result": _record(space, cons, res, None),
        "history": [ev.to_dict() for ev in res.history],
    }
    acc = ctx.results["nas_digits"]["result"]["best_test_perf"]
    ctx.results["nas_digits"]["headline"] = {"EPNAS on digits, test accuracy": "-" if acc is None else f"{acc:.3f}"}
    cost = sum(ev.cost_s for ev in res.history if math.isfinite(ev.cost_s))
    text = (
        f"Real data and real training: scikit-learn's digits (8x8 images, 60/20/20 split). Each candidate is a "
        f"CNN of 1-2 cells trained for {DIGITS_EPOCHS} epochs in one of 2 worker processes; params and FLOPs come "
        f"from the built model, latency is measured on this CPU. Limits (hard): {cons.describe()[6:]}, near the "
        f"medians of random architectures of this space. {res.message}. Wall time {res.wall_s:.1f} s for "
        f"{cost:.1f} s of training and measuring."
    )
    return Section(
        heading="NAS: a tiny EPNAS search on digits (real training, 2 workers)",
        text=text,
        table=[_row(space, cons, res, None)],
        columns=COLUMNS,
        images=["nas/digits_pareto.png", "nas/digits_best_so_far.png"],
        captions=["validation accuracy vs params, FLOPs, latency and intensity", "best feasible accuracy so far"],
    )
