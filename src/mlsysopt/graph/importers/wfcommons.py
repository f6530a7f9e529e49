"""WfCommons workflows -> CompGraph: WfFormat JSON instances and WfChef recipes.

WfChef recipes (blast, bwa, cycles, epigenomics, genome, montage, rnaseq, seismology, soykb, srasearch) are
fitted to real executions of those scientific workflows: the graph structure is grown from the recorded
task graphs and runtimes / file sizes are drawn from distributions fitted to the traces, so these are
real-trace-based graphs rather than purely synthetic ones. (In wfcommons 1.6 the ``rnaseq`` traces record no
dependencies between tasks, so that recipe yields independent tasks and no edges.)

Conversion, the same for files and recipes:

* one node per task, named by its task id (schema 1.5+) or task name (schema 1.4, where parents refer to names);
* op ``wf:<kind>``, where the kind is the task's ``category``, else its name without a trailing ``_ID0000001`` /
  ``_00000001`` counter, so the vocabulary captures task kinds (``wf:mProject``);
* ``compute`` = runtime in seconds, read as reference-seconds on a device of speed 1; ``flops`` = 0;
* an edge per listed dependency (``parents`` and ``children`` both count), carrying the total size of the files
  the parent outputs and the child inputs (0 when they share none);
* ``bytes_in`` / ``bytes_out`` = total size of the task's input / output files;
* ``hw_type`` = 0 everywhere (WfFormat has no hardware-type constraint).

A file a task references but the instance does not declare counts as 0 bytes, as in WfCommons itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import ImportFailed, InvalidGraph, MlsysoptError, UnsupportedFormat
from mlsysopt.graph.ir import CompGraph
from mlsysopt.io import read_json

_COUNTER_SUFFIX = re.compile(r"_(?:ID)?\d+$")


class _RecipeRegistry(Mapping[str, type]):
    """Recipe name -> WfChef recipe class; names come from the installed package without importing it."""

    def __init__(self) -> None:
        self._names: tuple[str, ...] | None = None
        self._classes: dict[str, type] = {}

    def _keys(self) -> tuple[str, ...]:
        if self._names is None:
            # importing wfcommons takes seconds; find_spec on the top-level package does not execute it
            spec = importlib.util.find_spec("wfcommons")
            names: list[str] = []
            for loc in (spec.submodule_search_locations or []) if spec else []:
                root = Path(loc) / "wfchef" / "recipes"
                if root.is_dir():
                    names += [p.name for p in root.iterdir() if (p / "recipe.py").is_file()]
            self._names = tuple(sorted(set(names)))
        return self._names

    def __getitem__(self, name: str) -> type:
        if name not in self._keys():
            raise KeyError(name)
        if name not in self._classes:
            from wfcommons.wfchef.wfchef_abstract_recipe import WfChefWorkflowRecipe

            module = importlib.import_module(f"wfcommons.wfchef.recipes.{name}")
            found = [
                obj
                for obj in vars(module).values()
                if isinstance(obj, type) and issubclass(obj, WfChefWorkflowRecipe) and obj is not WfChefWorkflowRecipe
            ]
            if not found:
                raise KeyError(name)
            self._classes[name] = found[0]
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, name: object) -> bool:
        return name in self._keys()


#: WfChef recipe name (``montage``, ...) -> recipe class, for the recipes the installed wfcommons ships.
RECIPES: Mapping[str, type] = _RecipeRegistry()


def from_recipe(name: str, num_tasks: int = 100, seed: int = 0) -> CompGraph:
    """A real-trace-based workflow from a WfChef recipe, with at most ``num_tasks`` tasks (often 2-5 fewer).

    Each recipe has a smallest size it can build (its smallest real base graph, e.g. 60 for montage);
    asking for fewer raises ImportFailed naming it. The same ``seed`` gives the same graph; Python's and
    numpy's global random states are seeded for the call and restored afterwards.
    """
    key = str(name).lower()
    if key not in RECIPES:
        raise MlsysoptError(f"unknown WfCommons recipe '{name}' (available: {', '.join(RECIPES) or 'none'})")
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise MlsysoptError(f"num_tasks must be a positive integer, got {num_tasks!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise MlsysoptError(f"seed must be an integer, got {seed!r}")
    recipe_cls = RECIPES[key]
    from wfcommons import WorkflowGenerator

    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    try:
        workflow = WorkflowGenerator(recipe_cls.from_num_tasks(int(num_tasks))).build_workflow()
        workflow.generate_json()
    except ValueError as exc:
        base = re.search(r"base graph with (\d+) nodes", str(exc))
        if base:
            raise ImportFailed(
                f"recipe '{key}' cannot build a workflow of {num_tasks} tasks: the real-trace base graph it "
                f"starts from has {base[1]} tasks (use num_tasks >= {base[1]})"
            ) from None
        raise ImportFailed(f"recipe '{key}' failed for num_tasks={num_tasks}: {exc}") from None
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    meta = {"name": f"{key}-n{num_tasks}-s{seed}", "recipe": key, "num_tasks_requested": int(num_tasks)}
    return _convert(workflow.workflow_json, f"recipe '{key}'", meta)


def from_wfformat(path: str | Path) -> CompGraph:
    """Read a WfFormat JSON instance (schema 1.5/1.6 ``specification``/``execution``, or the 1.4 layout)."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise InvalidGraph(f"{where}: no such file")
    if not path.is_file():
        raise InvalidGraph(f"{where}: not a file")
    data = read_json(path, UnsupportedFormat, expect=None)
    return _convert(data, where, {"name": data.get("name", path.stem) if isinstance(data, dict) else path.stem})


