"""Your own training function as a NAS objective: ``nas search --space file.py:space --objective file.py:train``.

The space is a :class:`~mlsysopt.nas.spaces.declarative.Space` (or a function returning one) and the objective a
function of the parameters an architecture decodes to::

    def train(params, seed=0):           # seed: optional, the search's seed (train deterministically with it)
        model = build(params)            # your PyTorch model family
        ...
        return {"value": val_accuracy,   # or just the number; higher is better (direction="minimize" for a loss)
                "test_value": test_acc,                 # optional, reported beside it, never searched on
                "resources": {"latency_ms": ms},        # optional, what only training can measure
                "state_dict": model.state_dict()}       # optional: `nas export` writes the best one's

Both are named by a source (``path/to/file.py:name`` or ``package.module:name``), resolved by the one source
resolver (:mod:`mlsysopt.graph.importers.source`); **that runs the file's code** with your permissions, like
``python file.py``. :class:`ObjectiveSpace` pickles only the two sources, so every worker process (local pool or
Ray) imports the file itself and calls the objective there: the search process never runs your training.

A trial whose objective raises, calls ``sys.exit`` or returns something unusable is a failed evaluation with one
line saying what and where (``file:line in function``); a worker killed by a signal fails its trial after the
executor's retries. :func:`mlsysopt.nas.run_search` stops with one error when the first trials all fail (a broken
objective), and bounds every trial in flight by the search's ``timeout`` (:mod:`mlsysopt.nas.evaluation`).
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from mlsysopt.errors import ImportFailed, InvalidSpace, MlsysoptError, UnsupportedFormat
from mlsysopt.graph.importers.source import resolve_source
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.nas.spaces.declarative import Space

DIRECTIONS = ("maximize", "minimize")


class ObjectiveFailed(MlsysoptError):
    """The user's objective raised, exited or returned something that is not a result."""

    plain = True  # recorded as its message alone (it already says what failed)


def is_user_source(spec: str) -> bool:
    """Whether ``spec`` names a Python object (``file.py:name`` / ``module:name``) rather than a built-in space."""
    head, sep, tail = str(spec).rpartition(":")
    if not sep or not head or not tail:
        return False
    return head.endswith(".py") or (
        all(p.isidentifier() for p in head.split(".")) and head not in ("nasbench-graph", "cifar10")
    )


def load_object(spec: str, what: str) -> Any:
    """The object ``spec`` names (``file.py:name`` or ``module:name``), or one error naming ``what`` it was for."""
    try:
        src = resolve_source(spec)
        if src.kind != "pytorch" or src.is_zoo:
            raise ImportFailed(f"'{spec}': expected 'path/to/file.py:name' or 'package.module:name'")
        return src.load()
    except (ImportFailed, UnsupportedFormat) as exc:
        raise InvalidSpace(f"{what} {exc}") from None
    except SystemExit as exc:  # the user's module exited while being imported
        raise InvalidSpace(f"{what} '{spec}': importing it called sys.exit({exc.code!r})") from None


def load_space(spec: str) -> Space:
    """The declared space ``spec`` names: a :class:`Space`, or a function of no arguments returning one."""
    obj = load_object(spec, "--space")
    if not isinstance(obj, Space) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise InvalidSpace(f"--space '{spec}': calling it failed ({type(exc).__name__}: {exc})") from None
        except SystemExit as exc:
            raise InvalidSpace(f"--space '{spec}': calling it called sys.exit({exc.code!r})") from None
    if not isinstance(obj, Space):
        raise InvalidSpace(
            f"--space '{spec}' is a {type(obj).__name__}: expected an mlsysopt.nas.Space (or a function returning one)"
        )
    return obj


def load_objective(spec: str) -> Callable[..., Any]:
    """The training function ``spec`` names (it must be callable)."""
    fn = load_object(spec, "--objective")
    if not callable(fn):
        raise InvalidSpace(f"--objective '{spec}' is a {type(fn).__name__}, not a function")
    return fn  # type: ignore[no-any-return]


