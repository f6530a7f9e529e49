"""NAS search spaces behind one interface: NAS-Bench-Graph table look-ups and CNN cells trained for real."""

from __future__ import annotations

import inspect
from typing import Any

from mlsysopt.errors import InvalidSpace
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.nas.spaces.nasbench_graph import DATASETS as NASBENCH_GRAPH_DATASETS
from mlsysopt.nas.spaces.nasbench_graph import NasBenchGraphSpace

SPACE_SPECS: tuple[str, ...] = (
    *(f"nasbench-graph:{d}" for d in NASBENCH_GRAPH_DATASETS),
    "digits",
    "cifar10:/path/to/folder",
)


def _make(cls: type[SearchSpace], spec: str, arg: str, kw: dict[str, Any]) -> SearchSpace:
    """``cls(arg, **kw)``, naming the options ``cls`` does not take instead of a bare TypeError."""
    params = inspect.signature(cls.__init__).parameters
    unknown = sorted(k for k in kw if k not in params or k in ("self", "dataset"))
    if unknown:
        known = ", ".join(k for k in params if k not in ("self", "dataset")) or "none"
        raise InvalidSpace(f"space '{spec}' does not take option(s) {unknown} (it takes: {known})")
    return cls(arg, **kw)


def get_space(spec: str, **kw: Any) -> SearchSpace:
    """The space named by ``spec``: ``nasbench-graph:<dataset>``, ``digits`` or ``cifar10:/path/to/folder``.

    ``kw`` go to the space's constructor (e.g. ``epochs=4`` or ``ops=[...]`` for the CNN spaces).

    Args:
        spec: ``nasbench-graph:<dataset>``, ``digits`` or ``cifar10:/path/to/folder``.
        **kw: Options of the space's constructor (e.g. ``epochs=4`` for a CNN space).

    Returns:
        SearchSpace: The space.

    Raises:
        InvalidSpace: For an unknown spec or an option the space does not take.
        InvalidDataset: For an unknown dataset.
    """
    kind, sep, arg = str(spec).partition(":")
    if kind == "nasbench-graph" and sep:
        return _make(NasBenchGraphSpace, spec, arg, kw)
    if spec == "digits" or (kind == "cifar10" and arg):
        from mlsysopt.nas.spaces.cnn import CnnSpace  # deferred: mlsysopt.nas.spaces.cnn imports torch

        return _make(CnnSpace, spec, str(spec), kw)
    raise InvalidSpace(f"unknown search space '{spec}' (choose from: {', '.join(SPACE_SPECS)})")


def __getattr__(name: str) -> Any:
    """``CnnSpace`` is imported lazily, so NAS-Bench-Graph users do not pay for importing torch."""
    if name == "CnnSpace":
        from mlsysopt.nas.spaces.cnn import CnnSpace  # deferred: mlsysopt.nas.spaces.cnn imports torch

        return CnnSpace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "NASBENCH_GRAPH_DATASETS",
    "SPACE_SPECS",
    "Arch",
    "CnnSpace",
    "Evaluation",
    "NasBenchGraphSpace",
    "SearchSpace",
    "get_space",
]
