"""Helpers of ``mlsysopt serving ...``: shared options, parsing comma-separated lists, printing measurements."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlsysopt.cli.common import console
from mlsysopt.errors import InvalidSpace

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Measurement
    from mlsysopt.serving.tuning import TuneResult

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="An .onnx file with a dynamic batch axis, or zoo:resnet|cnn|mobilenet|transformer."),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="For --backend sim: a profile.json from 'serving profile', or synthetic[:CORES] (default synthetic:32).",
    ),
]
InputShapeOpt = Annotated[
    str | None, typer.Option("--input-shape", help="Per-request input shape when the model's dims are dynamic.")
]
OutOpt = Annotated[Path, typer.Option("--out", help="Run directory for result.json and the plots.")]
RequestsOpt = Annotated[
    int, typer.Option("--requests", min=10, help="Requests per measurement (Poisson arrivals, open loop).")
]
SloOpt = Annotated[float | None, typer.Option("--slo-ms", min=0.0, help="p99 latency SLO in milliseconds.")]
KnobOpt = Annotated[str | None, typer.Option(help="Comma-separated values of this knob.")]


def parse_list(value: str | None, option: str, cast: type = int) -> list | None:
    """``'1,2,4'`` -> ``[1, 2, 4]`` (None stays None); one clear error naming the option otherwise."""
    if value is None:
        return None
    try:
        items = [cast(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise InvalidSpace(f"{option} '{value}': expected comma-separated numbers, e.g. 1,2,4") from None
    if not items:
        raise InvalidSpace(f"{option} '{value}' lists no values: the space would be empty")
    return items


def print_measurements(rows: list[Measurement], title: str) -> None:
    """A table of measurements: configuration, latency percentiles, throughput, health."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("configuration", "rate", "mean ms", "p50", "p95", "p99", "req/s", "SLO viol.", "dropped", "state"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for m in rows:
        viol = "-" if m.violation_rate is None else f"{m.violation_rate:.1%}"
        stats = (m.mean_ms, m.p50_ms, m.p95_ms, m.p99_ms)
        state = "[red]saturated[/red]" if m.saturated else "ok"
        table.add_row(
            m.config.label(), f"{m.workload.rate:g}", *(f"{v:.2f}" for v in stats), f"{m.throughput:.1f}", viol,
            str(m.dropped), state,
        )  # fmt: skip
    console.print(table)


def print_tuning(result: TuneResult, out: Path, space_size: int) -> None:
    """The tuning outcome: best configuration and its measurement, the SLO verdict, where the files are."""
    n = len(result.steps)
    console.print(f"{n} measurements over a space of {space_size} configurations ({n / space_size:.1%})")
    if result.best_measurement is not None:
        print_measurements([result.best_measurement], "best configuration found")
    if result.message:
        colour = "yellow" if result.slo_met is False else "white"
        console.print(f"[{colour}]{result.message}[/{colour}]")
    console.print(f"wrote {out / 'result.json'}, {out / 'steps.png'}, {out / 'heatmap.png'}")
