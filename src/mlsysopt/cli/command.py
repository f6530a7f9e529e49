"""The Typer app of ``mlsysopt`` and :func:`main`, its error handling (see :mod:`mlsysopt.cli` for the exit codes)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.text import Text

import mlsysopt.cli.latency  # noqa: F401  (registers the latency commands on the costmodel app)
from mlsysopt import __version__
from mlsysopt.cli.common import Interrupted, apply_aliases, err_console, harden, safe_text
from mlsysopt.cli.costmodel import costmodel_app
from mlsysopt.cli.demo import demo
from mlsysopt.cli.graph import graph_app
from mlsysopt.cli.nas import nas_app
from mlsysopt.cli.placement import placement_app
from mlsysopt.cli.runs import add_storage_option, runs_app
from mlsysopt.cli.serving import serving_app
from mlsysopt.errors import MlsysoptError, MlsysoptWarning
from mlsysopt.io.rundir import stop_note
from mlsysopt.io.runlog import session
from mlsysopt.store.session import set_command, use_storage
from mlsysopt.text import mask_secrets

app = typer.Typer(
    name="mlsysopt",
    help="Learning to optimize ML systems on one computation-graph IR and one DAG simulator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(graph_app, name="graph")
app.add_typer(costmodel_app, name="costmodel")
app.add_typer(placement_app, name="placement")
app.add_typer(serving_app, name="serving")
app.add_typer(nas_app, name="nas")
app.add_typer(runs_app, name="runs")
app.command("demo")(demo)

#: Exit code of a refused input; of a Ctrl-C (128 + SIGINT, as shells report it).
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
#: Exit code of an unexpected exception (a bug): still one line; MLSYSOPT_DEBUG=1 shows the traceback.
EXIT_INTERNAL = 1
#: Signals handled like Ctrl-C (exit code 128 + the signal's number: 143 for SIGTERM, 129 for SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread: every path that keeps a checkpoint on Ctrl-C runs for it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_stopped_by: int | None = None  # the signal that stopped the command (None: Ctrl-C or still running)


def _on_stop_signal(signum: int, frame: Any) -> None:
    global _stopped_by
    if _stopped_by is not None:  # a second signal while cleaning up: let the cleanup finish
        return
    _stopped_by = signum
    raise Stopped(signum)


@contextmanager
def stop_signals_as_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped` (a KeyboardInterrupt) like Ctrl-C does."""
    global _stopped_by
    _stopped_by = None
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return
    old = {sig: signal.signal(sig, _on_stop_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _interrupted(detail: str = "") -> int:
    """The one line (and exit code) of a command stopped by Ctrl-C, SIGTERM or SIGHUP (``detail``: what was kept;
    by default what its run folder kept)."""
    detail = detail or stop_note() or ""
    what = f": {detail}" if detail else ""
    if _stopped_by is not None:
        return _fail(f"stopped by {signal.Signals(_stopped_by).name}{what}", 128 + _stopped_by)
    return _fail(f"interrupted (Ctrl-C){what}", EXIT_INTERRUPTED)


def _print_version(value: bool) -> None:
    if value:
        print(f"mlsysopt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit."),
    ] = False,
) -> None:
    """Learning to optimize ML systems on one computation-graph IR and one DAG simulator."""


# ---------------------------------------------------------------------------- entry point
def debug_enabled() -> bool:
    """Whether ``MLSYSOPT_DEBUG`` asks for tracebacks: only ``1``, ``true`` or ``yes`` (any case)."""
    return os.environ.get("MLSYSOPT_DEBUG", "").strip().lower() in ("1", "true", "yes")


def _one_line(message: object) -> str:
    return " ".join(line.strip() for line in str(message).splitlines() if line.strip()) or "unknown error"


def _fail(message: object, code: int = EXIT_USER_ERROR) -> int:

    # a Text is never parsed for markup or emoji codes; safe_text makes control characters visible
    err_console.print(Text.assemble(("error:", "bold red"), " ", safe_text(mask_secrets(_one_line(message)))))
    return code


