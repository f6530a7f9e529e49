"""Docstrings a reader can use: every public class and function of a package root says what its arguments are and
what it returns (``Args:`` / ``Returns:``, Google style, as PyG does), unless it takes none and returns nothing."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import mlsysopt

PACKAGES = sorted(p.name for p in Path(mlsysopt.__file__).parent.iterdir() if (p / "__init__.py").is_file())
ROOTS = ["mlsysopt", *(f"mlsysopt.{name}" for name in PACKAGES)]


def _takes_arguments(obj: object) -> bool:
    try:
        params = inspect.signature(obj).parameters.values()  # a class: its constructor's
    except (TypeError, ValueError):
        return True
    return any(p.name not in ("self", "cls") for p in params)


@pytest.mark.parametrize("root", [r for r in ROOTS if r != "mlsysopt.cli"])
def test_every_public_name_of_a_package_root_documents_its_arguments(root: str) -> None:
    module = importlib.import_module(root)
    missing = []
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name)
        if not callable(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        doc = inspect.getdoc(obj) or ""
        if not doc:
            missing.append(f"{name} (no docstring)")
        elif _takes_arguments(obj) and "Args:" not in doc and "Returns:" not in doc:
            missing.append(name)
    assert not missing, f"{root}: {missing}"
