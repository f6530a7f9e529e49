"""Importers: PyTorch modules (torch.fx), ONNX files and WfCommons workflows -> CompGraph.

:func:`load_graph` picks the importer from what it is given, so the CLI and every system accept the same inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.errors import UnsupportedFormat
from mlsysopt.graph.ir import CompGraph


def load_graph(source: str | Path, **kwargs: Any) -> CompGraph:
    """Load a CompGraph from a ``.npz``, ``.onnx``, WfFormat ``.json``, a recipe name or a ``module:factory`` spec.

    ``kwargs`` go to the importer (``num_tasks``/``seed`` for recipes, ``input_shape`` for specs).
    """
    text = str(source)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return CompGraph.load(path)
    if suffix == ".onnx":
        from mlsysopt.graph.importers.onnx import from_onnx

        return from_onnx(path)
    if suffix == ".json":
        from mlsysopt.graph.importers.wfcommons import from_wfformat

        return from_wfformat(path)
    if not path.exists():
        from mlsysopt.graph.importers.wfcommons import RECIPES, from_recipe

        if text.lower() in RECIPES:
            return from_recipe(text.lower(), **kwargs)
        if ":" in text and "/" not in text.split(":", 1)[0]:
            from mlsysopt.graph.importers.torch_fx import from_spec

            return from_spec(text, **kwargs)
        raise UnsupportedFormat(
            f"'{text}': no such file, and not a recipe name or a 'module:factory' spec "
            f"(recipes: {', '.join(sorted(RECIPES))})"
        )
    raise UnsupportedFormat(
        f"{text}: unknown file format '{suffix or '(no extension)'}' "
        "(expected .npz CompGraph, .onnx model, .json WfCommons workflow)"
    )
