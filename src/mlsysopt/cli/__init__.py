"""The ``mlsysopt`` command line: ``mlsysopt <system> <verb>``.

Heavy imports (numba, torch, matplotlib, wfcommons) happen inside the commands that need them, so
``--help`` starts fast. :func:`main` turns every :class:`~mlsysopt.errors.MlsysoptError` (and file-system
errors) into one red ``error: ...`` line on stderr and exit code 2; ``MLSYSOPT_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.markup import escape

from mlsysopt.cli.common import err_console
from mlsysopt.cli.costmodel import costmodel_app
from mlsysopt.cli.demo import demo
from mlsysopt.cli.graph import graph_app
from mlsysopt.cli.nas import nas_app
from mlsysopt.cli.placement import placement_app
from mlsysopt.cli.serving import serving_app
from mlsysopt.errors import MlsysoptError

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
app.command("demo")(demo)


# ---------------------------------------------------------------------------- entry point
def _one_line(message: str) -> str:
    return " ".join(line.strip() for line in str(message).splitlines() if line.strip()) or "unknown error"


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/bold red] {escape(_one_line(message))}")
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app; user errors become one red line and exit code 2."""
    debug = os.environ.get("MLSYSOPT_DEBUG", "") not in ("", "0")
    try:
        app(args=argv, prog_name="mlsysopt")
    except MlsysoptError as exc:
        if debug:
            raise
        _fail(str(exc))
    except (
        FileNotFoundError,
        PermissionError,
        IsADirectoryError,
        NotADirectoryError,
        FileExistsError,
    ) as exc:
        if debug:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        _fail(f"{exc.strerror or exc}{where}")
    except ModuleNotFoundError as exc:
        if debug or (exc.name or "").split(".")[0] == "mlsysopt":
            raise
        _fail(f"missing dependency '{exc.name}': install it with 'pip install -e .' ({exc})")
