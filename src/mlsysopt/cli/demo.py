"""``mlsysopt demo``: every system's demo section into one run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from mlsysopt.cli.common import SeedOpt, console, err_console
from mlsysopt.errors import InvalidOption
from mlsysopt.io import RunDir
from mlsysopt.report.html import fmt_value
from mlsysopt.store.run import RunStore


# ---------------------------------------------------------------------------- demo
def demo(
    out: Annotated[Path, typer.Option("--out", help="Run directory for index.html, result.json, plots.")] = Path(
        "runs/demo"
    ),
    seed: SeedOpt = 0,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated section names (default: all).")] = None,
) -> None:
    """Run every system's demo section and write RUN_DIR/index.html, result.json, summary.json and the plots.

    The page opens with a summary of every system against its baseline and embeds its images (one file).
    """
    from mlsysopt import demo as demo_mod  # deferred: the demo's sections import torch, Ray and matplotlib

    picked = None if only is None else [s.strip() for s in only.split(",") if s.strip()]
    if picked is not None and not picked:
        raise InvalidOption(f"--only '{only}' names no section (have: {', '.join(demo_mod.BUILDERS)})")
    names = demo_mod.select(picked)
    run = RunDir(out, {"command": "demo", "seed": seed, "sections": names}, checkpoint=None, sink=RunStore).check()
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with run, Progress(*columns, console=err_console, transient=False) as progress:
        task = progress.add_task("demo", total=len(names))
        current: list[str] = []

        def on_step(name: str, message: str) -> None:
            if current and current[-1] != name:
                progress.advance(task)
            current.append(name)
            progress.update(task, description=escape(message))

        result = demo_mod.run_demo(out, seed=seed, only=names, on_step=on_step)
        progress.update(task, completed=len(names), description="demo done")
    _print_demo(result, out)


def _print_demo(result: dict[str, Any], out: Path) -> None:
    """The page's summary table: every system's headline against its baseline, and the sections' timings."""
    # deferred: mlsysopt.report.overview imports matplotlib
    from mlsysopt.report.overview import headlines

    table = Table(title="demo summary", title_justify="left")
    for col in ("system", "measure", "method", "baseline", "unit", "better?"):
        table.add_column(col)
    rows, errors = headlines(result)
    for h in rows:
        base = "-" if h.baseline_value is None else f"{h.baseline} {fmt_value(h.baseline_value)}"
        cells = (h.system, h.measure, f"{h.ours} {fmt_value(h.ours_value)}", base, h.unit, h.verdict())
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    for error in errors:
        err_console.print(f"[yellow]warning:[/yellow] {escape(error)}")
    timings = result.get("timings_s", {})
    console.print(
        " · ".join(f"{escape(n)} {t:.1f} s" for n, t in timings.items()) + f" (total {sum(timings.values()):.1f} s)"
    )
    console.print(f"open {escape(str(out / 'index.html'))} (one self-contained file: images embedded)")