def _where(exc: BaseException) -> str:
    """``file.py:12 in train`` of the innermost frame outside mlsysopt (the user's line), or ''."""
    here = str(Path(__file__).resolve().parents[1])
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not os.path.abspath(frame.filename).startswith(here):
            return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"
    return ""


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ObjectiveFailed(f"the objective's {what} is {str(v)[:80]!r} ({type(v).__name__}), not a number")
    return float(v)


def parse_result(out: Any) -> dict[str, Any]:
    """``{"value", "test_value", "resources", "trained"}`` from what an objective returned (ObjectiveFailed if bad)."""
    if isinstance(out, Mapping):
        if "value" not in out:
            raise ObjectiveFailed(f"the objective returned a dict without 'value' (keys: {', '.join(map(str, out))})")
        value = _number(out["value"], "value")
        test = out.get("test_value")
        res = out.get("resources") or {}
        if not isinstance(res, Mapping):
            raise ObjectiveFailed(f"the objective's 'resources' is a {type(res).__name__}, not a dict")
        trained = None
        sd = out.get("state_dict")
        if sd is None and out.get("model") is not None and hasattr(out["model"], "state_dict"):
            sd = out["model"].state_dict()
        if sd is not None:
            trained = {"state_dict": {k: v.detach().cpu().clone() for k, v in dict(sd).items()}}
        return {
            "value": value,
            "test_value": None if test is None else _number(test, "test_value"),
            "resources": {str(k): _number(v, f"resource '{k}'") for k, v in res.items()},
            "trained": trained,
        }
    return {"value": _number(out, "return value"), "test_value": None, "resources": {}, "trained": None}


def invoke(fn: Callable[..., Any], params: dict[str, Any], seed: int) -> Any:
    """``fn(params, seed=seed)`` when ``fn`` takes a ``seed``, else ``fn(params)`` (whatever it raises, raised)."""
    try:
        takes_seed = "seed" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes_seed = False
    return fn(params, seed=seed) if takes_seed else fn(params)


def call_objective(fn: Callable[..., Any], params: dict[str, Any], seed: int) -> dict[str, Any]:
    """Call ``fn(params[, seed=seed])`` and parse its result; every way it can go wrong is one ObjectiveFailed."""
    try:
        out = invoke(fn, params, seed)
    except SystemExit as exc:
        raise ObjectiveFailed(f"the objective called sys.exit({exc.code!r})") from None
    except Exception as exc:
        where = _where(exc)
        at = f" (at {where})" if where else ""
        raise ObjectiveFailed(f"the objective raised {type(exc).__name__}: {exc}{at}") from None
    return parse_result(out)


