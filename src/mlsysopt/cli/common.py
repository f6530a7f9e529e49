"""Shared pieces of the command line: consoles, the options every command family shares, input parsing."""

from __future__ import annotations

import math
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.graph.limits import recipe_task_limit

if TYPE_CHECKING:
    from rich.progress import Progress


# C0/C1 control characters (but tab and newline), DEL, and the Unicode direction overrides that reorder a line
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe_text(text: object) -> str:
    """``text`` with terminal control characters made visible (ESC -> ``\\x1b``), so names read from files
    (tasks, devices, ops, paths) can never move the cursor, recolour or retitle the user's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", str(text))


class Interrupted(Exception):
    """Ctrl-C inside a command; the message says what was kept (the app prints it as its one line, exit 130)."""


#: Widest a table may print into a pipe or a file (where no terminal sets the width).
PIPE_WIDTH = 200


class SafeConsole(Console):
    """A rich Console that passes every string it renders (print arguments, table cells, status lines) through
    :func:`safe_text` first; markup written by mlsysopt itself still works, emoji codes are never expanded."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        """Render ``text`` after :func:`safe_text`; text that is not valid markup is shown as typed."""
        try:
            return super().render_str(safe_text(text), **kwargs)
        except MarkupError:  # e.g. a user's '[/red]' that a caller forgot to escape: print it, do not crash
            return super().render_str(safe_text(text), **{**kwargs, "markup": False})

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print like rich, but a table never cuts a cell (``giph_from_…``). In a pipe or a file (no terminal, no
        ``COLUMNS``) a table gets the width it needs, up to :data:`PIPE_WIDTH`; where it still does not fit (a
        terminal, or ``COLUMNS``), cells wrap instead of being cut."""
        tables = [obj for obj in objects if isinstance(obj, Table)]
        for table in tables:
            for column in table.columns:
                column.overflow = "fold"
        if tables and not self.is_terminal and "COLUMNS" not in os.environ:
            options = self.options.update(width=PIPE_WIDTH)
            need = min(PIPE_WIDTH, max(Measurement.get(self, options, t).maximum for t in tables))
            if need > self.width:  # rich caps a print's width at the console's: widen the console for this one
                before = self.width
                self.width = need
                try:
                    super().print(*objects, **kwargs)
                finally:
                    self.width = before
                return
        super().print(*objects, **kwargs)

    def status(self, status: Any, **kwargs: Any) -> Any:
        """A spinner line; its text goes through :meth:`render_str` like everything else."""
        return super().status(self.render_str(status) if isinstance(status, str) else status, **kwargs)


