"""Helpers of ``mlsysopt serving ...``: serving's own options, parsing comma-separated lists, printing results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlsysopt.cli.common import console, err_console, fmt
from mlsysopt.errors import InvalidSpace
from mlsysopt.report.labels import SERVING_LABEL
from mlsysopt.serving.jobs import state
from mlsysopt.serving.space import Config

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Measurement

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="An .onnx file with a dynamic batch axis, zoo:NAME (resnet|cnn|mobilenet|transformer), file.py:factory "
        "or package.module:factory (a factory source runs its Python code; exported to ONNX by mlsysopt).",
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="For --engine sim: a profile.json from 'serving profile', or synthetic[:CORES] (default synthetic:32).",
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="What serves and measures: real (ONNX Runtime on this machine) | rayserve (Ray Serve over HTTP, a "
        "private local Ray or --address) | sim (SimPy model).",
    ),
]
ServeAddressOpt = Annotated[
    str | None,
    typer.Option("--address", help="With --engine rayserve: auto or HOST:PORT of a Ray head (default: private)."),
]
PortOpt = Annotated[
    int | None,
    typer.Option("--port", min=1, max=65535, help="With --engine rayserve: Ray Serve's HTTP port (default: free)."),
]
RequestsOpt = Annotated[
    int, typer.Option("--requests", min=1, help="Requests per measurement window (Poisson arrivals, open loop).")
]
WindowOpt = Annotated[
    float | None,
    typer.Option(
        "--window-s", min=0.001, max=10.0,
        help="A measurement window lasts this many seconds of arrivals or --requests, whichever comes first.",
    ),
]  # fmt: skip
SloOpt = Annotated[float | None, typer.Option("--slo-ms", min=0.0, help="p99 latency SLO in milliseconds.")]
KnobListOpt = Annotated[str | None, typer.Option(help="Comma-separated values of this knob (default: the grid's).")]
MaxOngoingOpt = Annotated[
    str | None,
    typer.Option(
        "--max-ongoing",
        help="--engine rayserve: comma-separated max_ongoing_requests per replica [default: 5 (Ray Serve's), 16, 64].",
    ),
]
PriorOpt = Annotated[
    str | None,
    typer.Option(
        "--prior",
        help="Warm start from other models: 'preset' (shipped, fitted on the tuning profiles), a prior .pt file, "
        "or earlier 'serving tune' run folders (comma-separated; a folder of run folders counts each).",
    ),
]
RateListOpt = Annotated[str, typer.Option("--rate", help="Requests/s; a list (80,120) measures or tunes each in turn.")]


def parse_list(value: str | None, option: str, cast: type = int) -> list | None:
    """``'1,2,4'`` -> ``[1, 2, 4]`` (None stays None); one clear error naming the option otherwise."""
    if value is None:
        return None
    try:
        items = [cast(v) for v in value.split(",") if v.strip()]
    except (ValueError, OverflowError):
        kind = "whole numbers" if cast is int else "numbers"
        raise InvalidSpace(f"{option} '{value}': expected comma-separated {kind}, e.g. 1,2,4") from None
    if not items:
        raise InvalidSpace(f"{option} '{value}' lists no values: the space would be empty")
    if cast is float and not all(math.isfinite(v) for v in items):
        raise InvalidSpace(f"{option} '{value}': every value must be a finite number")
    return items


def _ci(m: Measurement, key: str) -> str:
    ci = m.ci.get(key)
    value = getattr(m, key)
    if ci is None or not all(math.isfinite(v) for v in ci):
        return f"{value:.2f}"
    return f"{value:.2f} ±{(ci[1] - ci[0]) / 2:.2g}"


def print_measurements(rows: list[Measurement], title: str, slo_ms: float | None = None) -> None:
    """A table of measurements: configuration, latency (95% intervals), throughput, windows, health in words."""
    table = Table(title=title, title_justify="left")
    cols = ("configuration", "offered req/s", "mean ms", "p99 ms", "req/s", "windows", "SLO viol.", "state")
    for col in cols:
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for m in rows:
        viol = "-" if m.violation_rate is None else f"{m.violation_rate:.1%}"
        words = state(m, slo_ms)
        shown = words if words == "ok" else f"[red]{words}[/red]"
        windows = f"{m.windows}" + ("" if m.stable is None else (" stable" if m.stable else " unstable"))
        table.add_row(
            m.config.label(), f"{m.workload.rate:g}", _ci(m, "mean_ms"), _ci(m, "p99_ms"), f"{m.throughput:.1f}",
            windows, viol, shown,
        )  # fmt: skip
    console.print(table)
    print_label_legend()


def print_tuning(report: dict[str, Any], out: Path) -> None:
    """The outcome of a tune: noise, space, the answer per rate (search-time and confirmed), where the files are."""
    noise, space = report["noise"], report["space"]
    cv = noise.get("cv_mean_ms")
    console.print(
        f"machine noise: CV {'-' if cv is None else f'{cv:.1%}'} of mean latency over {noise['windows']} windows; "
        f"space {space['size']:,} configurations ({space['raw_size']:,} before merging equivalent ones, "
        f"{space['removed_fraction']:.0%} fewer)"
    )
    table = Table(title="answer per rate (decided on confirmed values)", title_justify="left")
    cols = ("rate", "search-time best", "search value", "confirmed pick", "confirmed", "default, confirmed", "SLO",
            "verdict")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if "best" in col or "pick" in col or col == "verdict" else "right")
    for r in report["per_rate"]:
        slo = {True: "met", False: "[red]SLO missed[/red]", None: "-"}[r["slo_met"]]
        table.add_row(
            f"{fmt(r['rate'])}", _label(r["search_best"]), r["search"], _label(r["confirmed_best"]), r["confirmed"],
            r["default_confirmed"], slo, r["verdict"],
        )  # fmt: skip
    console.print(table)
    print_label_legend()

    for warning in report.get("warnings", []):
        err_console.print(f"[yellow]warning: {warning}[/yellow]")
    decision = report["verdict"]["decision"]
    colour = {"use the pick": "green", "keep the default": "white"}.get(decision, "yellow")
    console.print(f"[{colour}]{report['message']}[/{colour}]")
    if report["stopped"] == "timeout":
        console.print("[yellow]the search stopped at --timeout; --resume with a larger one continues it[/yellow]")
    console.print(f"wrote {out / 'result.json'}, " + ", ".join(str(out / f) for f in report["files"]))


def print_label_legend() -> None:
    """One dim line defining a configuration label (``n2 b8 t5ms i1 o1 seq``)."""
    console.print(f"[dim]configuration: {escape(SERVING_LABEL)}[/dim]")


def _label(config: dict[str, Any]) -> str:

    return Config.from_dict(config).label()
