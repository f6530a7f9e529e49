"""``mlsysopt nas ...``: search architectures under resource constraints (EPNAS and baselines), list the spaces."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import SeedOpt, _check_run_dir, console, err_console, progress_bar
from mlsysopt.cli.nas_io import (
    OutOpt,
    best_feasible_test,
    best_feasible_valid,
    build_constraints,
    build_space,
    check_counts,
    check_limits,
    check_run_state,
    checkpoint_evaluations,
    eval_record,
    limits_for_plot,
    pareto_points,
    parse_ops,
    print_result,
    space_info,
    table_background,
)
from mlsysopt.errors import MlsysoptError

nas_app = typer.Typer(
    help="EPNAS: progressive architecture search with a performance predictor under resource constraints.",
    no_args_is_help=True,
)

SPACE_HELP = "nasbench-graph:<dataset> (table look-ups), digits (real training) or cifar10:/folder (ImageFolder)."


# ---------------------------------------------------------------------------- search
@nas_app.command("search")
def nas_search(
    out: OutOpt,
    space: Annotated[str, typer.Option("--space", help=SPACE_HELP)] = "nasbench-graph:cora",
    method: Annotated[
        str, typer.Option("--method", help="epnas | random | evolution | reinforce | pnas | tpe.")
    ] = "epnas",
    budget: Annotated[int, typer.Option("--budget", help="Architectures to evaluate.")] = 100,
    max_latency_ms: Annotated[float | None, typer.Option("--max-latency-ms", help="Latency limit (ms).")] = None,
    max_params: Annotated[float | None, typer.Option("--max-params", help="Parameter-count limit.")] = None,
    max_flops: Annotated[float | None, typer.Option("--max-flops", help="FLOPs limit (CNN spaces).")] = None,
    min_intensity: Annotated[
        float | None, typer.Option("--min-intensity", help="Least compute intensity, FLOPs/byte (CNN spaces).")
    ] = None,
    constraint_mode: Annotated[
        str, typer.Option("--constraint-mode", help="hard (never return an infeasible arch) | soft (MnasNet reward).")
    ] = "hard",
    workers: Annotated[int, typer.Option("--workers", help="Candidates evaluated in parallel.")] = 1,
    backend: Annotated[str, typer.Option("--backend", help="local (process pool) | ray.")] = "local",
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (--backend ray).")] = None,
    epochs: Annotated[int | None, typer.Option("--epochs", help="Training epochs per candidate (CNN spaces).")] = None,
    ops: Annotated[str | None, typer.Option("--ops", help="Comma-separated ops of the CNN space.")] = None,
    max_blocks: Annotated[int | None, typer.Option("--max-blocks", help="Most blocks (CNN spaces).")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Adam learning rate (CNN spaces).")] = None,
    seed: SeedOpt = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue RUN_DIR/checkpoint.pt after a stop.")] = False,
) -> None:
    """Search the space for the best architecture that meets every resource constraint.

    Writes RUN_DIR/result.json (every evaluation with its resources and constraint values, the best feasible
    architecture), checkpoint.pt (after every batch; --resume continues it, also with a larger --budget),
    settings.json, pareto.png and best_so_far.png.
    """
    _check_run_dir(out)
    check_counts(budget, workers)
    limits = {"max_latency_ms": max_latency_ms, "max_params": max_params, "max_flops": max_flops}
    limits["min_intensity"] = min_intensity
    check_limits(constraint_mode, limits)  # cheap checks first: everything after this imports torch
    cnn = {"epochs": epochs, "ops": parse_ops(ops), "max_blocks": max_blocks, "lr": lr}
    settings: dict[str, Any] = {
        "space": space,
        "method": method,
        "budget": budget,
        "constraints": {"mode": constraint_mode, "limits": {k: v for k, v in limits.items() if v is not None}},
        "space_options": {k: v for k, v in cnn.items() if v is not None},
        "seed": seed,
        "workers": workers,
        "backend": backend,
        "address": address,
    }
    from mlsysopt.runtime import make_executor

    with make_executor(backend, workers, address) as executor:  # a missing Ray fails here, before any work
        _search(out, settings, cnn, executor, resume)


def _search(out: Path, settings: dict[str, Any], cnn: dict[str, Any], executor: Any, resume: bool) -> None:
    """Check the method, space and run directory, run the search with a progress bar, write the outputs."""
    cons = build_constraints(settings["constraints"]["mode"], settings["constraints"]["limits"])
    from mlsysopt.nas.search import METHODS, get_method, run_search

    method, space, budget = settings["method"], settings["space"], settings["budget"]
    if method not in METHODS:
        raise MlsysoptError(f"unknown NAS method '{method}' (choose from: {', '.join(METHODS)})")
    ckpt = check_run_state(out, resume, settings)
    with err_console.status(f"loading the space {escape(space)}"):
        sp = build_space(space, cnn)
    searcher = get_method(method, sp, cons, budget=budget, seed=settings["seed"])
    from mlsysopt.io import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "settings.json", settings)
    before = checkpoint_evaluations(ckpt) if resume else 0
    err_console.print(f"{method} on {sp.name}: budget {budget}, constraints {escape(cons.describe())}")
    best = [math.nan]
    with progress_bar() as progress:
        task = progress.add_task("searching", total=budget, completed=before)

        def on_eval(ev: Any, n: int) -> None:
            if ev.ok and math.isfinite(ev.perf) and (not cons.hard or cons.feasible(ev.resources)):
                best[0] = ev.perf if math.isnan(best[0]) else max(best[0], ev.perf)
            label = "searching" if math.isnan(best[0]) else f"best {best[0]:.4g}"
            progress.update(task, completed=n, description=label)

        result = run_search(searcher, executor, workers=settings["workers"], checkpoint=ckpt, on_eval=on_eval)
    _write_outputs(out, sp, cons, result, settings, before)


def _write_outputs(out: Path, sp: Any, cons: Any, result: Any, settings: dict[str, Any], before: int) -> None:
    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.nas import plot_best_so_far, plot_pareto

    top = best_feasible_test(sp, cons)
    best = result.best
    returned = best.test_perf if best is not None and best.test_perf is not None else 0.0
    regret = None if top is None else top - returned  # nothing returned: regret = the best feasible value
    background = table_background(sp)
    ref = best_feasible_valid(background, cons)
    chosen = None if best is None else {"perf": best.perf, "resources": best.resources}
    plot_pareto(
        pareto_points(result.history, cons, result.method),
        sp.resource_names,
        out / "pareto.png",
        limits=limits_for_plot(cons),
        chosen=chosen,
        background=background,
        title=f"{result.method} on {sp.name}: {len(result.history)} evaluations ({cons.describe()})",
    )
    plot_best_so_far(
        {result.method: result.best_so_far()},
        out / "best_so_far.png",
        reference=ref,
        reference_label="best feasible validation in the table",
        title=f"{result.method} on {sp.name}",
    )
    files = ["result.json", "checkpoint.pt", "settings.json", "pareto.png", "best_so_far.png"]
    best_rec = None if best is None else eval_record(-1, best, sp, cons)
    if best_rec is not None:
        best_rec["index"] = next(i for i, ev in enumerate(result.history) if ev is best)
    write_json_atomic(
        out / "result.json",
        {
            "command": "nas search",
            "settings": settings,
            "space": space_info(sp),
            "method": result.method,
            "evaluations": [eval_record(i, ev, sp, cons) for i, ev in enumerate(result.history)],
            "evaluated": len(result.history),
            "resumed_from": before,
            "failed": result.failed,
            "skipped_infeasible": result.skipped,
            "wall_s": result.wall_s,
            "best": best_rec,
            "best_decoded": result.best_decoded,
            "best_test_perf": None if best is None else best.test_perf,
            "best_feasible_test_in_table": top,
            "regret": regret,
            "message": result.message,
            "plots": ["pareto.png", "best_so_far.png"],
        },
    )
    print_result(result, cons, regret, out, files)


# ---------------------------------------------------------------------------- spaces
@nas_app.command("spaces")
def nas_spaces() -> None:
    """List the search spaces: NAS-Bench-Graph datasets with their table statistics, and the CNN spaces."""
    from rich.table import Table

    from mlsysopt.nas.spaces import NASBENCH_GRAPH_DATASETS, get_space
    from mlsysopt.nas.spaces.cnn import OPS

    table = Table(title="NAS search spaces", title_justify="left")
    table.add_column("space", no_wrap=True)
    for col in ("archs", "median latency ms", "median params"):
        table.add_column(col, justify="right")
    table.add_column("evaluation")
    t0 = time.perf_counter()
    for d in NASBENCH_GRAPH_DATASETS:
        sp = get_space(f"nasbench-graph:{d}")
        st = sp.table_stats()
        row = (f"{st['n_archs']:,.0f}", f"{st['median_latency_ms']:.3g}", f"{st['median_params']:,.0f}")
        table.add_row(sp.name, *row, "table look-up")
    table.add_row("digits", "1-4 blocks", "-", "-", "training")
    table.add_row("cifar10:/folder", "1-4 blocks", "-", "-", "training")
    console.print(table)
    console.print("resources: params and latency_ms (NAS-Bench-Graph); params, flops, latency_ms and intensity (CNN).")
    console.print(f"CNN ops: {', '.join(OPS)}.")
    seconds = time.perf_counter() - t0
    console.print(
        f"NAS-Bench-Graph: real tables shipped by the nas-bench-graph package (read in {seconds:.1f} s); "
        "digits: scikit-learn's bundled images; cifar10: a folder you give (train/<class>/, test/<class>/)."
    )
