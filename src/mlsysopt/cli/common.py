"""Shared pieces of the command line: consoles, the options every command family shares, input parsing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from mlsysopt.errors import InvalidOption, MlsysoptError

if TYPE_CHECKING:
    from rich.progress import Progress

    from mlsysopt.graph.ir import CompGraph

# emoji=False: a ':name:' in a path or message stays as typed
console = Console(highlight=False, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


# ---------------------------------------------------------------------------- shared options
SourceArg = Annotated[
    str,
    typer.Argument(
        metavar="SOURCE",
        help="A graph or model: .npz, .onnx, WfCommons .json, recipe name, zoo:NAME, file.py:factory or "
        "package.module:factory (a factory source runs its Python code).",
    ),
]
NumTasksOpt = Annotated[int, typer.Option("--num-tasks", min=1, help="Tasks of a WfCommons recipe.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Random seed.")]
InputShapeOpt = Annotated[
    str | None,
    typer.Option("--input-shape", help="Example-input shape for a factory returning a bare module, e.g. 1,3,32,32."),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Run folder (created after the inputs are checked).")]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Parallel worker processes (or Ray tasks).")]
BackendOpt = Annotated[str, typer.Option("--backend", help="Where parallel work runs: local (process pool) | ray.")]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address", help="With --backend ray: auto, or HOST:PORT of a Ray head (default: a private instance)."
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--timeout", min=0.0, help="Wall-clock budget in seconds (stop, checkpointed, when it is spent)."),
]


# ---------------------------------------------------------------------------- parsing and checks
def parse_shape(value: str | None, option: str = "--input-shape") -> tuple[int, ...] | None:
    """``"1,3,32,32"`` (or ``1x3x32x32``) -> ``(1, 3, 32, 32)``; one clear error naming ``option`` otherwise."""
    if value is None:
        return None
    try:
        shape = tuple(int(v) for v in value.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise InvalidOption(f"{option} '{value}' is not a comma-separated list of integers, e.g. 1,3,32,32") from None
    if not shape or any(s <= 0 for s in shape):
        raise InvalidOption(f"{option} '{value}' must list positive sizes, e.g. 1,3,32,32")
    return shape


def load_source(source: str, num_tasks: int = 100, seed: int = 0, input_shape: str | None = None) -> CompGraph:
    """The CompGraph of any source (see :mod:`mlsysopt.graph.importers.source`)."""
    from mlsysopt.graph.importers.source import resolve_source

    return resolve_source(source).graph(num_tasks=num_tasks, seed=seed, input_shape=parse_shape(input_shape))


def check_suffix(path: Path, suffix: str, option: str) -> None:
    """One clear error when an output file does not end in ``suffix`` or is a folder."""
    if path.suffix.lower() != suffix:
        raise MlsysoptError(f"{option} {path}: expected a {suffix} file name")
    if path.is_dir():
        raise MlsysoptError(f"{option} {path} is a directory")


def check_parallel(workers: int, backend: str, address: str | None) -> None:
    """Check ``--backend``/``--address`` (cheap, no Ray import) and warn when local workers exceed the cores."""
    from mlsysopt.runtime import check_backend

    check_backend(backend, address)
    cores = os.cpu_count() or 1
    if backend == "local" and workers > cores:
        err_console.print(
            f"warning: --workers {workers} is more than this machine's {cores} cores: they will share them"
        )


def fmt(v: float) -> str:
    """A number for a table: thousands separators when large, 4 significant digits otherwise."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def progress_bar() -> Progress:
    """A rich progress bar on stderr: description, bar, done/total, elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=err_console, transient=False)
