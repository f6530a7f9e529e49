"""One source resolver for every command that takes a model or a graph.

A *source* is what a user types where mlsysopt wants a model or a workflow:

=================================  ==========================================================================
``path/to/model.py:factory``       a Python file, imported by its path (its folder first on ``sys.path``)
``package.module:factory``         a module importable from the current folder (as ``python -m`` would)
``zoo:NAME``, ``mlsysopt.zoo:NAME``  a model of the bundled zoo (``cnn``, ``mobilenet``, ``transformer``, ...)
``model.onnx``                     an ONNX file
``graph.npz``                      a saved CompGraph
``workflow.json``                  a WfCommons workflow (WfFormat 1.3, 1.4 or 1.5)
``montage``, ``genome``, ...       a WfCommons recipe (synthetic instance fitted to real traces)
=================================  ==========================================================================

**Trust:** a ``file.py:factory`` or ``module:factory`` source *runs that Python code*, with your permissions, as
``python file.py`` would. Give only sources you trust. No other kind executes anything: ``.npz`` files are read with
``allow_pickle=False`` and ONNX/JSON files are parsed, not run.

**Isolation:** :meth:`Source.graph` runs a user's factory (and the tracing) in a child process
(:func:`mlsysopt.runtime.isolated.run_isolated`), bounded by ``timeout`` (a command's ``--timeout``, else 600 s):
a factory that loops, calls ``sys.exit`` or crashes the interpreter becomes one :class:`~mlsysopt.errors.ImportFailed`
(:class:`~mlsysopt.errors.UserCodeFailed`), and the caller never imports the user's code. :meth:`Source.pytorch`
(the module itself, for Python callers) runs it in the calling process.

A factory is a function (or class) called with no arguments that returns an ``nn.Module`` or a pair
``(module, example_inputs)``; a module-level ``nn.Module`` instance works too. A bare module needs
``input_shape`` (a random float input of that shape is used).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mlsysopt.errors import ImportFailed, UnsupportedFormat
from mlsysopt.graph.limits import check_recipe_tasks, parse_shape
from mlsysopt.runtime.isolated import run_isolated, user_code_timeout

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mlsysopt.graph.ir import CompGraph

Kind = Literal["npz", "onnx", "wfformat", "recipe", "pytorch"]
ZOO_PREFIXES = ("zoo:", "mlsysopt.zoo:")
FILE_KINDS: dict[str, Kind] = {".npz": "npz", ".onnx": "onnx", ".json": "wfformat"}


@dataclass(frozen=True)
class Source:
    """A resolved source: what kind it is and where it lives (nothing is imported or read yet).

    Build one with :func:`resolve_source`.

    Args:
        spec: the text the user gave.
        kind: ``npz``, ``onnx``, ``wfformat``, ``recipe`` or ``pytorch``.
        path: the file (``npz``/``onnx``/``wfformat``, or the ``.py`` file of a file-based PyTorch source).
        module: the module to import (``package.module`` or ``mlsysopt.zoo``) of a PyTorch source.
        attr: the factory's name of a PyTorch source (or the zoo model's name), or the recipe name.
    """

    spec: str
    kind: Kind
    path: Path | None = None
    module: str | None = None
    attr: str | None = None

    @property
    def is_zoo(self) -> bool:
        """Whether this is a model of the bundled zoo."""
        return self.kind == "pytorch" and self.module == "mlsysopt.zoo"

    @property
    def runs_user_code(self) -> bool:
        """Whether reading this source runs a user's Python code (a file or module factory, not the zoo)."""
        return self.kind == "pytorch" and not self.is_zoo

    @property
    def name(self) -> str:
        """A short name for titles and file names (the file stem, the factory or the recipe)."""
        if self.kind == "pytorch":
            return str(self.attr)
        if self.path is not None:
            return self.path.stem
        return str(self.attr or self.spec)

    def load(self) -> Any:
        """The object a ``file.py:name`` or ``module:name`` source names, of any type (this runs its module)."""
        if self.kind != "pytorch" or self.is_zoo:
            raise ImportFailed(f"'{self.spec}' is not a 'file.py:name' or 'module:name' source")
        return _load_attr(self)

    def pytorch(self, input_shape: tuple[int, ...] | None = None) -> tuple[Any, tuple[Any, ...]]:
        """``(module in eval mode, example_inputs)`` of a PyTorch source (this runs its code)."""
        if self.kind != "pytorch":
            raise ImportFailed(f"'{self.spec}' is a {self.kind} source, not a PyTorch model")
        if self.is_zoo:
            from mlsysopt import zoo  # deferred: mlsysopt.zoo imports torch

            try:
                return zoo.get(str(self.attr))
            except Exception as exc:  # unknown zoo name
                raise ImportFailed(str(exc)) from None
        factory = _load_attr(self)
        return _call_factory(self.spec, factory, input_shape)

    def graph(
        self,
        num_tasks: int = 100,
        seed: int = 0,
        input_shape: tuple[int, ...] | None = None,
        timeout: float | None = None,
    ) -> CompGraph:
        """The CompGraph of this source (``num_tasks``/``seed`` for recipes, ``input_shape`` for bare modules).

        A user's factory runs in a child process, stopped after ``timeout`` seconds (None: the default bound).
        """
        if self.kind == "npz":
            # deferred: imports numba, scipy, yaml
            from mlsysopt.graph.ir import CompGraph

            return CompGraph.load(self.path)  # type: ignore[arg-type]
        if self.kind == "onnx":
            # deferred: imports numba, onnx, scipy, yaml
            from mlsysopt.graph.importers.onnx import from_onnx

            return from_onnx(self.path)  # type: ignore[arg-type]
        if self.kind == "wfformat":
            # deferred: imports numba, scipy, yaml
            from mlsysopt.graph.importers.wfcommons import from_wfformat

            return from_wfformat(self.path)  # type: ignore[arg-type]
        if self.kind == "recipe":
            # deferred: imports numba, scipy, yaml
            from mlsysopt.graph.importers.wfcommons import from_recipe

            return from_recipe(str(self.attr), num_tasks=num_tasks, seed=seed)
        if self.runs_user_code:
            return self.isolated(pytorch_graph, self, input_shape, timeout=timeout)
        return pytorch_graph(self, input_shape)

    def isolated(self, fn: Any, *args: Any, timeout: float | None = None) -> Any:
        """``fn(*args)`` in a child process bounded by ``timeout`` (:func:`~mlsysopt.runtime.isolated.run_isolated`),
        errors naming this source; ``fn`` is a module-level function that loads the user's code itself."""

        seconds, bound = user_code_timeout(timeout)
        return run_isolated(fn, *args, timeout=seconds, what=f"'{self.spec}'", bound=bound)


