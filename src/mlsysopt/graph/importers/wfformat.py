"""Parsing WfFormat instances of every schema version into one list of tasks.

Three layouts exist (see WfFormat's migration tool, ``tools/wfcommons-migrate-instance.py``, and the schema
READMEs of each release):

* **1.0-1.2**: tasks under ``workflow.jobs``; ``runtime``; files listed per task with ``size``;
* **1.3**: ``workflow.jobs`` renamed ``workflow.tasks``; otherwise as 1.2;
* **1.4**: ``runtime`` renamed ``runtimeInSeconds``, ``size`` renamed ``sizeInBytes`` (the real Pegasus traces of
  ``wfcommons/pegasus-instances`` are in this layout);
* **1.5, 1.6**: ``workflow.specification`` (tasks with ``parents``/``children`` by id, ``inputFiles``/
  ``outputFiles``, and a workflow-wide ``files`` list with ``sizeInBytes``) and ``workflow.execution`` (per task
  id: ``runtimeInSeconds``).

Up to 1.4 a file is known by its ``path`` + ``name`` (as the migration tool does) and tasks list their files with a
``link`` of ``input`` or ``output``; ``children`` and ``id`` are optional extras that are honoured when present.
The runtime is optional in every layout: a task without ``runtime``/``runtimeInSeconds`` (up to 1.4), without an
execution entry or with an entry that has no ``runtimeInSeconds`` (1.5+) gets compute 0 and is counted in
:attr:`Parsed.no_runtime`, so the importer warns instead of silently timing it at zero. A ``schemaVersion`` this
module does not know (:data:`KNOWN_VERSIONS`) is read by its layout and noted in :attr:`Parsed.notes` (a warning).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from mlsysopt.errors import InvalidGraph, UnsupportedFormat

_COUNTER_SUFFIX = re.compile(r"_(?:ID)?\d+$")
#: The WfFormat schema versions whose layout this module reads (a later one is read by its layout, with a note).
KNOWN_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6")


@dataclass
class Task:
    """One task: its name, kind, runtime (None when the instance gives none) and files by id -> bytes."""

    name: str
    kind: str
    runtime: float | None = None
    refs: list[str] = field(default_factory=list)  # parents
    kids: list[str] = field(default_factory=list)  # children
    inputs: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, float] = field(default_factory=dict)


@dataclass
class Parsed:
    """Tasks in file order, the reference -> task index lookup, and which layout was read."""

    tasks: list[Task]
    lookup: dict[str, int]
    layout: str
    notes: list[str] = field(default_factory=list)  # what a user should know (an unknown schemaVersion)

    @property
    def no_runtime(self) -> list[str]:
        """Names of the tasks the instance gives no runtime for."""
        return [t.name for t in self.tasks if t.runtime is None]


def parse(data: Any, where: str) -> Parsed:
    """Parse a loaded WfFormat JSON object; errors start with ``where`` and name the field."""
    if not isinstance(data, dict):
        raise UnsupportedFormat(f"{where}: not a WfFormat instance (top level is {type(data).__name__})")
    wf = data.get("workflow")
    if not isinstance(wf, dict):
        raise UnsupportedFormat(f"{where}: not a WfFormat instance (no 'workflow' object)")
    if "specification" in wf:
        return _noted(_parse_v15(wf, where), data, where)
    if "tasks" in wf or "jobs" in wf:
        return _noted(_parse_legacy(wf, where), data, where)
    raise UnsupportedFormat(
        f"{where}: 'workflow' has neither 'specification' (schema 1.5+) nor 'tasks' (1.3, 1.4) nor 'jobs' (1.0-1.2)"
    )


def _noted(parsed: Parsed, data: dict[str, Any], where: str) -> Parsed:
    """Add a note when ``schemaVersion`` is missing from :data:`KNOWN_VERSIONS` (it is read by its layout)."""
    version = data.get("schemaVersion")
    if version is not None and str(version) not in KNOWN_VERSIONS:
        parsed.notes.append(
            f"{where}: unknown WfFormat schemaVersion {version!r} (known: {', '.join(KNOWN_VERSIONS)}): read as the "
            f"{parsed.layout} layout; check the tasks, runtimes and file sizes it gives"
        )
    return parsed


def _parse_v15(wf: dict[str, Any], where: str) -> Parsed:
    spec = _obj(wf["specification"], where, "workflow.specification")
    sizes: dict[str, float] = {}
    for k, f in enumerate(_list(spec.get("files", []), where, "workflow.specification.files")):
        at = f"workflow.specification.files[{k}]"
        f = _obj(f, where, at)
        sizes[_str(_need(f, "id", where, at), where, f"{at}.id")] = _size(
            _need(f, "sizeInBytes", where, at), where, f"{at}.sizeInBytes"
        )
    tasks: list[Task] = []
    lookup: dict[str, int] = {}
    raw = _list(_need(spec, "tasks", where, "workflow.specification"), where, "workflow.specification.tasks")
    for k, t in enumerate(raw):
        at = f"workflow.specification.tasks[{k}]"
        t = _obj(t, where, at)
        tid = _str(_need(t, "id", where, at), where, f"{at}.id")
        if tid in lookup:
            raise InvalidGraph(f"{where}: {at} repeats task id '{tid}'")
        lookup[tid] = len(tasks)
        name = t.get("name")
        task = Task(tid, kind(t.get("category"), name if isinstance(name, str) else tid))
        task.refs = _strs(t.get("parents", []), where, f"{at}.parents")
        task.kids = _strs(t.get("children", []), where, f"{at}.children")
        task.inputs = {f: sizes.get(f, 0.0) for f in _strs(t.get("inputFiles", []), where, f"{at}.inputFiles")}
        task.outputs = {f: sizes.get(f, 0.0) for f in _strs(t.get("outputFiles", []), where, f"{at}.outputFiles")}
        tasks.append(task)
    _check_nonempty(tasks, where, "workflow.specification.tasks")
    execution = wf.get("execution")
    if execution is not None:
        execution = _obj(execution, where, "workflow.execution")
        for k, e in enumerate(_list(execution.get("tasks", []), where, "workflow.execution.tasks")):
            at = f"workflow.execution.tasks[{k}]"
            e = _obj(e, where, at)
            tid = _str(_need(e, "id", where, at), where, f"{at}.id")
            if tid not in lookup:
                raise InvalidGraph(f"{where}: {at} has id '{tid}', which no specification task has")
            task = tasks[lookup[tid]]
            if "runtimeInSeconds" in e:  # optional, as ``runtimeInSeconds`` of a 1.4 task: missing -> no_runtime
                task.runtime = _size(e["runtimeInSeconds"], where, f"{at}.runtimeInSeconds")
            if isinstance(e.get("category"), str) and e["category"]:
                task.kind = e["category"]
    return Parsed(tasks, lookup, "1.5")


def _parse_legacy(wf: dict[str, Any], where: str) -> Parsed:
    key = "tasks" if "tasks" in wf else "jobs"
    tasks: list[Task] = []
    lookup: dict[str, int] = {}
    ids: dict[str, int] = {}
    for k, t in enumerate(_list(wf[key], where, f"workflow.{key}")):
        at = f"workflow.{key}[{k}]"
        t = _obj(t, where, at)
        name = _str(_need(t, "name", where, at), where, f"{at}.name")
        if name in lookup:
            raise InvalidGraph(f"{where}: {at} repeats task name '{name}'")
        lookup[name] = len(tasks)
        if isinstance(t.get("id"), str) and t["id"]:
            ids.setdefault(t["id"], len(tasks))
        task = Task(name, kind(t.get("category"), name))
        for runtime_key in ("runtimeInSeconds", "runtime"):  # 1.4, then 1.0-1.3
            if runtime_key in t:
                task.runtime = _size(t[runtime_key], where, f"{at}.{runtime_key}")
                break
        task.refs = _strs(t.get("parents", []), where, f"{at}.parents")
        task.kids = _strs(t.get("children", []), where, f"{at}.children")
        for j, f in enumerate(_list(t.get("files", []), where, f"{at}.files")):
            fat = f"{at}.files[{j}]"
            f = _obj(f, where, fat)
            link = _need(f, "link", where, fat)
            if not isinstance(link, str) or link.lower() not in ("input", "output"):
                raise InvalidGraph(f"{where}: {fat}.link is {link!r}, expected 'input' or 'output'")
            fname = _str(_need(f, "name", where, fat), where, f"{fat}.name")
            path = f.get("path")
            fid = f"{path}{fname}" if isinstance(path, str) else fname
            (task.inputs if link.lower() == "input" else task.outputs)[fid] = _file_size(f, where, fat)
        tasks.append(task)
    _check_nonempty(tasks, where, f"workflow.{key}")
    # dependencies name tasks; ids are accepted too where they do not clash with a name
    return Parsed(tasks, {**ids, **lookup}, "1.4" if key == "tasks" else "1.2")


def _file_size(f: dict[str, Any], where: str, at: str) -> float:
    for size_key in ("sizeInBytes", "size"):  # 1.4, then 1.0-1.3
        if size_key in f:
            return _size(f[size_key], where, f"{at}.{size_key}")
    raise InvalidGraph(f"{where}: {at} has neither 'sizeInBytes' (WfFormat 1.4) nor 'size' (1.0-1.3)")


def kind(category: Any, name: str) -> str:
    """The task's kind: its ``category``, else its name without a trailing ``_ID0000001`` / ``_00000001``."""
    if isinstance(category, str) and category:
        return category
    return _COUNTER_SUFFIX.sub("", name) or name


# ---------------------------------------------------------------------- field helpers
def _need(obj: dict[str, Any], key: str, where: str, at: str) -> Any:
    if key not in obj:
        raise InvalidGraph(f"{where}: {at} is missing '{key}'")
    return obj[key]


def _obj(value: Any, where: str, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidGraph(f"{where}: {at} must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str, at: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidGraph(f"{where}: {at} must be a list, got {type(value).__name__}")
    return value


def _str(value: Any, where: str, at: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidGraph(f"{where}: {at} must be a non-empty string, got {value!r}")
    return value


def _strs(value: Any, where: str, at: str) -> list[str]:
    return [_str(v, where, f"{at}[{j}]") for j, v in enumerate(_list(value, where, at))]


def _size(value: Any, where: str, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidGraph(f"{where}: {at} must be a finite number >= 0, got {value!r}")
    if value > 1e300:  # finite, but any sum or transfer time of it overflows
        raise InvalidGraph(f"{where}: {at} is {value!r}: too large (at most 1e300)")
    return float(value)


def _check_nonempty(tasks: list[Task], where: str, at: str) -> None:
    if not tasks:
        raise InvalidGraph(f"{where}: {at} is empty: the workflow has no tasks")
