"""A PyTorch model made servable: exported to ONNX with a dynamic batch axis, checked in ONNX Runtime, or refused.

Serving takes every model source through :func:`mlsysopt.graph.importers.source.resolve_source`; a PyTorch source
(``file.py:factory``, ``module:factory``, ``zoo:NAME``) is exported here by mlsysopt itself. Each exporter's file
is loaded into ONNX Runtime and run at batch 1 and at the largest batch the job will use (``check``); torch's
two exporters do not fail on the same models (torch 2.13's default dynamo exporter writes, for a small ViT with
``nn.MultiheadAttention``, a Reshape to a fixed ``{17, 32}`` that fails at batch 4, where the TorchScript exporter's
file runs), so when one exporter's file fails the other is tried. When both fail, one error names what each
failed on: the op, its node and the shapes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidModel, MlsysoptError
from mlsysopt.runtime.threads import torch_threads

if TYPE_CHECKING:
    from mlsysopt.graph.importers.source import Source
    from mlsysopt.serving.model import ServedModel

#: exporter name -> the ``dynamo`` flag of ``torch.onnx.export``; TorchScript first (fast), then torch's default
EXPORTERS = {"torchscript": False, "dynamo": True}


def export_onnx_with(module: Any, inputs: tuple[Any, ...], path: Path, exporter: str) -> Path:
    """Export ``module`` to ``path`` with one exporter and a dynamic first (batch) axis on every input and output."""
    import torch  # deferred: torch loads only when a model is exported

    with torch.no_grad():
        out = module(*inputs)
    n_out = len(out) if isinstance(out, (tuple, list)) else 1
    in_names = [f"input_{i}" for i in range(len(inputs))]
    out_names = [f"output_{i}" for i in range(n_out)]
    tmp = path.with_name(f".{path.name}.{exporter}.tmp.onnx")
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, inputs, str(tmp), dynamo=EXPORTERS[exporter], external_data=False, input_names=in_names,
                output_names=out_names, dynamic_axes={n: {0: "batch"} for n in in_names + out_names},
            )  # fmt: skip
        os.replace(tmp, path)
    finally:
        quiet.setLevel(level)
        if tmp.exists():
            tmp.unlink()
    return path


def _check_example_shape(spec: str, inputs: tuple[Any, ...], input_shape: tuple[int, ...] | None) -> None:
    """Refuse an ``--input-shape`` that disagrees with the factory's own example input (besides the batch dim)."""
    shape = tuple(getattr(inputs[0], "shape", ())) if inputs else ()
    if input_shape is None or not shape or tuple(shape[1:]) == tuple(input_shape[1:]):
        return
    if len(shape) != len(input_shape):
        raise InvalidModel(
            f"'{spec}': the factory's example input has shape {list(shape)} ({len(shape)} dims), --input-shape "
            f"{','.join(map(str, input_shape))} has {len(input_shape)}"
        )
    i = next(k for k in range(1, len(shape)) if shape[k] != input_shape[k])
    raise InvalidModel(
        f"'{spec}': input 0 has dim {i} fixed at {shape[i]} by the factory's example input (shape {list(shape)}), "
        f"but --input-shape says {input_shape[i]}"
    )


def export_first(
    source: Source, folder: Path, input_shape: tuple[int, ...] | None, exporters: Sequence[str]
) -> tuple[str | None, Path | None, dict[str, str]]:
    """Build the source's model and export it with the first of ``exporters`` that can; ``(exporter, path,
    what each earlier exporter failed on)``, ``(None, None, ...)`` when none could (runs the user's factory)."""

    module, inputs = source.pytorch(input_shape)
    _check_example_shape(source.spec, inputs, input_shape)
    failed: dict[str, str] = {}
    for exporter in exporters:
        path = Path(folder) / f"{source.name}.onnx"
        try:
            with torch_threads(1):
                export_onnx_with(module, inputs, path, exporter)
        except Exception as exc:  # an exporter that cannot trace the model: try the next
            failed[exporter] = f"export failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
            continue
        return exporter, path, failed
    return None, None, failed


def export_served(
    source: Source,
    folder: Path,
    check: Callable[[ServedModel], None],
    input_shape: tuple[int, ...] | None = None,
    exporters: Sequence[str] = tuple(EXPORTERS),
    timeout: float | None = None,
) -> tuple[ServedModel, dict[str, Any]]:
    """Export a PyTorch source into ``folder`` and return the first exporter's model that passes ``check``.

    ``input_shape`` is the example input's full shape (batch dim first) for a factory returning a bare module.
    ``timeout`` bounds a user's factory and its export (seconds; None: the default bound for user code).
    Returns the model and what happened (``exporter`` used, ``failed``: what each earlier exporter's file did).

    Args:
        source: The resolved PyTorch source.
        folder: Folder the ONNX files are written into.
        check: Raises :class:`InvalidModel` for a model that cannot be served as needed.
        input_shape: Full example input shape, batch dim first (None: the factory's own inputs).
        exporters: Exporters to try in order (``torchscript``, ``dynamo``).
        timeout: Seconds a user's factory and its export may take (None: the default bound).

    Returns:
        tuple[ServedModel, dict[str, Any]]: The model and ``exporter``, ``failed`` and ``path``.

    Raises:
        InvalidModel: For an unknown exporter, or when no exporter's model passes ``check``.
    """
    # deferred: imports onnxruntime
    from mlsysopt.serving.model import ServedModel

    unknown = [e for e in exporters if e not in EXPORTERS]
    if unknown or not exporters:
        raise InvalidModel(f"unknown ONNX exporter(s) {unknown or '(none)'} (choose from: {', '.join(EXPORTERS)})")
    failed: dict[str, str] = {}
    todo = list(exporters)
    while todo:
        # a user's factory runs (and is exported) in a child process bounded by ``timeout``; the zoo runs here
        args = (source, Path(folder), input_shape, tuple(todo))
        done = source.isolated(export_first, *args, timeout=timeout) if source.runs_user_code else export_first(*args)
        exporter, path, tried = done
        failed.update(tried)
        if exporter is None:
            break
        todo = todo[todo.index(exporter) + 1 :]
        try:
            model = ServedModel(path)
            check(model)
        except InvalidModel as exc:
            failed[exporter] = str(exc).replace(f"{path}: ", "")
            continue
        except MlsysoptError:
            raise  # a limit or an option, not the exporter's fault
        return model, {"exporter": exporter, "failed": failed, "path": str(path)}
    detail = "; ".join(f"{name} exporter: {why}" for name, why in failed.items())
    raise InvalidModel(f"'{source.spec}': no ONNX export of it runs in ONNX Runtime ({detail})")
