"""Fixtures shared by the serving tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsysopt.serving.model import export_zoo_onnx


@pytest.fixture(scope="session")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zoo CNN exported to ONNX once per worker (each module loads its own ``ServedModel`` of it: a model keeps
    its ONNX Runtime sessions, which the engine tests check)."""
    return export_zoo_onnx("cnn", tmp_path_factory.mktemp("served") / "cnn.onnx")