def pytorch_graph(src: Source, input_shape: tuple[int, ...] | None = None) -> CompGraph:
    """The torch.fx CompGraph of a PyTorch source, in this process (what :meth:`Source.graph` runs in its child)."""
    module, inputs = src.pytorch(input_shape)  # first: a source that cannot load fails before torch is imported
    # deferred: imports numba, scipy, torch, yaml
    from mlsysopt.graph.importers.torch_fx import from_module

    return from_module(module, inputs, name=src.name)


def from_spec(spec: str, input_shape: tuple[int, ...] | None = None) -> CompGraph:
    """Import a PyTorch source (``file.py:factory``, ``package.module:factory``, ``zoo:NAME``) into a CompGraph.

    The factory returns ``(module, example_inputs)`` or a bare module; a bare module needs ``input_shape``.
    """
    try:
        src = resolve_source(spec)
    except UnsupportedFormat:
        src = None
    if src is None or src.kind != "pytorch":
        raise ImportFailed(f"'{spec}': expected a 'file.py:factory', 'package.module:factory' or zoo:NAME spec")
    return pytorch_graph(src, input_shape)


def load_source(
    source: str, num_tasks: int = 100, seed: int = 0, input_shape: str | None = None, timeout: float | None = None
) -> CompGraph:
    """The CompGraph of any source (see :mod:`mlsysopt.graph.importers.source`); a user's factory runs in a child
    process bounded by ``timeout`` (the command's ``--timeout``; None: the default bound for user code)."""
    src = resolve_source(source)
    if src.kind == "recipe":
        check_recipe_tasks(num_tasks, "--num-tasks")
    return src.graph(num_tasks=num_tasks, seed=seed, input_shape=parse_shape(input_shape), timeout=timeout)


def user_attr(spec: str) -> Any:
    """The object ``file.py:name`` or ``module:name`` names, imported in this process (this runs the user's file)."""
    src = resolve_source(spec)
    if not src.runs_user_code:
        raise ImportFailed(f"'{spec}': expected 'file.py:name' or 'package.module:name'")
    return _load_attr(src)


def call_user(spec: str, *args: Any, **kwargs: Any) -> Any:
    """Import ``file.py:name`` / ``module:name`` and call it; meant to run in a child process::

    run_isolated(call_user, "./objective.py:score", params, timeout=60, what="'./objective.py:score'")
    """
    return user_attr(spec)(*args, **kwargs)


