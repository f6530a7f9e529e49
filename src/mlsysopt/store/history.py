"""Warm starts from the study store: earlier runs' history records, for a prior or a predictor to learn from.

``--warm-start STUDY`` reads one earlier run (by study name, run folder or ``#ID``); ``--warm-start auto`` reads
every finished run of the same system in the store (the run being made excluded), newest first. What comes back
is the board's *history records* contract: per run, its settings and the per-trial dicts exactly as its
``result.json`` lists them (NAS ``evaluations``, serving ``measurements``)::

    [{"study": "nas1", "command": "nas search", "settings": {...}, "records": [{...}, ...]}, ...]

A study of another system is refused with one error before anything is written. Each system feeds the records to
what learns from them (:func:`mlsysopt.nas.warm_start.warm_start_search`,
:func:`mlsysopt.serving.warm_start.warm_start_tuning`): the searcher's or tuner's own
``warm_start(histories)`` when it has one (the transfer priors plug in there), else a NAS method's performance
predictor (EPNAS, PNAS), which is pretrained on the records' architectures that fit the space.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidRunDir, StoreError
from mlsysopt.store.database import Store
from mlsysopt.store.query import find_run, list_runs
from mlsysopt.store.run import ATTR, SETTING
from mlsysopt.store.session import current_storage
from mlsysopt.store.trials import RECORD_ATTR

MAX_RECORDS = 100_000  # records read for one warm start at most (newest runs first)


def read_histories(spec: str, system: str, run_path: str | Path | None = None) -> list[dict[str, Any]]:
    """The history records of ``spec`` (``STUDY`` or ``auto``) from the store a run in ``run_path`` writes to.

    Raises :class:`StoreError` (one line, naming ``--warm-start``) for an unknown study, a study of another system,
    an empty one, or ``auto`` finding nothing.
    """

    where = f"--warm-start {spec}"
    storage = current_storage(run_path)
    if not storage.enabled:
        raise StoreError(f"{where}: the study store is off (--storage none), so there is nothing to start from")
    if not Store.probe(storage, must_have_parent=storage.source != "default"):
        raise StoreError(f"{where}: {storage.display} holds no runs yet")
    store = Store.open(storage)
    here = None if run_path is None else str(Path(run_path).resolve())
    if spec == "auto":
        runs = [r for r in reversed(list_runs(store, system, "done")) if r.run_dir != here]
        picked = [(r.study_id, r.name) for r in runs]
        if not picked:
            raise StoreError(f"{where}: no finished {system} run in {storage.display} to start from")
    else:
        try:
            sid, name = find_run(store, spec)
        except StoreError as exc:
            raise StoreError(f"{where}: {exc}") from None
        picked = [(sid, name)]
    out, total = [], 0
    for sid, name in picked:
        attrs = store.study_attrs(sid)
        theirs = attrs.get(ATTR + "system")
        if theirs != system:
            what = f"a {theirs} run ({attrs.get(ATTR + 'command')})" if theirs else "not a mlsysopt run"
            raise StoreError(f"{where}: study '{name}' is {what}, not a {system} run")
        records = [t.user_attrs[RECORD_ATTR] for t in store.trials(sid) if RECORD_ATTR in t.user_attrs]
        records = records[: max(0, MAX_RECORDS - total)]
        total += len(records)
        if records:
            settings = {k[len(SETTING) :]: v for k, v in attrs.items() if k.startswith(SETTING)}
            out.append({"study": name, "command": attrs.get(ATTR + "command"), "settings": settings,
                        "records": records})  # fmt: skip
    if not out:
        raise StoreError(f"{where}: the study has no trials to start from" if spec != "auto" else
                         f"{where}: the finished {system} runs hold no trials")  # fmt: skip
    return out


def describe(histories: list[dict[str, Any]], used: int) -> dict[str, Any]:
    """What a run's settings say about its warm start."""
    return {"studies": [h["study"] for h in histories], "records": sum(len(h["records"]) for h in histories),
            "used": used}  # fmt: skip


def previous_warm_start(run_dir: Any, spec: str | None) -> dict[str, Any] | None:
    """On ``--resume``: the warm start the run started with (``spec`` must name the same one), else None."""
    if not run_dir.resume:
        return None
    before = (run_dir.previous_settings or {}).get("warm_start") or None
    was = None if before is None else before.get("spec")
    if was != spec:
        given = f"--warm-start {spec}" if spec else "no --warm-start"
        raise InvalidRunDir(f"--resume with {given}: the run started with {f'--warm-start {was}' if was else 'none'}")
    return before