# ---------------------------------------------------------------------- parsing
@dataclass
class _Task:
    name: str
    kind: str
    runtime: float = 0.0
    refs: list[str] = field(default_factory=list)  # parents
    kids: list[str] = field(default_factory=list)  # children
    inputs: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, float] = field(default_factory=dict)


def _convert(data: Any, where: str, meta: dict[str, Any]) -> CompGraph:
    """Shared by files and recipes: a parsed WfFormat dict -> CompGraph; errors start with ``where``."""
    if not isinstance(data, dict):
        raise UnsupportedFormat(f"{where}: not a WfFormat instance (top level is {type(data).__name__})")
    wf = data.get("workflow")
    if not isinstance(wf, dict):
        raise UnsupportedFormat(f"{where}: not a WfFormat instance (no 'workflow' object)")
    if "specification" in wf:
        tasks, lookup = _parse_v15(wf, where)
    elif "tasks" in wf or "jobs" in wf:
        tasks, lookup = _parse_v14(wf, where)
    else:
        raise UnsupportedFormat(
            f"{where}: 'workflow' has neither 'specification' (schema 1.5+) nor 'tasks' (schema 1.4)"
        )
    edges: dict[tuple[int, int], None] = {}
    for i, t in enumerate(tasks):
        for ref in t.refs:
            edges[(_resolve(lookup, ref, where, t, "parent"), i)] = None
        for ref in t.kids:
            edges[(i, _resolve(lookup, ref, where, t, "child"))] = None
    pairs = list(edges)
    nbytes = [sum(size for f, size in tasks[u].outputs.items() if f in tasks[v].inputs) for u, v in pairs]
    features = {
        "compute": [t.runtime for t in tasks],
        "bytes_in": [sum(t.inputs.values()) for t in tasks],
        "bytes_out": [sum(t.outputs.values()) for t in tasks],
    }
    full_meta = {**meta, "source": "wfcommons"}
    if isinstance(data.get("schemaVersion"), str):
        full_meta["schema_version"] = data["schemaVersion"]
    try:
        return CompGraph.build(
            [t.name for t in tasks],
            [f"wf:{t.kind}" for t in tasks],
            features,
            np.asarray(pairs, np.int64).reshape(-1, 2),
            np.asarray(nbytes, np.float64),
            None,
            full_meta,
        )
    except InvalidGraph as exc:
        raise InvalidGraph(f"{where}: {exc}") from None


