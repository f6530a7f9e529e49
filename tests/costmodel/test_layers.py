"""The cost-model package imports in one direction: data -> plan -> model -> steps -> evaluation (and the trainer's
graphs, trainer_data) -> trainer -> experiment (every import counts: module level, inside functions and under
TYPE_CHECKING)."""

from __future__ import annotations

import ast
from pathlib import Path

import mlsysopt.costmodel as pkg

ROOT = Path(pkg.__file__).parent
#: Layer of every module (lower layers never import higher ones; a module may import its own layer's siblings
#: only where listed in SAME_LAYER).
LAYERS: dict[str, int] = {
    "limits": 0,
    "data": 1,
    **{
        m: 2
        for m in (
            "inputs",
            "segment",
            "metrics",
            "losses",
            "memory",
            "history",
            "checkpoint",
            "train_config",
            "model_config",
            "distributed",
        )
    },
    "plan": 3,
    "model": 4,
    "gst": 5,
    **{m: 6 for m in ("evaluation", "trainer_data")},
    **{m: 7 for m in ("trainer", "trees", "boosting", "baselines")},
    **{m: 8 for m in ("experiment", "inference", "synthesis", "collection")},
    "latency": 9,  # a trained run as an oracle: loads it (inference), builds records as collection does
}


def _module(path: Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for n in names:
            if n.startswith("mlsysopt.costmodel."):
                part = n.split(".")[2]
                # ``from mlsysopt.costmodel import X`` goes through the root's lazy exports to X's module
                found.add(part if part in LAYERS else pkg._EXPORTS[part].split(".")[2])
    return found


def test_every_module_has_a_layer() -> None:
    modules = {_module(p) for p in ROOT.rglob("*.py") if p.name != "__init__.py" or p.parent != ROOT}
    assert modules <= set(LAYERS), sorted(modules - set(LAYERS))


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for path in ROOT.rglob("*.py"):
        if path.parent == ROOT and path.name == "__init__.py":
            continue  # the package root re-exports everything lazily
        me = _module(path)
        for other in _imports(path) - {me}:
            if LAYERS[other] > LAYERS[me] or (LAYERS[other] == LAYERS[me] and (me, other) not in SAME_LAYER):
                wrong.append(f"{path.relative_to(ROOT)} imports {other}")
    assert not wrong, wrong


#: Same-layer imports that are allowed (one direction each).
SAME_LAYER = {("boosting", "trees"), ("baselines", "trees"), ("baselines", "boosting"), ("trainer", "trees"),
              ("inference", "experiment"), ("inference", "baselines"), ("experiment", "baselines"),
              ("trainer", "baselines")}  # fmt: skip
