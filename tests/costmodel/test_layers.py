"""Every cost-model module has a place in the import-linter layers contract of pyproject.toml (data > plan > model >
steps > trainer > experiment > latency); `make lint` runs `lint-imports`, which checks that imports follow it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import mlsysopt.costmodel as pkg

ROOT = Path(pkg.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _contract() -> dict:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c.get("containers") == ["mlsysopt.costmodel"])


def test_every_module_has_a_layer() -> None:
    placed = {name for layer in _contract()["layers"] for name in re.split(r"[:|]", layer) if name.strip()}
    placed = {name.strip() for name in placed}
    modules = {p.relative_to(ROOT).parts[0].removesuffix(".py") for p in ROOT.iterdir() if p.name != "__init__.py"}
    modules = {m for m in modules if not m.startswith("__")}
    assert modules <= placed, sorted(modules - placed)
