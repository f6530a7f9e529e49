"""Shared pieces of the command line: consoles, common options, input checks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from mlsysopt.errors import MlsysoptError

if TYPE_CHECKING:
    from rich.progress import Progress

    from mlsysopt.graph.ir import CompGraph

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


# ---------------------------------------------------------------------------- shared options
def _parse_shape(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        shape = tuple(int(v) for v in value.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise typer.BadParameter(f"'{value}' is not a comma-separated list of integers, e.g. 1,3,32,32") from None
    if not shape or any(s <= 0 for s in shape):
        raise typer.BadParameter(f"'{value}' must list positive sizes, e.g. 1,3,32,32")
    return shape


SourceArg = Annotated[
    str,
    typer.Argument(
        metavar="SOURCE", help="A .npz CompGraph, .onnx model, WfCommons .json, recipe name, or 'pkg.mod:factory'."
    ),
]
NumTasksOpt = Annotated[int, typer.Option("--num-tasks", min=1, help="Tasks of a WfCommons recipe.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Random seed.")]
InputShapeOpt = Annotated[
    str | None,
    typer.Option("--input-shape", help="Example-input shape for a 'module:factory' spec, e.g. 1,3,32,32."),
]


def _load_source(source: str, num_tasks: int = 100, seed: int = 0, input_shape: str | None = None) -> CompGraph:
    """Load any graph source, passing only the options its importer takes."""
    from mlsysopt.graph.importers import load_graph

    shape = _parse_shape(input_shape)
    path = Path(source)
    if path.suffix.lower() in (".npz", ".onnx", ".json") or path.exists():
        return load_graph(source)
    if ":" in source:
        return load_graph(source, input_shape=shape) if shape else load_graph(source)
    return load_graph(source, num_tasks=num_tasks, seed=seed)


def _check_suffix(path: Path, suffix: str, option: str) -> None:
    if path.suffix.lower() != suffix:
        raise MlsysoptError(f"{option} {path}: expected a {suffix} file name")
    if path.is_dir():
        raise MlsysoptError(f"{option} {path} is a directory")


def _check_run_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise MlsysoptError(f"--out {out} exists and is not a directory")


def check_run_state(out: Path, resume: bool, settings: dict[str, Any], resumable: tuple[str, ...]) -> Path:
    """The run's checkpoint path; refuse a stale checkpoint without --resume, and --resume of other settings.

    ``resumable`` names the settings that may change on resume (e.g. a larger budget or more epochs).
    """
    import json

    _check_run_dir(out)
    ckpt, saved = out / "checkpoint.pt", out / "settings.json"
    if not resume:
        if ckpt.exists():
            raise MlsysoptError(f"{ckpt} exists: pass --resume to continue it, or choose another --out")
        return ckpt
    if not ckpt.is_file():
        raise MlsysoptError(f"--resume: no checkpoint at {ckpt} (run without --resume first)")
    try:
        before = json.loads(saved.read_text())
    except (OSError, ValueError):
        raise MlsysoptError(f"--resume: {saved} is missing or unreadable, so the run cannot be checked") from None
    diff = [k for k in settings if k not in resumable and before.get(k) != settings[k]]
    if diff:
        what = ", ".join(f"{k} {before.get(k)!r} (now {settings[k]!r})" for k in diff)
        raise MlsysoptError(f"--resume: {out} was started with other settings: {what}")
    return ckpt


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def progress_bar() -> Progress:
    """A rich progress bar on stderr: description, bar, done/total, elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=err_console, transient=False)
