"""Measurement histories of earlier tuning tasks: what a prior across models learns from.

A :class:`History` is one earlier task (one model on one machine, at one or more rates) as the board's contract
gives it: the per-trial dicts of its run folder's ``result.json["measurements"]`` (``Measurement.to_dict()``) and
the run's ``settings.json``. The task's **service profile** (the model and machine the prior describes it by) comes
from ``result.json["task"]["profile"]`` (``serving tune`` writes it), else, for a simulated run, from the profile
its settings name. The study store (#20) returns the same records and settings, so :meth:`History.from_records`
is the one constructor both use; :func:`history_from_run` reads a run folder.

Every problem is one :class:`~mlsysopt.errors.InvalidRunDir` naming the folder (or source) and the key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.io import read_json
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.presets import DEFAULT_PROFILE, resolve_profile
from mlsysopt.serving.profile import ServiceProfile

MAX_RECORDS = 1_000_000  # records one prior reads in total (bounded before anything is allocated)


@dataclass
class History:
    """The measurements of one earlier task, with the profile that describes its model and machine."""

    measurements: list[Measurement]
    profile: ServiceProfile
    settings: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def task(self) -> str:
        """A short name of the task: the profile's model and cores."""
        return f"{self.profile.model or 'unnamed'}@{self.profile.cores}"

    @classmethod
    def from_records(
        cls,
        records: Sequence[Mapping[str, Any]],
        settings: Mapping[str, Any],
        task: Mapping[str, Any] | None = None,
        source: str = "records",
    ) -> History:
        """A history from ``Measurement.to_dict()`` records, the run's settings and (optionally) its ``task``."""
        if not isinstance(records, Sequence) or isinstance(records, (str, bytes)):
            raise InvalidRunDir(f"{source}: 'measurements' must be a list of measurement records")
        if len(records) > MAX_RECORDS:
            raise InvalidRunDir(f"{source}: {len(records):,} measurements is more than the {MAX_RECORDS:,} allowed")
        out = []
        for i, rec in enumerate(records):
            try:
                out.append(Measurement.from_dict(dict(rec)))
            except (KeyError, TypeError, ValueError, MlsysoptError) as exc:
                raise InvalidRunDir(f"{source}: measurements[{i}] is not a measurement record ({exc})") from None
        return cls(out, _task_profile(settings, task, source), dict(settings), source)

    def samples(self) -> list[tuple[Measurement, float]]:
        """Every usable measurement with the rate it was measured at (a rate search's ``at_rate``)."""
        out = []
        for m in self.measurements:
            rate = m.extra.get("at_rate", m.workload.rate) if isinstance(m.extra, dict) else m.workload.rate
            if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
                out.append((m, float(rate)))
        return out


def _task_profile(settings: Mapping[str, Any], task: Mapping[str, Any] | None, source: str) -> ServiceProfile:
    if task is not None:
        prof = task.get("profile") if isinstance(task, Mapping) else None
        if not isinstance(prof, Mapping):
            raise InvalidRunDir(f"{source}: result.json key 'task' has no 'profile' object")
        try:
            return ServiceProfile.from_dict(dict(prof), where=f"{source}: task.profile")
        except MlsysoptError as exc:
            raise InvalidRunDir(str(exc)) from None
    if settings.get("engine") == "sim":
        spec = settings.get("profile") or DEFAULT_PROFILE
        try:
            return resolve_profile(str(spec))
        except MlsysoptError as exc:
            raise InvalidRunDir(f"{source}: the profile its settings name cannot be read ({exc})") from None
    raise InvalidRunDir(
        f"{source}: no model profile (result.json has no 'task', and a real-engine run's settings do not describe "
        "the model's speed); rerun the tune with this version, which records it"
    )


def history_from_run(path: str | Path) -> History:
    """The history of one ``serving tune`` run folder (``result.json`` and ``settings.json``)."""

    folder = Path(path)
    if not folder.is_dir():
        raise InvalidRunDir(f"--prior {folder}: not a run folder (no such folder)")
    result = read_json(folder / "result.json", InvalidRunDir)
    settings = read_json(folder / "settings.json", InvalidRunDir)
    if result.get("command") != "serving tune":
        raise InvalidRunDir(
            f"--prior {folder}: result.json is from '{result.get('command', 'an unknown command')}', not 'serving tune'"
        )
    if "measurements" not in result:
        raise InvalidRunDir(f"--prior {folder}: result.json has no key 'measurements'")
    return History.from_records(result["measurements"], settings, result.get("task"), source=str(folder))


def histories_from_store(histories: Sequence[Mapping[str, Any]]) -> tuple[list[History], int]:
    """The study store's history records (``mlsysopt.store.history.read_histories``) as histories, and how many of
    their runs were skipped: a real-engine run's settings do not describe its model's speed (the store keeps no
    ``task``), so only simulated runs (whose settings name their profile) are usable from the store; a run folder's
    ``result.json`` keeps the task of a real run (``--prior RUN_DIR``)."""
    out, skipped = [], 0
    for h in histories:
        source = f"study {h.get('study', '?')}"
        settings = h.get("settings") or {}
        if settings.get("engine") != "sim":
            skipped += 1
            continue
        out.append(History.from_records(h.get("records", []), settings, h.get("task"), source=source))
    return out, skipped


def histories_from_runs(paths: Iterable[str | Path]) -> list[History]:
    """The histories of several run folders; a folder holding run folders contributes each of them."""
    out: list[History] = []
    for p in paths:
        folder = Path(p)
        if folder.is_dir() and not (folder / "result.json").exists():
            subs = sorted(d for d in folder.iterdir() if (d / "result.json").is_file())
            if not subs:
                raise InvalidRunDir(f"--prior {folder}: neither a run folder nor a folder of run folders")
            out.extend(history_from_run(d) for d in subs)
        else:
            out.append(history_from_run(folder))
    total = sum(len(h.measurements) for h in out)
    if total > MAX_RECORDS:
        raise InvalidRunDir(f"--prior: {total:,} measurements in all is more than the {MAX_RECORDS:,} allowed")
    return out