# emoji=False: a ':name:' in a path or message stays as typed
console = SafeConsole(highlight=False, emoji=False)
err_console = SafeConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def warn(message: str) -> None:
    """One ``warning: ...`` line on stderr (the text is printed literally: no markup, no control characters)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    err_console.print(f"[yellow]warning:[/yellow] {escape(line)}")


# ---------------------------------------------------------------------------- shared options
SourceArg = Annotated[
    str,
    typer.Argument(
        metavar="SOURCE",
        help="A graph or model: .npz, .onnx, WfCommons .json, recipe name, zoo:NAME, file.py:factory or "
        "package.module:factory (a factory source runs its Python code).",
    ),
]


def _recipe_limit() -> int:

    return recipe_task_limit()


NumTasksOpt = Annotated[
    int, typer.Option("--num-tasks", min=1, max=_recipe_limit(), help="Tasks of a WfCommons recipe.")
]
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


# ---------------------------------------------------------------------------- one vocabulary, old spellings kept
#: Old option spellings still accepted, per command: ``old -> (new, values)``. A use is rewritten to ``new`` with one
#: note on stderr; with ``values``, only those values are (``serving tune --backend sim`` was ``--engine sim``;
#: ``--backend`` is where parallel work runs, local | ray, everywhere else).
ALIASES: dict[str, dict[str, tuple[str, tuple[str, ...] | None]]] = {
    "serving tune": {"--timeout-ms": ("--batch-timeout-ms", None), "--backend": ("--engine", ("real", "sim"))},
    "serving serve": {"--timeout-ms": ("--batch-timeout-ms", None)},
}


def apply_aliases(argv: list[str]) -> list[str]:
    """``argv`` with the old spellings of :data:`ALIASES` replaced by the new ones (one note per replacement)."""
    words = [a for a in argv[:2] if not a.startswith("-")]
    table = ALIASES.get(" ".join(words[:2]), {})
    if not table:
        return list(argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in table and i >= 2:
            new, allowed = table[name]
            given = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if allowed is not None and given not in allowed:
                raise InvalidOption(
                    f"{name} {given}: '{' '.join(words)}' has no {name} (where parallel work runs, local | ray, in "
                    f"other commands); {new} {' | '.join(allowed)} chooses what measures"
                )
            warn(f"{name} is the old spelling of {new}: read as {new}")
            out.append(f"{new}={value}" if eq else new)
        else:
            out.append(arg)
        i += 1
    return out


# ---------------------------------------------------------------------------- parsing and checks
def check_suffix(path: Path, suffix: str, option: str) -> None:
    """One clear error when an output file does not end in ``suffix`` or is a folder."""
    if path.suffix.lower() != suffix:
        raise MlsysoptError(f"{option} {path}: expected a {suffix} file name")
    if path.is_dir():
        raise MlsysoptError(f"{option} {path} is a directory")


def fmt(v: float) -> str:
    """A number for a table: thousands separators when large, 4 significant digits otherwise."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def progress_bar() -> Progress:
    """A rich progress bar on stderr: description, bar, done/total, elapsed."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=err_console, transient=False)


class MeasurementProgress:
    """Measurements done, left and an estimate of the time left: a rich bar on a terminal, plain lines when piped.

    Args:
        total: Measurements expected (a phase may change it: :meth:`set_total`).
    """

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = int(total), 0, time.perf_counter()
        self.bar: Progress | None = None
        if err_console.is_terminal:
            columns = (*progress_bar().columns, TextColumn("left"), TimeRemainingColumn())
            self.bar = Progress(*columns, console=err_console, transient=False)
            self.task = self.bar.add_task("starting", total=self.total)

    def __enter__(self) -> MeasurementProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def set_total(self, total: int) -> None:
        """The run now expects ``total`` measurements (e.g. once the noise fixed the confirmation rounds)."""
        self.total = max(int(total), self.done)
        if self.bar is not None:
            self.bar.update(self.task, total=self.total)

    def tick(self, what: str) -> None:
        """One more measurement, of phase ``what``."""
        self.done += 1
        self.total = max(self.total, self.done)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=what)
            return
        elapsed = time.perf_counter() - self.t0
        left = self.total - self.done
        eta = f", about {elapsed / self.done * left:.0f} s left" if left else ""
        err_console.print(
            f"[{self.done}/{self.total}] {what}: {left} left, {elapsed:.0f} s so far{eta}", soft_wrap=True
        )


def measurement_progress(total: int) -> MeasurementProgress:
    """A :class:`MeasurementProgress` of ``total`` measurements (use it as a context manager)."""
    return MeasurementProgress(total)


# ---------------------------------------------------------------------------- checks every option gets
INT_LIMIT = 2**63 - 1


def _annotation(param: Any) -> Any:
    """The Python type an option converts to (``float | None`` -> ``float``), for typer with or without click."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None:
        annotation = descriptor.annotation
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    name = getattr(getattr(param, "type", None), "name", "")
    return {"float": float, "integer": int, "path": Path}.get(str(name).split()[0] if name else "")


def _finite(param: Any, value: Any) -> None:

    if isinstance(value, float) and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {value}", param=param)


def _int64(param: Any, value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
        raise typer.BadParameter(f"must be at most {INT_LIMIT:,} in size, got {value:.3e}", param=param)


def harden(command: Any) -> Any:
    """Give every option of ``command`` (and its subcommands) the checks no command may skip.

    Floats must be finite (typer lets ``nan``/``inf`` through wherever no range is set, and ``nan`` past one),
    integers must fit in 64 bits. A failed check is a usage error naming the option, like typer's own. Every
    on/off flag ``--x`` also gets its ``--no-x`` (the form Optuna, Ray Tune and perf_analyzer users expect).
    """
    stack = [command]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        params = getattr(cmd, "params", [])
        taken = {opt for p in params for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        for param in params:
            flag = getattr(param, "opts", [""])[0]
            if getattr(param, "is_bool_flag", False) and not param.secondary_opts and not param.is_eager:
                negative = f"--no-{flag[2:]}"
                if flag.startswith("--") and negative not in taken:
                    param.secondary_opts = [negative]
            kind = _annotation(param)
            check = {float: _finite, int: _int64}.get(kind)
            if check is not None:
                param.callback = _chained(check, param.callback)
    return command


def _chained(check: Any, callback: Any) -> Any:
    def run(ctx: Any, param: Any, value: Any) -> Any:
        for v in value if isinstance(value, (list, tuple)) else (value,):
            check(param, v)
        return callback(ctx, param, value) if callback is not None else value

    return run