def _show_warning(message: Any, category: type[Warning], filename: str, lineno: int, *args: Any, **kw: Any) -> None:
    if issubclass(category, MlsysoptWarning):
        err_console.print(Text.assemble(("warning:", "yellow"), " ", safe_text(mask_secrets(_one_line(message)))))
    else:
        _default_showwarning(message, category, filename, lineno, *args, **kw)


_default_showwarning = warnings.showwarning


def _os_error(exc: OSError) -> str:
    what = exc.strerror or str(exc) or type(exc).__name__
    where = f": {exc.filename}" if exc.filename else ""
    hint = {
        errno.ENOSPC: " (the disk is full: free some space or choose another --out)",
        errno.EDQUOT: " (disk quota exceeded: free some space or choose another --out)",
        errno.EROFS: " (read-only file system: choose another --out)",
        errno.EACCES: " (permission denied: choose another --out or fix the permissions)",
    }.get(exc.errno or 0, "")
    return f"{what}{where}{hint}"


def _usage_error(exc: BaseException) -> tuple[str, int] | None:
    """``(message, exit code)`` of a click/typer usage or parameter error (typer >= 0.12, vendored click or not)."""
    fmt, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
    if not callable(fmt) or not isinstance(code, int):
        return None
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if getattr(ctx, "command_path", None) else ""
    return f"{str(fmt()).rstrip('.')}{hint}", EXIT_USER_ERROR if code in (1, 2) else code


_COMMAND: Any = None


def _command() -> Any:
    """The click command of the app with :func:`~mlsysopt.cli.common.harden`'s checks, built once per process
    (typer builds the whole tree, with a validator per option, on every call otherwise)."""
    global _COMMAND
    if _COMMAND is None:
        _COMMAND = harden(add_storage_option(typer.main.get_command(app)))
    return _COMMAND


def run(argv: list[str] | None = None) -> int:
    """Run the app on ``argv`` and return its exit code (see the module docstring); nothing raises but debug."""
    debug = debug_enabled()

    stop_note()  # a stop of an earlier command in this process says nothing about this one
    try:
        args = apply_aliases(list(sys.argv[1:] if argv is None else argv))
        with session(args):
            try:
                rv = _command().main(args=args, prog_name="mlsysopt", standalone_mode=False)
            finally:
                use_storage(None)
                set_command(None)
        code = rv if isinstance(rv, int) else 0
        if code == EXIT_INTERRUPTED:  # typer turns a KeyboardInterrupt inside a command into Exit(130)
            return _interrupted()
        return code
    except Interrupted as exc:
        return _interrupted(str(exc))
    except MlsysoptError as exc:
        if debug:
            raise
        return _fail(exc)
    except ModuleNotFoundError as exc:
        if debug or (exc.name or "").split(".")[0] == "mlsysopt":
            raise
        return _fail(f"missing dependency '{exc.name}': install it with 'pip install -e .' ({exc})")
    except OSError as exc:
        if debug:
            raise
        return _fail(_os_error(exc))
    except RecursionError:
        if debug:
            raise
        return _fail("the input is nested too deeply to process (Python's recursion limit was reached)")
    except MemoryError:
        if debug:
            raise
        return _fail("out of memory: ask for smaller sizes (tasks, devices, batch, ...)")
    except (typer.Abort, KeyboardInterrupt):
        if debug:
            raise
        return _interrupted()
    except Exception as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare 'mlsysopt graph': the help, as typer prints it
            exc.show()  # type: ignore[attr-defined]
            return EXIT_USER_ERROR
        if debug:
            raise
        usage = _usage_error(exc)
        if usage is not None:
            return _fail(*usage)
        # a bug, not a refused input: still one line (exit 1), and how to get the traceback for a report
        where = f"{type(exc).__name__}: {exc}"
        return _fail(f"internal error ({where}); run with MLSYSOPT_DEBUG=1 for the traceback", EXIT_INTERNAL)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and exit with its code (0 done, 2 refused, 130 Ctrl-C, 143 SIGTERM)."""
    with warnings.catch_warnings(), stop_signals_as_interrupts():
        warnings.simplefilter("always", MlsysoptWarning)
        warnings.showwarning = _show_warning
        code = run(argv)
    sys.exit(code)
