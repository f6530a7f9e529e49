"""Helpers of ``mlsysopt serving ...``: shared options, parsing knob lists, building backends, printing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mlsysopt.cli.common import _parse_shape, console
from mlsysopt.errors import InvalidSpace, MlsysoptError

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend, Measurement
    from mlsysopt.serving.space import Space
    from mlsysopt.serving.tune import TuneResult

BACKEND_KINDS = ("real", "sim")

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


def machine_threads() -> int:
    """Threads this machine allows one knob to use: its CPU count."""
    return os.cpu_count() or 1


def build_space(base: Space, knobs: dict[str, str | None]) -> Space:
    """``base`` with any knob lists given on the command line replacing its values."""
    from mlsysopt.serving.space import Space

    option = {
        "workers": "--workers",
        "max_batch": "--max-batch",
        "batch_timeout_ms": "--timeout-ms",
        "intra_threads": "--intra",
        "inter_threads": "--inter",
    }
    values = dict(base.values)
    for knob, text in knobs.items():
        parsed = parse_list(text, option[knob], float if knob == "batch_timeout_ms" else int)
        if parsed is not None:
            values[knob] = tuple(parsed)
    return Space(**values, max_threads=base.max_threads, max_total_threads=base.max_total_threads)


def make_backend(
    kind: str,
    model: str | None,
    profile: str | None,
    input_shape: str | None,
    workdir: Path,
    requests: int,
    slo_ms: float | None,
    seed: int,
) -> tuple[Backend, str]:
    """The real engine (``--model``) or the simulator (``--profile``), and a line describing it."""
    if kind not in BACKEND_KINDS:
        raise MlsysoptError(f"unknown --backend '{kind}' (choose from: {', '.join(BACKEND_KINDS)})")
    if kind == "real":
        if model is None:
            raise MlsysoptError("--backend real needs --model (an .onnx file or zoo:cnn)")
        from mlsysopt.serving.engine import Engine
        from mlsysopt.serving.experiment import resolve_model

        served = resolve_model(model, workdir, _parse_shape(input_shape))
        engine = Engine(served, n_requests=requests, slo_ms=slo_ms, max_threads=machine_threads(), seed=seed)
        return engine, f"ONNX Runtime engine serving {served.path.name} on {engine.cores} cores (real measurements)"
    from mlsysopt.serving.experiment import resolve_profile
    from mlsysopt.serving.simulator import SimulatedEngine

    prof = resolve_profile(profile or "synthetic:32")
    sim = SimulatedEngine(prof, n_requests=requests, slo_ms=slo_ms, seed=seed)
    return sim, f"SimPy model of the engine, {prof.source} {prof.cores}-core profile ({prof.model or 'unnamed'})"


def print_measurements(rows: list[Measurement], title: str) -> None:
    """A table of measurements: configuration, latency percentiles, throughput, health."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("configuration", "rate", "mean ms", "p50", "p95", "p99", "req/s", "SLO viol.", "dropped", "state"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for m in rows:
        viol = "-" if m.violation_rate is None else f"{m.violation_rate:.1%}"
        state = "[red]saturated[/red]" if m.saturated else "ok"
        table.add_row(
            m.config.label(),
            f"{m.workload.rate:g}",
            f"{m.mean_ms:.2f}",
            f"{m.p50_ms:.2f}",
            f"{m.p95_ms:.2f}",
            f"{m.p99_ms:.2f}",
            f"{m.throughput:.1f}",
            viol,
            str(m.dropped),
            state,
        )
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


def config_from_file(path: Path) -> dict[str, Any]:
    """Knobs from a JSON file: a tune result.json (its ``best``) or a plain ``{"workers": 2, ...}`` dict."""
    import json

    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise MlsysoptError(f"--config {path}: not valid JSON ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("best"), dict):
        data = data["best"]
    if not isinstance(data, dict):
        raise MlsysoptError(f"--config {path}: expected a JSON object of knobs")
    return data
