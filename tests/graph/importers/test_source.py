"""The one source resolver: every kind of model or graph source, and one clear error for each bad one."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlsysopt.errors import ImportFailed, UnsupportedFormat
from mlsysopt.graph import layered_dag, load_graph
from mlsysopt.graph.importers.source import pytorch_graph, resolve_source

MODEL_PY = textwrap.dedent(
    """
    import torch
    from torch import nn
    from helper_layers import Block   # a sibling module: the file's folder is importable while it loads

    def tiny():
        return nn.Sequential(nn.Linear(8, 16), Block(16)), (torch.randn(2, 8),)

    def bare():
        return nn.Linear(4, 3)

    instance = nn.Linear(2, 2)

    def broken():
        raise RuntimeError("factory exploded")

    def wrong():
        return 42
    """
)
HELPER_PY = textwrap.dedent(
    """
    from torch import nn

    class Block(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)

        def forward(self, x):
            return self.lin(x).relu()
    """
)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(MODEL_PY)
    (tmp_path / "helper_layers.py").write_text(HELPER_PY)
    return tmp_path


def test_file_py_factory_is_imported_by_path(model_dir: Path) -> None:
    src = resolve_source(f"{model_dir}/mymodel.py:tiny")
    assert src.kind == "pytorch" and src.path == model_dir / "mymodel.py" and src.name == "tiny"
    g = src.graph()
    assert g.total_flops > 2 * 8 * 16 * 2  # both linear layers counted
    assert any("lin" in n for n in g.names)


def test_relative_file_path_and_bare_module(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(model_dir)
    g = load_graph("./mymodel.py:bare", input_shape=(5, 4))
    assert g.total_flops >= 2 * 5 * 4 * 3
    with pytest.raises(ImportFailed, match="bare nn.Module without example inputs"):
        resolve_source("mymodel.py:bare").pytorch()
    assert pytorch_graph(resolve_source("mymodel.py:instance"), (1, 2)).num_nodes >= 1


def test_module_factory_from_the_current_folder(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(model_dir)
    src = resolve_source("mymodel:tiny")
    assert src.kind == "pytorch" and src.module == "mymodel"
    assert src.graph().num_nodes > 2


@pytest.mark.parametrize("spec", ["zoo:cnn", "mlsysopt.zoo:cnn"])
def test_zoo_spellings_are_the_same_model(spec: str) -> None:
    src = resolve_source(spec)
    assert src.is_zoo and src.attr == "cnn"
    assert src.graph().total_flops == pytest.approx(load_graph("zoo:cnn").total_flops)


def test_files_and_recipes(tmp_path: Path) -> None:
    g = layered_dag(12, seed=0)
    g.save(tmp_path / "g.npz")
    assert resolve_source(tmp_path / "g.npz").kind == "npz"
    assert load_graph(tmp_path / "g.npz").num_nodes == 12
    rec = resolve_source("Montage")
    assert rec.kind == "recipe" and rec.attr == "montage"
    assert load_graph("montage", num_tasks=60, seed=1).meta["name"].startswith("montage")


@pytest.mark.parametrize(
    ("spec", "error", "needle"),
    [
        ("", UnsupportedFormat, "empty source"),
        ("nothing_here.onnx", UnsupportedFormat, "no such file"),
        ("not-a-recipe", UnsupportedFormat, "not a recipe name"),
        ("missing.py:f", ImportFailed, "no such Python file"),
        ("no_such_pkg_xyz.models:net", ImportFailed, "importing module 'no_such_pkg_xyz.models' failed"),
        ("zoo:nope", ImportFailed, "unknown zoo model 'nope'"),
    ],
)
def test_bad_sources_are_one_clear_error(spec: str, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle):
        resolve_source(spec).graph()


def test_bad_files_and_factories(model_dir: Path) -> None:
    (model_dir / "notes.txt").write_text("hello")
    with pytest.raises(UnsupportedFormat, match="unknown file format '.txt'"):
        resolve_source(model_dir / "notes.txt")
    (model_dir / "folder.npz").mkdir()
    with pytest.raises(UnsupportedFormat, match="is a folder"):
        resolve_source(model_dir / "folder.npz")
    file = f"{model_dir}/mymodel.py"
    with pytest.raises(ImportFailed, match="calling the factory failed .*factory exploded"):
        resolve_source(f"{file}:broken").graph()  # raised in graph()'s child process, re-raised here
    # the same checks in this process (Source.pytorch), without a child process per case
    with pytest.raises(ImportFailed, match="the factory returned int"):
        resolve_source(f"{file}:wrong").pytorch()
    with pytest.raises(ImportFailed, match="has no attribute 'nope'"):
        resolve_source(f"{file}:nope").pytorch()
    (model_dir / "syntax.py").write_text("def f(:\n")
    with pytest.raises(ImportFailed, match="importing .*syntax.py failed .*SyntaxError"):
        resolve_source(f"{model_dir}/syntax.py:f").pytorch()