def _parse_v15(wf: dict[str, Any], where: str) -> tuple[list[_Task], dict[str, int]]:
    spec = _obj(wf["specification"], where, "workflow.specification")
    sizes: dict[str, float] = {}
    for k, f in enumerate(_list(spec.get("files", []), where, "workflow.specification.files")):
        at = f"workflow.specification.files[{k}]"
        f = _obj(f, where, at)
        sizes[_str(_need(f, "id", where, at), where, f"{at}.id")] = _size(
            _need(f, "sizeInBytes", where, at), where, f"{at}.sizeInBytes"
        )
    tasks: list[_Task] = []
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
        task = _Task(tid, _kind(t.get("category"), name if isinstance(name, str) else tid))
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
            task.runtime = _size(_need(e, "runtimeInSeconds", where, at), where, f"{at}.runtimeInSeconds")
            if isinstance(e.get("category"), str) and e["category"]:
                task.kind = e["category"]
    return tasks, lookup


def _parse_v14(wf: dict[str, Any], where: str) -> tuple[list[_Task], dict[str, int]]:
    key = "tasks" if "tasks" in wf else "jobs"
    tasks: list[_Task] = []
    lookup: dict[str, int] = {}
    ids: dict[str, int] = {}
    for k, t in enumerate(_list(wf[key], where, f"workflow.{key}")):
        at = f"workflow.{key}[{k}]"
        t = _obj(t, where, at)
        name = _str(_need(t, "name", where, at), where, f"{at}.name")
        if name in lookup:
            raise InvalidGraph(f"{where}: {at} repeats task name '{name}'")
        lookup[name] = len(tasks)
        if isinstance(t.get("id"), str):
            ids[t["id"]] = len(tasks)
        field_name = "runtimeInSeconds" if "runtimeInSeconds" in t else "runtime"
        if field_name not in t:
            raise InvalidGraph(f"{where}: {at} is missing 'runtimeInSeconds' (or 'runtime')")
        task = _Task(name, _kind(t.get("category"), name))
        task.runtime = _size(t[field_name], where, f"{at}.{field_name}")
        task.refs = _strs(t.get("parents", []), where, f"{at}.parents")
        task.kids = _strs(t.get("children", []), where, f"{at}.children")
        for j, f in enumerate(_list(t.get("files", []), where, f"{at}.files")):
            fat = f"{at}.files[{j}]"
            f = _obj(f, where, fat)
            link = _need(f, "link", where, fat)
            if link not in ("input", "output"):
                raise InvalidGraph(f"{where}: {fat}.link is {link!r}, expected 'input' or 'output'")
            fname = _str(_need(f, "name", where, fat), where, f"{fat}.name")
            size = _size(_need(f, "size", where, fat), where, f"{fat}.size")
            (task.inputs if link == "input" else task.outputs)[fname] = size
        tasks.append(task)
    _check_nonempty(tasks, where, f"workflow.{key}")
    # 1.4 parents name tasks; accept ids too where they do not clash with a name
    return tasks, {**ids, **lookup}


def _resolve(lookup: dict[str, int], ref: str, where: str, task: _Task, role: str) -> int:
    if ref not in lookup:
        raise InvalidGraph(f"{where}: task '{task.name}' lists {role} '{ref}', which is not a task of the workflow")
    return lookup[ref]


def _kind(category: Any, name: str) -> str:
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
    return float(value)


def _check_nonempty(tasks: list[_Task], where: str, at: str) -> None:
    if not tasks:
        raise InvalidGraph(f"{where}: {at} is empty: the workflow has no tasks")
