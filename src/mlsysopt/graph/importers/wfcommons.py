"""WfCommons workflows -> CompGraph: WfFormat JSON instances and WfChef recipes.

WfChef recipes (blast, bwa, cycles, epigenomics, genome, montage, rnaseq, seismology, soykb, srasearch) are
fitted to real executions of those scientific workflows: the graph structure is grown from the recorded
task graphs and runtimes / file sizes are drawn from distributions fitted to the traces, so these are
real-trace-based graphs rather than purely synthetic ones. (In wfcommons 1.6 the ``rnaseq`` traces record no
dependencies between tasks, so that recipe yields independent tasks and no edges.)

Conversion, the same for files and recipes:

* one node per task, named by its task id (schema 1.5+) or task name (1.0-1.4, where parents refer to names);
  every schema version is read (:mod:`mlsysopt.graph.importers.wfformat` describes the layouts);
* op ``wf:<kind>``, where the kind is the task's ``category``, else its name without a trailing ``_ID0000001`` /
  ``_00000001`` counter, so the vocabulary captures task kinds (``wf:mProject``);
* ``compute`` = runtime in seconds, read as reference-seconds on a device of speed 1; ``flops`` = 0; a task the
  instance gives no runtime gets 0 and a :class:`~mlsysopt.errors.MlsysoptWarning` (counted in
  ``meta["tasks_without_runtime"]``);
* an edge per listed dependency (``parents`` and ``children`` both count), carrying the total size of the files
  the parent outputs and the child inputs (0 when they share none);
* ``bytes_in`` / ``bytes_out`` = total size of the task's input / output files;
* ``hw_type`` = 0 everywhere (WfFormat has no hardware-type constraint).

A file a task references but the instance does not declare counts as 0 bytes, as in WfCommons itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import ImportFailed, InvalidGraph, MlsysoptError, MlsysoptWarning, UnsupportedFormat
from mlsysopt.graph.importers.wfformat import Task, parse
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.limits import check_recipe_tasks
from mlsysopt.io import read_json


def _import_wfcommons(module: str) -> Any:
    """Import a wfcommons module with the caller's warning filters kept: ``wfcommons.utils`` runs
    ``warnings.filterwarnings('ignore')`` when imported, which would silence every later warning of the process
    (mlsysopt's own included)."""
    with warnings.catch_warnings():
        return importlib.import_module(module)


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
            WfChefWorkflowRecipe = _import_wfcommons("wfcommons.wfchef.wfchef_abstract_recipe").WfChefWorkflowRecipe
            module = _import_wfcommons(f"wfcommons.wfchef.recipes.{name}")
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
    """A real-trace-based workflow from a WfChef recipe with ``num_tasks`` tasks, or the nearest size it can build.

    WfChef grows a real base graph by whole patterns, so it builds only some sizes (montage: 58, 62, 66, ...; asked
    for N it returns up to 5 fewer). The request is raised until the recipe reaches ``num_tasks``: the graph has
    exactly ``num_tasks`` tasks when the recipe can build that, else the nearest size it can (the smaller on a
    tie), with a :class:`~mlsysopt.errors.MlsysoptWarning` naming both (``meta["num_tasks_requested"]``).
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

    check_recipe_tasks(int(num_tasks), "num_tasks")
    recipe_cls = RECIPES[key]
    WorkflowGenerator = _import_wfcommons("wfcommons").WorkflowGenerator

    def build(request: int) -> Any:
        random.seed(int(seed))
        np.random.seed(int(seed) % 2**32)
        return WorkflowGenerator(recipe_cls.from_num_tasks(request)).build_workflow()

    py_state, np_state = random.getstate(), np.random.get_state()
    want = int(num_tasks)
    try:
        workflow = build(want)  # at most ``want`` tasks
        if len(workflow.nodes) < want:  # raise the request until the recipe reaches ``want`` (a few patterns)
            for request in range(want + 1, want + max(16, want // 10) + 1):
                larger = build(request)
                if len(larger.nodes) >= want:
                    if len(larger.nodes) - want < want - len(workflow.nodes):
                        workflow = larger
                    break
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
    built = len(workflow.nodes)
    if built != want:
        warnings.warn(
            f"recipe '{key}' built {built} tasks for num_tasks={want}: the nearest size it can build (WfChef grows "
            "its real base graph by whole patterns)",
            MlsysoptWarning,
            stacklevel=2,
        )
    return _convert(workflow.workflow_json, f"recipe '{key}'", meta)


def from_wfformat(path: str | Path) -> CompGraph:
    """Read a WfFormat JSON instance of any schema version (1.0-1.2 ``jobs``, 1.3/1.4 ``tasks``, 1.5/1.6)."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise InvalidGraph(f"{where}: no such file")
    if not path.is_file():
        raise InvalidGraph(f"{where}: not a file")
    data = read_json(path, UnsupportedFormat, expect=None)
    return _convert(data, where, {"name": data.get("name", path.stem) if isinstance(data, dict) else path.stem})


# ---------------------------------------------------------------------- conversion
def _convert(data: Any, where: str, meta: dict[str, Any]) -> CompGraph:
    """Shared by files and recipes: a parsed WfFormat dict -> CompGraph; errors start with ``where``."""
    parsed = parse(data, where)
    for note in parsed.notes:
        warnings.warn(note, MlsysoptWarning, stacklevel=3)
    tasks, lookup = parsed.tasks, parsed.lookup
    edges: dict[tuple[int, int], None] = {}
    for i, t in enumerate(tasks):
        for ref in t.refs:
            edges[(_resolve(lookup, ref, where, t, "parent"), i)] = None
        for ref in t.kids:
            edges[(i, _resolve(lookup, ref, where, t, "child"))] = None
    pairs = list(edges)
    nbytes = [sum(size for f, size in tasks[u].outputs.items() if f in tasks[v].inputs) for u, v in pairs]
    features = {
        "compute": [t.runtime or 0.0 for t in tasks],
        "bytes_in": [sum(t.inputs.values()) for t in tasks],
        "bytes_out": [sum(t.outputs.values()) for t in tasks],
    }
    full_meta = {**meta, "source": "wfcommons"}
    if isinstance(data.get("schemaVersion"), str):
        full_meta["schema_version"] = data["schemaVersion"]
    missing = parsed.no_runtime
    if missing:
        full_meta["tasks_without_runtime"] = len(missing)
    try:
        graph = CompGraph.build(
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
    if missing:
        what = (
            "have no execution entry (or one without runtimeInSeconds)" if parsed.layout == "1.5" else "have no runtime"
        )
        warnings.warn(
            f"{where}: {len(missing)} of {len(tasks)} tasks ({_examples(missing)}) {what}: "
            "they count as compute 0 (they take no time on any device)",
            MlsysoptWarning,
            stacklevel=3,
        )
    return graph


def _examples(names: list[str], k: int = 3) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:k])
    return shown + (f" and {len(names) - k} more" if len(names) > k else "")


def _resolve(lookup: dict[str, int], ref: str, where: str, task: Task, role: str) -> int:
    if ref not in lookup:
        raise InvalidGraph(f"{where}: task '{task.name}' lists {role} '{ref}', which is not a task of the workflow")
    return lookup[ref]
