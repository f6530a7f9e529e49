"""Reading the study store: every run as a summary, one run with its trials, exports, a comparison's data.

What ``mlsysopt runs list|show|compare|export`` print and write; each function takes an open
:class:`~mlsysopt.store.Store` and reads it with a few queries (``list_runs`` costs three, however many runs).
A run is named by its study name (``nas1``), its run folder's path, or ``#ID`` (the study id).
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import math
import os
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mlsysopt.errors import StoreError
from mlsysopt.io import dumps
from mlsysopt.runtime.local import process_alive
from mlsysopt.store.database import Store
from mlsysopt.store.liveness import owner_status
from mlsysopt.store.run import ATTR, SETTING
from mlsysopt.store.trials import KEY_ATTR, RECORD_ATTR
from mlsysopt.store.url import DEFAULT_FILE, StorageSpec, resolve_storage
from mlsysopt.store.writer import machine_id

if TYPE_CHECKING:
    from mlsysopt.store.database import Store


def reading_spec(explicit: str | None) -> StorageSpec:
    """The store ``mlsysopt runs`` reads: ``--storage``, ``MLSYSOPT_STORAGE``, else ``./mlsysopt.db`` or
    ``./runs/mlsysopt.db`` (the default store of runs made with ``--out runs/NAME``), whichever exists."""
    spec = resolve_storage(explicit)
    if spec.source == "default":
        for candidate in (Path.cwd() / DEFAULT_FILE, Path.cwd() / "runs" / DEFAULT_FILE):
            if candidate.is_file():
                return resolve_storage(str(candidate))
        raise StoreError(
            f"no study store here (no ./{DEFAULT_FILE} nor ./runs/{DEFAULT_FILE}): pass --storage URL or set "
            "MLSYSOPT_STORAGE"
        )
    if not spec.enabled:
        raise StoreError(f"{spec.where()}: the study store is off, so there are no runs to read")
    return spec


def open_existing(spec: StorageSpec) -> Store:
    """The store at ``spec``, which must exist (reading never creates one)."""

    if not Store.probe(spec):
        raise StoreError(f"{spec.where()}: no study store there yet (no run has written to it)")
    return Store.open(spec)


#: Every status a run can have (``optuna study``: a study not made by mlsysopt).
STATUSES = ("running", "done", "incomplete", "failed", "interrupted", "killed", "optuna study")


@dataclass
class RunSummary:
    """One run as ``runs list`` shows it."""

    study_id: int
    name: str
    system: str
    command: str
    started: str
    finished: str
    status: str
    trials: int
    complete: int
    headline: str
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def status_of(attrs: dict[str, Any]) -> str:
    """The run's status, read without writing to the store.

    ``incomplete`` for a ``done`` run whose study lacks writes the store refused (it went on under
    MLSYSOPT_STORE_ERRORS=continue). A ``running`` run of this machine is checked against its run folder
    (:func:`~mlsysopt.store.liveness.owner_status`): ``killed`` when no process holds the folder's lock and the run
    never closed, the status its log ends with when only the store missed it (a finished run is never ``killed``);
    a run whose folder is gone is ``killed`` when its process is.

    Args:
        attrs: The study's ``mlsysopt.*`` attributes.

    Returns:
        One of :data:`STATUSES` (or what the attribute says).
    """
    status = str(attrs.get(ATTR + "status", "unknown"))
    if status == "done" and attrs.get(ATTR + "incomplete"):
        return "incomplete"  # done, but the store lost some of its writes (MLSYSOPT_STORE_ERRORS=continue)
    if status == "running" and attrs.get(ATTR + "machine") == machine_id():
        pid = attrs.get(ATTR + "pid")
        seen = owner_status(str(attrs.get(ATTR + "run_dir") or ""), pid)
        if seen is not None:
            return seen
        if isinstance(pid, int) and pid != os.getpid() and not process_alive(pid):
            return "killed"
    return status


def _summary(sid: int, name: str, attrs: dict[str, Any], counts: dict[str, int]) -> RunSummary:
    head = attrs.get(ATTR + "headline") or {}
    return RunSummary(
        study_id=sid,
        name=name,
        system=str(attrs.get(ATTR + "system") or "optuna"),
        command=str(attrs.get(ATTR + "command") or ""),
        started=str(attrs.get(ATTR + "started", "")),
        finished=str(attrs.get(ATTR + "finished", "")),
        status=status_of(attrs) if attrs else "optuna study",
        trials=sum(counts.values()),
        complete=counts.get("complete", 0),
        headline=str(head.get("text", "")) if isinstance(head, dict) else "",
        run_dir=str(attrs.get(ATTR + "run_dir", "")),
    )


def list_runs(store: Store, system: str | None = None, status: str | None = None) -> list[RunSummary]:
    """Every run of the store (studies not made by mlsysopt too, as system ``optuna``), oldest first."""
    names, attrs, counts = store.study_names(), store.all_study_attrs(ATTR), store.trial_counts()
    rows = [_summary(sid, names[sid], attrs.get(sid, {}), counts.get(sid, {})) for sid in names]
    rows = [r for r in rows if (system is None or r.system == system) and (status is None or r.status == status)]
    return sorted(rows, key=lambda r: (r.started or "~", r.study_id))


def find_run(store: Store, ref: str) -> tuple[int, str]:
    """(study id, name) of the run ``ref``: a study name, a run folder's path, or ``#ID``; one clear error else."""
    names = store.study_names()
    if ref.startswith("#") and ref[1:].isdigit() and int(ref[1:]) in names:
        return int(ref[1:]), names[int(ref[1:])]
    by_name = {n: i for i, n in names.items()}
    if ref in by_name:
        return by_name[ref], ref
    path = str(Path(os.path.abspath(ref)))
    ids = [i for i in store.study_ids(ATTR + "run_dir", path) if i in names]
    if ids:
        return ids[-1], names[ids[-1]]

    close = difflib.get_close_matches(ref, list(by_name), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else f" ({len(names)} runs: see 'mlsysopt runs list')"
    raise StoreError(f"no run '{ref}' in {store.spec.display}{hint}")


def run_overview(store: Store, study_id: int) -> dict[str, Any]:
    """A run's attributes, settings and direction, and its summary with the trials counted by the database (no
    trial is read: what ``runs show`` and ``runs export`` need before they stream the trials)."""
    attrs = store.study_attrs(study_id)
    direction = store.storage.get_study_directions(study_id)[0].name.lower()
    counts = store.trial_counts(study_id).get(study_id, {})
    name = store.storage.get_study_name_from_id(study_id)
    return {
        "summary": _summary(study_id, name, {k: v for k, v in attrs.items() if k.startswith(ATTR)}, counts),
        "attrs": {k[len(ATTR) :]: v for k, v in attrs.items() if k.startswith(ATTR)},
        "settings": {k[len(SETTING) :]: v for k, v in attrs.items() if k.startswith(SETTING)},
        "direction": direction,
    }


def run_details(store: Store, study_id: int) -> dict[str, Any]:
    """A run's attributes, settings, direction and trials (Optuna ``FrozenTrial`` objects, all in memory)."""
    return run_overview(store, study_id) | {"trials": store.trials(study_id)}


def best_trials(store: Store, study_id: int, direction: str, n: int) -> list[Any]:
    """The ``n`` trials with the best first objective value, best first (ranked by the database, only they read)."""
    ids = store.best_trial_ids(study_id, direction == "maximize", n)
    by_id = {t._trial_id: t for t in store.iter_trials(study_id, trial_ids=ids)}
    return [by_id[i] for i in ids if i in by_id]


def best_trial(trials: list[Any], direction: str) -> Any | None:
    """The best complete trial (first objective), None when none completed."""
    done = [t for t in trials if t.state.name == "COMPLETE" and t.values]
    if not done:
        return None
    pick = max if direction == "maximize" else min
    return pick(done, key=lambda t: t.values[0])


def trial_row(t: Any, with_record: bool = False) -> dict[str, Any]:
    """One trial as a flat row: number, state, value(s), params, figures, times (and its record when asked)."""
    row: dict[str, Any] = {"number": t.number, "state": t.state.name.lower()}
    for k, v in enumerate(t.values or []):
        row["value" if k == 0 else f"value_{k}"] = v
    if not t.values:
        row["value"] = None
    row |= {f"params.{k}": v for k, v in t.params.items()}
    for k, v in t.user_attrs.items():
        if k == RECORD_ATTR:
            if with_record:
                row[k] = v
        elif k != KEY_ATTR:
            row[k if k.startswith("param.") else f"attrs.{k}"] = v
    if t.intermediate_values:
        row["intermediate_values"] = {int(s): v for s, v in sorted(t.intermediate_values.items())}
    row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
    row["datetime_complete"] = t.datetime_complete.isoformat() if t.datetime_complete else None
    row["duration_s"] = t.duration.total_seconds() if t.duration is not None else None
    return row


def export_run(store: Store, study_id: int, fmt: str) -> str:
    """A run as CSV (one row per trial, flat columns) or JSON (its attributes, settings and every trial)."""
    buf = io.StringIO()
    write_export(store, study_id, fmt, buf)
    return buf.getvalue()


def write_export(store: Store, study_id: int, fmt: str, out: TextIO) -> int:
    """Write a run to ``out`` as :func:`export_run` does, streaming: the trials are read a page at a time and
    written as they come (CSV rows wait in a temporary file until every column is known), so memory stays bounded
    however many trials the study has. Returns the number of trials written."""

    if fmt not in ("csv", "json"):
        raise StoreError(f"--format {fmt}: choose csv or json")
    d = run_overview(store, study_id)
    n = 0
    if fmt == "json":
        head = dumps({"run": d["summary"].to_dict(), "attrs": d["attrs"], "settings": d["settings"],
                      "direction": d["direction"], "trials": []})  # fmt: skip
        tail = '"trials": []\n}'
        assert head.endswith(tail)
        out.write(head[: -len(tail)] + '"trials": [')
        for t in store.iter_trials(study_id):
            out.write(("," if n else "") + "\n" + textwrap.indent(dumps(trial_row(t, True)), "    "))
            n += 1
        out.write(("\n  ]" if n else "]") + "\n}\n")
        return n
    columns: dict[str, None] = {}
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:  # one JSON line per row, columns in first-seen order
        for t in store.iter_trials(study_id):
            row = {k: _cell(v) for k, v in trial_row(t).items()}
            columns.update(dict.fromkeys(row))
            spool.write(json.dumps(row, allow_nan=False) + "\n")
            n += 1
        writer = csv.DictWriter(out, fieldnames=list(columns) or ["number"], extrasaction="ignore")
        writer.writeheader()
        spool.seek(0)
        for line in spool:
            writer.writerow(json.loads(line))
    return n


def _cell(v: Any) -> Any:

    if isinstance(v, (dict, list)):
        return dumps(v, indent=None)
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return v


def best_so_far(trials: list[Any], direction: str) -> list[float]:
    """Best first-objective value after each trial (NaN until the first complete one)."""
    out, cur = [], math.nan
    better = (lambda a, b: a > b) if direction == "maximize" else (lambda a, b: a < b)
    for t in sorted(trials, key=lambda t: t.number):
        if t.state.name == "COMPLETE" and t.values and math.isfinite(t.values[0]):
            v = t.values[0]
            cur = v if math.isnan(cur) or better(v, cur) else cur
        out.append(cur)
    return out
