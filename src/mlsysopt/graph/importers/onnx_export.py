"""Exporting a PyTorch module to an ``.onnx`` file: atomic, offline, with an optional symbolic batch axis."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.importers.fused_modules import FUSED_KEY, fused_modules


def _note_fused(module: Any, path: str) -> None:
    """Write :func:`~.fused_modules.fused_modules` of ``module`` into the metadata of the ONNX file at ``path``
    (when it holds any)."""
    paths = fused_modules(module)
    if not paths:
        return
    import onnx  # deferred: onnx loads only when a file gets the note

    model = onnx.load(path, load_external_data=False)
    kept = [p for p in model.metadata_props if p.key != FUSED_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    model.metadata_props.add(key=FUSED_KEY, value=json.dumps(paths))
    onnx.save(model, path)


def export_onnx(module: Any, example_inputs: Any, path: str | Path, dynamic_batch: bool = False) -> Path:
    """Export ``module`` to ONNX at ``path`` atomically (TorchScript exporter, else torch.export/dynamo).

    With ``dynamic_batch`` the first dim of every input and output is a symbolic ``batch`` axis, so the
    model accepts any batch size (inputs are named ``input_0``, ..., outputs ``output_0``, ...). The submodules
    PyTorch eager runs as a few kernels are named in the file's metadata (:mod:`.fused_modules`).
    """
    import torch  # deferred: torch loads only when an ONNX model is exported from PyTorch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    kwargs: dict[str, Any] = {}
    if dynamic_batch:
        with torch.no_grad():
            out = module(*inputs)
        n_out = len(out) if isinstance(out, (tuple, list)) else 1
        in_names = [f"input_{i}" for i in range(len(inputs))]
        out_names = [f"output_{i}" for i in range(n_out)]
        kwargs = {
            "input_names": in_names,
            "output_names": out_names,
            "dynamic_axes": {n: {0: "batch"} for n in in_names + out_names},
        }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".onnx")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    errors: list[str] = []
    try:
        # The legacy exporter is fast and offline; the dynamo one (also offline) is the fallback.
        for dynamo in (False, True):
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    torch.onnx.export(module, inputs, tmp, dynamo=dynamo, external_data=False, **kwargs)
            except Exception as exc:
                errors.append(f"dynamo={dynamo}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            _note_fused(module, tmp)  # outside the fallback: a failure here is not a reason to try dynamo
            os.replace(tmp, path)
            return path
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    raise MlsysoptError(f"could not export {type(module).__name__} to ONNX ({'; '.join(errors)})")
