"""Importers: PyTorch modules (torch.fx), ONNX files and WfCommons workflows -> CompGraph.

:func:`load_graph` picks the importer from what it is given (:mod:`mlsysopt.graph.importers.source` says what
each kind of source looks like), so the CLI and every system accept the same inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.graph.importers.source import resolve_source

if TYPE_CHECKING:  # numba, through the IR: not for a child process that only runs a user's function
    from mlsysopt.graph.ir import CompGraph


def load_graph(source: str | Path, **kwargs: Any) -> CompGraph:
    """Load a CompGraph from any source :func:`~mlsysopt.graph.importers.source.resolve_source` accepts.

    ``kwargs``: ``num_tasks``/``seed`` for recipes, ``input_shape`` for PyTorch factories returning a bare module.

    Args:
        source: A ``.npz``/``.onnx``/WfCommons ``.json`` file, a recipe name, ``zoo:NAME``, ``file.py:factory`` or
            ``package.module:factory``. A factory source runs that Python code (in a child process).
        **kwargs: Passed to :meth:`~mlsysopt.graph.importers.source.Source.graph`: ``num_tasks`` (default 100) and
            ``seed`` (default 0) for recipes, ``input_shape`` for a bare module, ``timeout`` (seconds) for user code.

    Returns:
        The imported graph.

    Raises:
        UnsupportedFormat: If ``source`` is none of the known kinds, or a file is missing or unreadable.
        ImportFailed: If a PyTorch or ONNX source cannot be imported, traced or run.
        InvalidGraph: If the file holds an invalid graph.
    """

    return resolve_source(source).graph(**kwargs)
