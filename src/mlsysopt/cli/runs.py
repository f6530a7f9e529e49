"""``mlsysopt runs list|show|compare|export|dashboard``: the study store from the command line.

Also :func:`add_storage_option`, which gives every command that writes a run folder ``--storage URL`` (the store
its runs write to; ``MLSYSOPT_STORAGE`` when not given, else ``mlsysopt.db`` beside ``--out``).
"""

from __future__ import annotations

import copy
import ipaddress
import math
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mlsysopt.cli.common import console, err_console, warn
from mlsysopt.cli.graph import show
from mlsysopt.errors import InvalidOption, StoreError
from mlsysopt.io import dumps, open_atomic
from mlsysopt.store.query import (
    STATUSES,
    best_so_far,
    best_trial,
    best_trials,
    find_run,
    list_runs,
    open_existing,
    reading_spec,
    run_details,
    run_overview,
    write_export,
)
from mlsysopt.store.session import set_command, use_storage
from mlsysopt.store.systems import SYSTEMS

runs_app = typer.Typer(
    help="The study store: list, show, compare and export runs; optuna-dashboard on it.",
    no_args_is_help=True,
    add_completion=False,
)

STORAGE_HELP = (
    "Study store: sqlite:///FILE.db (or a path), postgresql://USER@HOST[:PORT]/DB, or none "
    "(default: $MLSYSOPT_STORAGE, else mlsysopt.db beside the run folder)."
)
ReadStorageOpt = Annotated[
    str | None,
    typer.Option("--storage", help="Study store to read (default: $MLSYSOPT_STORAGE, else ./mlsysopt.db, ./runs/…)."),
]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="A run: its study name, its run folder, or #ID.")]


# ---------------------------------------------------------------------------- --storage on every command
def _set_storage(ctx: Any, param: Any, value: str | None) -> str | None:

    use_storage(value)
    path = getattr(ctx, "command_path", "") or ""
    set_command(path.split(" ", 1)[1] if " " in path else None)
    return value


def _storage_param() -> Any:
    """A ``--storage URL`` parameter as typer builds it (from a throwaway command), that sets the store."""

    def probe(
        storage: Annotated[str | None, typer.Option("--storage", metavar="URL", help=STORAGE_HELP)] = None,
    ) -> None:
        """Nothing."""

    holder = typer.Typer()
    holder.command()(probe)
    param = next(p for p in typer.main.get_command(holder).params if "--storage" in p.opts)
    param.expose_value = False
    param.callback = _set_storage
    return param


#: Commands whose ``--out`` is a plain file, not a run folder: no run, no study.
FILE_OUTPUTS = ("graph import", "graph generate", "costmodel synth", "costmodel latency-train", "placement calibrate")


def add_storage_option(command: Any) -> Any:
    """Give every subcommand of ``command`` whose ``--out`` is a run folder a ``--storage`` option (click-level)."""
    template = _storage_param()
    stack = [("", command)]
    while stack:
        path, cmd = stack.pop()
        stack.extend((f"{path} {n}".strip(), c) for n, c in getattr(cmd, "commands", {}).items())
        params = getattr(cmd, "params", [])
        names = {o for p in params for o in getattr(p, "opts", [])}
        if "--out" in names and "--storage" not in names and path not in FILE_OUTPUTS:
            params.append(copy.copy(template))
    return command


# ---------------------------------------------------------------------------- helpers
def _store(storage: str | None) -> Any:

    return open_existing(reading_spec(storage))


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:

    show(title, rows, columns)


