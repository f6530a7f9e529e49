"""load_graph: one entry point that dispatches on what it is given, with clear errors for the rest."""

from __future__ import annotations

import pytest

from mlsysopt.errors import UnsupportedFormat
from mlsysopt.graph.generate import diamond
from mlsysopt.graph.importers import load_graph


def test_npz_round_trip(tmp_path) -> None:
    path = diamond().save(tmp_path / "g.npz")
    assert load_graph(path).num_nodes == 4


def test_unknown_file_format(tmp_path) -> None:
    path = tmp_path / "model.txt"
    path.write_text("hello")
    with pytest.raises(UnsupportedFormat, match=r"model\.txt: unknown file format '\.txt'"):
        load_graph(path)


def test_not_a_file_recipe_or_spec() -> None:
    with pytest.raises(UnsupportedFormat, match="no such file, and not a recipe name"):
        load_graph("no_such_thing")


def test_recipe_name_dispatches() -> None:
    g = load_graph("montage", num_tasks=60, seed=1)
    assert g.meta.get("source") == "wfcommons" and g.num_nodes >= 50
