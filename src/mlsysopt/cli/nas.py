"""``mlsysopt nas ...``: search architectures under resource constraints (EPNAS and baselines), list the spaces."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import SeedOpt, console, err_console, progress_bar
from mlsysopt.errors import MlsysoptError

nas_app = typer.Typer(
    help="EPNAS: progressive architecture search with a performance predictor under resource constraints.",
    no_args_is_help=True,
)

SPACE_HELP = "nasbench-graph:<dataset> (table look-ups), digits (real training) or cifar10:/folder (ImageFolder)."
OutOpt = Annotated[Path, typer.Option("--out", help="Run directory for result.json, checkpoint.pt and the plots.")]


def _opt(flag: str, text: str) -> Any:
    return typer.Option(flag, help=text)


def parse_ops(value: str | None) -> list[str] | None:
    """``"conv3x3,identity"`` -> ``["conv3x3", "identity"]``; None stays None."""
    if value is None:
        return None
    ops = [o.strip() for o in value.split(",") if o.strip()]
    if not ops:
        raise MlsysoptError(f"--ops '{value}' names no op")
    return ops


# ---------------------------------------------------------------------------- search
@nas_app.command("search")
def nas_search(
    out: OutOpt,
    space: Annotated[str, _opt("--space", SPACE_HELP)] = "nasbench-graph:cora",
    method: Annotated[str, _opt("--method", "epnas | random | evolution | reinforce | pnas | tpe.")] = "epnas",
    budget: Annotated[int, _opt("--budget", "Architectures to evaluate.")] = 100,
    max_latency_ms: Annotated[float | None, _opt("--max-latency-ms", "Latency limit (ms).")] = None,
    max_params: Annotated[float | None, _opt("--max-params", "Parameter-count limit.")] = None,
    max_flops: Annotated[float | None, _opt("--max-flops", "FLOPs limit (CNN spaces).")] = None,
    min_intensity: Annotated[
        float | None, _opt("--min-intensity", "Least compute intensity, FLOPs/byte (CNN spaces).")
    ] = None,
    constraint_mode: Annotated[
        str, _opt("--constraint-mode", "hard (never return an infeasible arch) | soft (MnasNet reward).")
    ] = "hard",
    workers: Annotated[int, _opt("--workers", "Candidates evaluated in parallel.")] = 1,
    backend: Annotated[str, _opt("--backend", "local (process pool) | ray.")] = "local",
    address: Annotated[str | None, _opt("--address", "Ray cluster address (--backend ray).")] = None,
    epochs: Annotated[int | None, _opt("--epochs", "Training epochs per candidate (CNN spaces).")] = None,
    ops: Annotated[str | None, _opt("--ops", "Comma-separated ops of the CNN space.")] = None,
    max_blocks: Annotated[int | None, _opt("--max-blocks", "Most blocks (CNN spaces).")] = None,
    lr: Annotated[float | None, _opt("--lr", "Adam learning rate (CNN spaces).")] = None,
    seed: SeedOpt = 0,
    resume: Annotated[bool, _opt("--resume", "Continue RUN_DIR/checkpoint.pt after a stop.")] = False,
) -> None:
    """Search the space for the best architecture that meets every resource constraint.

    Writes RUN_DIR/result.json (every evaluation with its resources and constraint values, the best feasible
    architecture), checkpoint.pt (after every batch; --resume continues it, also with a larger --budget),
    settings.json, pareto.png and best_so_far.png.
    """
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    limits = {"max_latency_ms": max_latency_ms, "max_params": max_params, "max_flops": max_flops}
    cnn = {"epochs": epochs, "ops": parse_ops(ops), "max_blocks": max_blocks, "lr": lr}
    limits["min_intensity"] = min_intensity
    options = SearchOptions(space=space, method=method, budget=budget, limits=limits, mode=constraint_mode,
                            workers=workers, backend=backend, address=address, space_options=cnn,
                            seed=seed)  # fmt: skip
    from mlsysopt.runtime import make_executor

    with make_executor(backend, workers, address) as executor:  # a missing Ray fails here, before any work
        with err_console.status(f"loading the space {escape(space)}"):
            job = prepare_search(out, options, resume)  # every input checked; nothing written yet
        cons = job.constraints
        err_console.print(f"{method} on {job.space.name}: budget {budget}, constraints {escape(cons.describe())}")
        best = [math.nan]
        with progress_bar() as progress:
            task = progress.add_task("searching", total=budget, completed=job.resumed_from)

            def on_eval(ev: Any, n: int) -> None:
                if ev.ok and math.isfinite(ev.perf) and (not cons.hard or cons.feasible(ev.resources)):
                    best[0] = ev.perf if math.isnan(best[0]) else max(best[0], ev.perf)
                label = "searching" if math.isnan(best[0]) else f"best {best[0]:.4g}"
                progress.update(task, completed=n, description=label)

            done = job.run(executor, on_eval=on_eval)
    _print_result(done, job, out)


def _fmt(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _print_result(done: Any, job: Any, out: Path) -> None:
    """The best architecture (or why there is none), its resources against the limits, and the files written."""
    from rich.table import Table

    result, regret = done.result, done.regret
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
        limits = {c.resource: c for c in job.constraints.constraints}
        for name, v in best.resources.items():
            c = limits.get(name)
            table.add_row(name, _fmt(v), "-" if c is None else ("<= " if c.kind == "max" else ">= ") + _fmt(c.limit))
        console.print(table)
        console.print(escape(result.message))
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in done.files)}")


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
