"""numba kernels compiled when first called, so that importing a graph module does not import numba.

Importing numba takes 0.2-1 s (it brings llvmlite and scipy). The graph modules are imported by every reader of a
graph, so with ``@numba.njit`` at module level every ``mlsysopt`` command would pay it, also the ones that never
order, schedule or simulate a graph (``--help``, ``runs list``, a refused input).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def njit_on_first_call(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: ``numba.njit(**options)(fn)``, compiled (or read from numba's cache) on the first call.

    A kernel may call another kernel so decorated: when the caller compiles, each such callee it names is compiled
    first and its module global becomes the numba dispatcher (numba calls dispatchers, not Python wrappers).

    Args:
        **options: ``numba.njit`` options (``cache=True``, ``nogil=True``, ...).

    Returns:
        Callable: The decorator.
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            return _compiled(call)(*args)

        call._njit = (fn, options, [None])  # type: ignore[attr-defined]
        return call

    return wrap


def _compiled(wrapper: Any) -> Any:
    """The numba dispatcher of a :func:`njit_on_first_call` wrapper, compiling it (and its callees) once."""
    fn, options, slot = wrapper._njit
    if slot[0] is None:
        import numba  # deferred: imports numba, llvmlite and scipy

        names = fn.__globals__
        for name in fn.__code__.co_names:
            if hasattr(names.get(name), "_njit"):
                names[name] = _compiled(names[name])
        slot[0] = numba.njit(**options)(fn)
    return slot[0]