class ObjectiveSpace(SearchSpace):
    """A declared :class:`Space` evaluated by a training function (the search sees ``value``, or ``-value`` when
    minimising; ``extra["value"]`` keeps yours).

    Args:
        space: the declared space.
        objective: the training function (None: loaded from ``objective_spec`` on first use).
        space_spec, objective_spec: the sources they came from; when both are given the space pickles as those two
            strings (and the folder they are relative to), so worker processes import the file themselves.
        direction: ``"maximize"`` (accuracy) or ``"minimize"`` (a loss).
    """

    interruptible = True  # the search's timeout stops a trial in flight (evaluation.time_limit)
    fail_fast = True  # the first trials all failing stop the search: the objective is broken

    def __init__(
        self,
        space: Space,
        objective: Callable[..., Any] | None = None,
        space_spec: str | None = None,
        objective_spec: str | None = None,
        direction: str = "maximize",
    ) -> None:
        if direction not in DIRECTIONS:
            raise InvalidSpace(f"unknown direction '{direction}' (choose from: {', '.join(DIRECTIONS)})")
        if objective is None and objective_spec is None:
            raise InvalidSpace("an objective space needs the objective (a function) or its source")
        self.inner, self.direction = space, direction
        self.space_spec, self.objective_spec = space_spec, objective_spec
        self.cwd = os.getcwd()
        self._objective = objective
        self._copy_shape()

    def _copy_shape(self) -> None:
        sp = self.inner
        self.name = sp.name
        self.min_blocks, self.max_blocks = sp.min_blocks, sp.max_blocks
        self.depth_is_a_choice = sp.depth_is_a_choice
        self.head_options, self.head_names = sp.head_options, sp.head_names
        self.block_options, self.block_names = sp.block_options, sp.block_names
        self.resource_names, self.costly_resources = sp.resource_names, sp.costly_resources
        self.measured = sp.measured

    def __getstate__(self) -> dict[str, Any]:
        """The two sources only when both are known (workers re-import them); else everything."""
        if self.space_spec and self.objective_spec:
            return {"space_spec": self.space_spec, "objective_spec": self.objective_spec, "cwd": self.cwd,
                    "direction": self.direction}  # fmt: skip
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`__getstate__` (re-imports the space file in this process, from the same folder)."""
        if "inner" in state:
            self.__dict__.update(state)
            return
        self.space_spec, self.objective_spec = state["space_spec"], state["objective_spec"]
        self.cwd, self.direction, self._objective = state["cwd"], state["direction"], None
        here = os.getcwd()
        try:
            os.chdir(self.cwd)  # relative paths and module names resolve as they did for the search
            self.inner = load_space(self.space_spec)
        finally:
            os.chdir(here)
        self._copy_shape()

    @property
    def objective(self) -> Callable[..., Any]:
        """The training function (imported on first use in this process)."""
        if self._objective is None:
            assert self.objective_spec is not None
            here = os.getcwd()
            try:
                os.chdir(self.cwd)
                self._objective = load_objective(self.objective_spec)
            finally:
                os.chdir(here)
        return self._objective

    # ------------------------------------------------------------------ delegated
    def decisions(self, blocks: int) -> list[int]:
        """The declared space's decisions."""
        return self.inner.decisions(blocks)

    def option_labels(self, blocks: int) -> list[list[Any]]:
        """The declared space's option values."""
        return self.inner.option_labels(blocks)

    def params(self, arch: Arch) -> dict[str, Any]:
        """The parameters ``arch`` stands for (what the objective is called with)."""
        return self.inner.params(arch)

    def decode(self, arch: Arch) -> dict[str, Any]:
        """The parameters (as :meth:`params`)."""
        return self.inner.decode(arch)

    def resources(self, arch: Arch) -> dict[str, float]:
        """The declared resources function's figures (no training)."""
        return self.inner.resources(arch)

    def resources_for(self, arch: Arch, names: Collection[str]) -> dict[str, float]:
        """As :meth:`resources` (the measured ones come with the evaluation)."""
        return self.inner.resources_for(arch, names)

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """Call the objective on ``arch``'s parameters (here, in whichever process runs the evaluation)."""
        t0 = time.perf_counter()
        params = self.params(arch)
        res = call_objective(self.objective, params, seed)
        value = res["value"]
        if not math.isfinite(value):
            raise ObjectiveFailed(f"the objective returned a non-finite value ({value})")
        sign = 1.0 if self.direction == "maximize" else -1.0
        test = None if res["test_value"] is None else sign * res["test_value"]
        resources = {**self.resources(arch), **res["resources"]}
        extra = {"value": value, "params": params}
        ev = Evaluation(arch, sign * value, test, resources, time.perf_counter() - t0, extra=extra)
        if res["test_value"] is not None:
            ev.extra["test_value"] = res["test_value"]
        ev.trained = res["trained"]
        return ev

    def __repr__(self) -> str:
        return f"ObjectiveSpace({self.name!r}, {self.objective_spec or 'objective'})"
