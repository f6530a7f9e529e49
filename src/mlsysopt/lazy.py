"""Lazy public names for package roots: ``from mlsysopt.placement import GiPH`` imports only what it needs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a package root whose public names live in submodules.

    A public name must not also be the name of a submodule of the package (``simulate`` beside
    ``simulate.py``): importing the submodule would replace the attribute. ``tests/test_api.py`` checks this.

    Args:
        package: the package's ``__name__``.
        exports: public name -> module that defines it (absolute, e.g. ``"mlsysopt.placement.giph"``).
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this hook
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
