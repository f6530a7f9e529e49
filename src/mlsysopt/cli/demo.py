"""``mlsysopt demo``: every system's demo section into one run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import SeedOpt, console, err_console


# ---------------------------------------------------------------------------- demo
def demo(
    out: Annotated[Path, typer.Option("--out", help="Run directory for index.html, result.json, plots.")] = Path(
        "runs/demo"
    ),
    seed: SeedOpt = 0,
    only: Annotated[str | None, typer.Option("--only", help="Comma-separated section names (default: all).")] = None,
) -> None:
    """Run every system's demo section and write RUN_DIR/index.html, result.json and the plots."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from mlsysopt import demo as demo_mod
    from mlsysopt.io import RunDir

    names = demo_mod.select([s.strip() for s in only.split(",") if s.strip()] if only else None)
    run = RunDir(out, {"command": "demo", "seed": seed, "sections": names}, checkpoint=None).check()
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
    """One table of every section's headline figures (placements: makespan and SLR; others: their ``headline``)."""
    from rich.table import Table

    table = Table(title="demo", title_justify="left")
    for col in ("section", "item", "result"):
        table.add_column(col)
    for key, res in result.items():
        if not isinstance(res, dict):
            continue
        for label, r in res.get("placements", {}).items():
            table.add_row(key, label, f"makespan {r['makespan']:.4g} s, SLR {r['slr']:.3f}")
        for label, text in res.get("headline", {}).items():
            table.add_row(key, escape(str(label)), escape(str(text)))
    console.print(table)
    console.print(f"open {escape(str(out / 'index.html'))}")