def resolve_source(spec: str | Path) -> Source:
    """Classify ``spec`` (see the module docstring); one clear error when it is none of the known kinds.

    Nothing is imported or read: only the file's existence is checked.

    Args:
        spec: What the user typed: a file, a recipe name, ``zoo:NAME``, ``file.py:factory`` or ``module:factory``.

    Returns:
        The resolved :class:`Source`.

    Raises:
        UnsupportedFormat: If ``spec`` is empty, names a missing file or folder, or is none of the known kinds.
        ImportFailed: If ``spec`` is ``file.py:factory`` and the ``.py`` file does not exist.
    """
    text = str(spec).strip()
    if not text:
        raise UnsupportedFormat("empty source: give a file, a recipe name, zoo:NAME or 'module:factory'")
    for prefix in ZOO_PREFIXES:
        if text.startswith(prefix):
            return Source(text, "pytorch", module="mlsysopt.zoo", attr=text[len(prefix) :])
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix in FILE_KINDS and ":" not in path.name:
        if not path.exists():
            raise UnsupportedFormat(f"{path}: no such file")
        if path.is_dir():
            raise UnsupportedFormat(f"{path} is a folder, not a {suffix} file")
        return Source(text, FILE_KINDS[suffix], path=path)
    if path.is_file():
        raise UnsupportedFormat(
            f"{text}: unknown file format '{suffix or '(no extension)'}' (expected .npz CompGraph, .onnx model, "
            ".json WfCommons workflow, or file.py:factory)"
        )
    where, sep, attr = text.rpartition(":")
    if sep and where and attr:
        if where.endswith(".py"):
            file = Path(where)
            if not file.is_file():
                raise ImportFailed(f"'{text}': no such Python file {file}")
            return Source(text, "pytorch", path=file, attr=attr)
        if all(part.isidentifier() for part in where.split(".")):
            return Source(text, "pytorch", module=where, attr=attr)
    # deferred: imports numba, scipy, yaml
    from mlsysopt.graph.importers.wfcommons import RECIPES

    if text.lower() in RECIPES:
        return Source(text, "recipe", attr=text.lower())
    raise UnsupportedFormat(
        f"'{text}': no such file, and not a recipe name, zoo:NAME, 'file.py:factory' or 'module:factory' "
        f"(recipes: {', '.join(sorted(RECIPES))})"
    )


# ---------------------------------------------------------------------------- running user code
@contextmanager
def _first_on_path(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` while a user's module imports (its own imports of siblings resolve)."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _forget_if_elsewhere(module: str, folder: Path) -> None:
    """Drop an imported module of that top-level name when ``folder`` holds another one, so the current folder's
    module is the one imported (as ``python -m`` would), not one loaded earlier from somewhere else."""
    top = module.split(".")[0]
    here = [folder / f"{top}.py", folder / top / "__init__.py"]
    loaded = sys.modules.get(top)
    if loaded is None or not any(p.is_file() for p in here):
        return
    file = getattr(loaded, "__file__", None)
    if file is not None and Path(file).resolve() in {p.resolve() for p in here}:
        return
    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
        sys.modules.pop(name, None)


def _load_attr(src: Source) -> Any:
    """Import the source's module (by file path or by name, with the current folder importable) and get its attr."""
    try:
        if src.path is not None:
            file = src.path.resolve()
            name = f"mlsysopt_user_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
            module = sys.modules.get(name)
            if module is None:
                spec = importlib.util.spec_from_file_location(name, file)
                if spec is None or spec.loader is None:
                    raise ImportFailed(f"'{src.spec}': {file} cannot be imported as a Python module")
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    with _first_on_path(str(file.parent)):
                        spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
        else:
            _forget_if_elsewhere(str(src.module), Path.cwd())
            with _first_on_path(os.getcwd()):
                module = importlib.import_module(str(src.module))
    except ImportFailed:
        raise
    except Exception as exc:  # the user's module failed to import: say where, not a traceback
        where = src.path if src.path is not None else f"module '{src.module}'"
        raise ImportFailed(f"'{src.spec}': importing {where} failed ({type(exc).__name__}: {exc})") from None
    obj: Any = module
    for part in str(src.attr).split("."):
        if not hasattr(obj, part):
            where = src.path if src.path is not None else f"module '{src.module}'"
            raise ImportFailed(f"'{src.spec}': {where} has no attribute '{src.attr}'")
        obj = getattr(obj, part)
    return obj


def _call_factory(spec: str, factory: Any, input_shape: tuple[int, ...] | None) -> tuple[Any, tuple[Any, ...]]:
    """``(module.eval(), inputs)`` from a factory, a module class, or a module instance."""
    import torch  # deferred: torch loads only when a PyTorch source is traced
    from torch import nn  # deferred: torch loads only when a PyTorch source is traced

    if isinstance(factory, nn.Module):
        made: Any = factory
    elif callable(factory):
        try:
            made = factory()
        except Exception as exc:
            raise ImportFailed(f"'{spec}': calling the factory failed ({type(exc).__name__}: {exc})") from None
    else:
        raise ImportFailed(f"'{spec}': it names a {type(factory).__name__}, neither a factory nor an nn.Module")
    if isinstance(made, nn.Module):
        if input_shape is None:
            raise ImportFailed(
                f"'{spec}' returned a bare nn.Module without example inputs: give input_shape "
                "(e.g. --input-shape 1,3,32,32) or make the factory return (module, example_inputs)"
            )
        return made.eval(), (torch.randn(*input_shape),)
    if isinstance(made, (tuple, list)) and len(made) == 2 and isinstance(made[0], nn.Module):
        module, inputs = made
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        return module.eval(), inputs
    got = type(made).__name__
    raise ImportFailed(
        f"'{spec}': the factory returned {got}, expected an nn.Module or a (module, example_inputs) pair"
    )
