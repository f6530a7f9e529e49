"""Warm starts from the study store: earlier runs' history records, for a prior or a predictor to learn from.

``--warm-start STUDY`` reads one earlier run (by study name, run folder or ``#ID``); ``--warm-start auto`` reads
every finished run of the same system in the store (the run being made excluded), newest first. What comes back
is the board's *history records* contract: per run, its settings and the per-trial dicts exactly as its
``result.json`` lists them (NAS ``evaluations``, serving ``measurements``)::

    [{"study": "nas1", "command": "nas search", "settings": {...}, "records": [{...}, ...]}, ...]

A study of another system is refused with one error before anything is written. :func:`warm_start_search` and
:func:`warm_start_tuning` feed the records to what learns from them: the searcher's or tuner's own
``warm_start(histories)`` when it has one (the transfer priors plug in there), else a NAS method's performance
predictor (EPNAS, PNAS), which is pretrained on the records' architectures that fit the space.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidRunDir, MlsysoptError, StoreError
from mlsysopt.store.run import ATTR, SETTING, current_storage
from mlsysopt.store.trials import RECORD_ATTR

MAX_RECORDS = 100_000  # records read for one warm start at most (newest runs first)


def read_histories(spec: str, system: str, run_path: str | Path | None = None) -> list[dict[str, Any]]:
    """The history records of ``spec`` (``STUDY`` or ``auto``) from the store a run in ``run_path`` writes to.

    Raises :class:`StoreError` (one line, naming ``--warm-start``) for an unknown study, a study of another system,
    an empty one, or ``auto`` finding nothing.
    """
    from mlsysopt.store.database import Store
    from mlsysopt.store.query import find_run, list_runs

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


def _before(run_dir: Any, spec: str | None) -> dict[str, Any] | None:
    """On ``--resume``: the warm start the run started with (``spec`` must name the same one), else None."""
    if not run_dir.resume:
        return None
    before = (run_dir.previous_settings or {}).get("warm_start") or None
    was = None if before is None else before.get("spec")
    if was != spec:
        given = f"--warm-start {spec}" if spec else "no --warm-start"
        raise InvalidRunDir(f"--resume with {given}: the run started with {f'--warm-start {was}' if was else 'none'}")
    return before


def warm_start_search(job: Any, spec: str | None) -> str | None:
    """Pretrain a prepared NAS search (:class:`~mlsysopt.nas.experiment.SearchJob`) on earlier evaluations.

    Returns a line saying what was used (None without a warm start); the run's settings record it
    (``warm_start``). On ``--resume`` the checkpoint holds the predictor's data, the prior's included.
    """
    from mlsysopt.nas.spaces.base import Arch

    before = _before(job.run_dir, spec)
    if before is not None:
        job.run_dir.settings["warm_start"] = before
        return f"warm start from {', '.join(before['studies'])} (kept in the checkpoint)"
    if spec is None:
        return None
    searcher = job.searcher
    own = getattr(searcher, "warm_start", None)
    predictor = getattr(searcher, "predictor", None)
    if own is None and predictor is None:
        raise StoreError(f"--warm-start: method '{searcher.name}' learns no predictor to pretrain (use epnas or pnas)")
    histories = read_histories(spec, "nas", job.run_dir.path)
    if own is not None:
        used = int(own(histories))
    else:
        used = 0
        for h in histories:
            for rec in h["records"]:
                arch = rec.get("arch") or {}
                perf = rec.get("perf")
                if not rec.get("ok", True) or not isinstance(perf, (int, float)) or not math.isfinite(perf):
                    continue
                try:
                    a = Arch(tuple(int(c) for c in arch.get("choices", ())), int(arch.get("blocks", 0)))
                    job.space.check(a)
                except (MlsysoptError, ValueError, TypeError):  # an architecture of another space: skip it
                    continue
                predictor.add(a, float(perf))
                used += 1
        if used == 0:
            raise StoreError(f"--warm-start {spec}: none of its evaluations is an architecture of {job.space.name}")
        predictor.refit()
    job.run_dir.settings["warm_start"] = {"spec": spec, **describe(histories, used)}
    return f"warm start: predictor pretrained on {used} evaluations of {', '.join(h['study'] for h in histories)}"


def warm_start_tuning(job: Any, spec: str | None) -> str | None:
    """Give a prepared serving tuning (:class:`~mlsysopt.serving.tuning_job.TuningJob`) earlier measurements.

    The tuner's ``warm_start(histories)`` learns from them (RRL: its latency estimator); a tuner without one is
    refused. On ``--resume`` the tuner is warm-started again from the studies the run started with (the replay of
    its checkpoint needs the same tuner). Returns a line saying what was used; the run's settings record it.
    """
    run_dir = job.run_dir
    before = _before(run_dir, spec)
    if spec is None:
        return None
    own = getattr(job.tuner, "warm_start", None)
    if own is None:
        raise StoreError(f"--warm-start: tuner '{job.tuner_name}' takes no warm start (rrl does)")
    if before is not None:
        histories = [read_histories(name, "serving", run_dir.path)[0] for name in before["studies"]]
    else:
        histories = read_histories(spec, "serving", run_dir.path)
    used = int(own(histories))
    if used == 0:
        raise StoreError(f"--warm-start {spec}: none of its measurements is a configuration of this space")
    run_dir.settings["warm_start"] = {"spec": spec, **describe(histories, used)}
    studies = ", ".join(h["study"] for h in histories)
    return f"warm start: {job.tuner_name} learned from {used} measurements of {studies}"