def _num(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _when(iso: str) -> str:
    return iso.replace("T", " ")[:16] if iso else "-"


# ---------------------------------------------------------------------------- commands
@runs_app.command("list")
def runs_list(
    storage: ReadStorageOpt = None,
    system: Annotated[
        str | None, typer.Option("--system", help="Only runs of this system (nas, serving, ...).")
    ] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs with this status (done, running, ...).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Every run in the store: run, system, date, status, trials and headline figure."""
    for flag, value, known in (("--system", system, (*SYSTEMS, "optuna")), ("--status", status, STATUSES)):
        if value is not None and value not in known:
            raise InvalidOption(f"{flag} {value!r}: choose from {', '.join(known)}")
    store = _store(storage)
    runs = list_runs(store, system, status)
    if as_json:
        print(dumps([r.to_dict() for r in runs]))
        return
    rows = [[r.name, r.system, _when(r.started), r.status, f"{r.complete}/{r.trials}", r.headline] for r in runs]
    _table(f"{len(runs)} run(s) in {store.spec.display}", ["run", "system", "started", "status", "trials", "headline"],
           rows)  # fmt: skip


@runs_app.command("show")
def runs_show(
    run: RunArg,
    storage: ReadStorageOpt = None,
    trials: Annotated[int, typer.Option("--trials", min=0, help="Trials to list (the best first).")] = 10,
) -> None:
    """One run: what it ran, its settings, its status and headline, its best trials."""
    store = _store(storage)
    sid, name = find_run(store, run)
    d = run_overview(store, sid)  # the trials counted, not read: only the best are
    s, a = d["summary"], d["attrs"]
    rows = [("study", f"{name} (#{sid}) in {store.spec.display}"), ("command", s.command or "-"),
            ("system", s.system), ("status", s.status), ("started", _when(s.started)),
            ("finished", _when(s.finished)), ("run folder", s.run_dir or "-"), ("host", str(a.get("host", "-"))),
            ("trials", f"{s.complete} complete of {s.trials}"), ("direction", d["direction"]),
            ("headline", s.headline or "-")]  # fmt: skip
    if a.get("resumed"):
        rows.append(("resumed", f"{a['resumed']} time(s)"))

    show(f"run {name}", rows)
    if d["settings"]:
        show("settings", [(k, dumps(v, indent=None)[:100]) for k, v in d["settings"].items()])
    picked = best_trials(store, sid, d["direction"], trials)
    if picked:
        names = list(dict.fromkeys(k for t in picked for k in t.params))[:6]
        rows2 = [[str(t.number), t.state.name.lower(), _num(t.values[0]), *(_num(t.params.get(k)) for k in names)]
                 for t in picked]  # fmt: skip
        _table(f"best {len(picked)} of {s.trials} trial(s)", ["trial", "state", "value", *names], rows2)


@runs_app.command("export")
def runs_export(
    run: RunArg,
    storage: ReadStorageOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="csv (a row per trial) or json (everything).")] = "csv",
    out: Annotated[Path | None, typer.Option("--out", help="File to write (default: standard output).")] = None,
) -> None:
    """A run's trials as CSV or JSON (attributes, settings, every trial with its record)."""
    if fmt not in ("csv", "json"):
        raise InvalidOption(f"--format {fmt}: choose csv or json")
    if out is not None and out.is_dir():
        raise InvalidOption(f"--out {out} is a folder; give a file name")
    store = _store(storage)
    sid, name = find_run(store, run)
    if out is None:  # streamed: the trials are read and written a page at a time
        write_export(store, sid, fmt, sys.stdout)
        return

    with open_atomic(out) as fh:
        write_export(store, sid, fmt, fh)
    err_console.print(f"wrote {out} ({name}, {fmt})")


@runs_app.command("compare")
def runs_compare(
    runs: Annotated[list[str], typer.Argument(metavar="RUN RUN...", help="Two or more runs.")],
    storage: ReadStorageOpt = None,
    out: Annotated[Path, typer.Option("--out", help="The figure: table and curves side by side.")] = Path(
        "compare.png"
    ),
) -> None:
    """Runs side by side: a table (command, status, trials, best value, settings that differ) and one plot."""
    if len(runs) < 2:
        raise InvalidOption("runs compare needs two or more runs")
    if out.suffix.lower() != ".png" or out.is_dir():
        raise InvalidOption(f"--out {out}: give a .png file name")
    store = _store(storage)
    found = [find_run(store, r) for r in runs]
    details = [run_details(store, sid) for sid, _ in found]
    names = [n for _, n in found]
    keys = list(dict.fromkeys(k for d in details for k in d["settings"]))
    differ = [k for k in keys if len({repr(d["settings"].get(k)) for d in details}) > 1]
    best = [best_trial(d["trials"], d["direction"]) for d in details]
    rows: list[list[str]] = [
        ["command", *(d["summary"].command or "-" for d in details)],
        ["status", *(d["summary"].status for d in details)],
        ["trials", *(f"{d['summary'].complete}/{d['summary'].trials}" for d in details)],
        ["direction", *(d["direction"] for d in details)],
        ["best value", *(_num(b.values[0]) if b is not None else "-" for b in best)],
        ["best trial", *(str(b.number) if b is not None else "-" for b in best)],
        ["headline", *(d["summary"].headline or "-" for d in details)],
    ]
    rows += [[f"{k}", *(_short(d["settings"].get(k)) for d in details)] for k in differ[:12]]
    _table("runs compared", ["", *names], rows)
    # deferred: mlsysopt.report.runs imports matplotlib
    from mlsysopt.report.runs import plot_compare

    curves = {n: best_so_far(d["trials"], d["direction"]) for n, d in zip(names, details, strict=True)}
    objectives = {(d["summary"].system, d["direction"]) for d in details}
    if len(objectives) > 1:  # one axis for a makespan and an accuracy is no comparison: say so rather than hide it
        pairs = zip(names, details, strict=True)
        what = ", ".join(f"{n}: {d['summary'].system or '?'}, {d['direction']}" for n, d in pairs)
        err_console.print(f"note: these runs optimize different objectives ({what}); their curves are not comparable")
    plot_compare(["", *names], rows, curves, out, title=f"{' vs '.join(names)} ({store.spec.display})")
    err_console.print(f"wrote {out}")


def _short(v: Any) -> str:

    return dumps(v, indent=None)[:40]


@runs_app.command("dashboard")
def runs_dashboard(
    storage: ReadStorageOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8080,
) -> None:
    """Start optuna-dashboard on the store (Ctrl-C stops it)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        raise InvalidOption(f"--host {host!r}: give an IP address to listen on, e.g. 127.0.0.1") from None
    store = _store(storage)
    if not loopback:
        warn(f"--host {host}: the dashboard (no login) is reachable from other machines, and can edit the studies")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, port))
    except OSError as exc:
        raise StoreError(f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})") from None
    # deferred: optuna-dashboard loads Optuna, pandas and scikit-learn
    import optuna_dashboard

    console.print(f"optuna-dashboard on {store.spec.display}: http://{host}:{port}/dashboard/ (Ctrl-C stops it)")
    try:
        optuna_dashboard.run_server(store.storage, host=host, port=port)
    except KeyboardInterrupt:
        err_console.print("dashboard stopped")
