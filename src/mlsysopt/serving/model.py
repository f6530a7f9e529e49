"""An ONNX model ready to serve: its inputs, random request data, and ONNX Runtime sessions per thread setting.

The first dim of every input is the batch axis. A model is *batchable* when that dim is dynamic (symbolic or
unknown) on every input; a model whose batch dim is fixed at 1 loads too, but serves batches of one row only.
Other dynamic dims need a per-row ``input_shape`` (the shape of one row, without the batch dim).
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from mlsysopt.errors import InvalidModel

_DTYPES: dict[str, type] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int16)": np.int16,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}


def _is_fixed(dim: object) -> bool:
    return isinstance(dim, int) and dim > 0


class ServedModel:
    """An ONNX model file with known per-row input shapes, random batches, and cached ONNX Runtime sessions."""

    def __init__(self, path: str | Path, input_shape: tuple[int, ...] | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InvalidModel(f"{self.path}: no such model file")
        if input_shape is not None:
            input_shape = tuple(input_shape)
            if not all(isinstance(d, (int, np.integer)) and d > 0 for d in input_shape):
                raise InvalidModel(f"{self.path}: input shape {input_shape} must be positive integers")
            input_shape = tuple(int(d) for d in input_shape)
        self._sessions: dict[tuple[int, int, int], ort.InferenceSession] = {}
        self._lock = threading.Lock()
        try:
            first = self._new_session(1, 1)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise InvalidModel(
                f"{self.path}: not an ONNX model ONNX Runtime can load ({type(exc).__name__}: {msg})"
            ) from None
        self._sessions[(1, 1, 0)] = first
        self.input_names: list[str] = []
        self.sample_shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, np.dtype] = {}
        self.batchable = True
        self._fixed_input: str | None = None
        for arg in first.get_inputs():
            self._add_input(arg, input_shape)
        if not self.input_names:
            raise InvalidModel(f"{self.path}: the model has no inputs to feed")

    def _add_input(self, arg: ort.NodeArg, input_shape: tuple[int, ...] | None) -> None:
        name, where = arg.name, f"{self.path}: input '{arg.name}'"
        if arg.type not in _DTYPES:
            raise InvalidModel(f"{where} has type {arg.type}, which mlsysopt cannot generate data for")
        shape = arg.shape
        if not shape:  # unknown rank, or a scalar: neither has a batch axis to serve
            if shape is None and input_shape is not None:
                shape = [None, *input_shape]
            else:
                hint = " (--input-shape gives the per-row shape of an unshaped input)" if shape is None else ""
                raise InvalidModel(
                    f"{where} has {'no declared shape' if shape is None else 'no dims'}: a served model needs "
                    f"a batch axis as the first dim of every input{hint}"
                )
        batch, rest = shape[0], list(shape[1:])
        if _is_fixed(batch):
            if batch != 1:
                raise InvalidModel(
                    f"{where} has a fixed first dim of {batch}: the first dim must be the batch axis, dynamic or 1; "
                    "re-export the model with a dynamic batch axis"
                )
            self.batchable = False
            self._fixed_input = self._fixed_input or name
        dynamic = [i for i, d in enumerate(rest, start=1) if not _is_fixed(d)]
        if input_shape is not None and (dynamic or len(self.input_names) == 0):
            if len(input_shape) != len(rest):
                raise InvalidModel(
                    f"{where} has {len(rest)} dims besides the batch dim (shape {shape}), but the input shape "
                    f"{input_shape} has {len(input_shape)}; give the shape of one row, without the batch dim"
                )
            for i, (d, want) in enumerate(zip(rest, input_shape, strict=True), start=1):
                if _is_fixed(d) and d != want:
                    raise InvalidModel(f"{where} has dim {i} fixed at {d}, but input shape {input_shape} says {want}")
            rest = list(input_shape)
        elif dynamic:
            raise InvalidModel(
                f"{where} has dynamic dim {dynamic[0]} ('{rest[dynamic[0] - 1]}', shape {shape}) besides the batch "
                "dim: --input-shape fixes it (the per-row shape, without the batch dim)"
            )
        self.input_names.append(name)
        self.sample_shapes[name] = tuple(int(d) for d in rest)
        self.dtypes[name] = np.dtype(_DTYPES[arg.type])

    def _new_session(self, intra: int, inter: int) -> ort.InferenceSession:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra
        opts.inter_op_num_threads = inter
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL if inter > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Several sessions share the cores; spinning idle pool threads would steal them from the busy ones.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        return ort.InferenceSession(str(self.path), sess_options=opts, providers=["CPUExecutionProvider"])

    def session(self, intra: int, inter: int, slot: int = 0) -> ort.InferenceSession:
        """The session with ``intra``/``inter`` op threads, cached per (intra, inter); ``slot`` keeps apart copies.

        Concurrent runs of one session share its thread pools, so each serving worker uses its own ``slot``.
        """
        key = (int(intra), int(inter), int(slot))
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = self._new_session(key[0], key[1])
            return self._sessions[key]

    def make_batch(self, rows: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
        """Random inputs of ``rows`` rows (floats ~ N(0, 1); integers and bools in {0, 1}, valid ids and masks)."""
        if rows < 1:
            raise InvalidModel(f"{self.path}: a batch needs at least one row, not {rows}")
        self.check_batch(rows)
        rng = rng if rng is not None else np.random.default_rng(0)
        feed = {}
        for name in self.input_names:
            shape, dtype = (rows, *self.sample_shapes[name]), self.dtypes[name]
            if np.issubdtype(dtype, np.floating):
                feed[name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)
            else:
                feed[name] = rng.integers(0, 2, size=shape).astype(dtype)
        return feed

    def time_batch(self, rows: int, intra: int, inter: int, repeats: int = 5) -> float:
        """Median wall time (ms) of one ``session.run`` on ``rows`` rows, after one warm-up run."""
        sess = self.session(intra, inter)
        feed = self.make_batch(rows)
        sess.run(None, feed)
        times = []
        for _ in range(max(repeats, 1)):
            t = time.perf_counter()
            sess.run(None, feed)
            times.append((time.perf_counter() - t) * 1000.0)
        return float(statistics.median(times))

    def check_batch(self, max_batch: int) -> None:
        """Raise :class:`InvalidModel` if batches of ``max_batch`` rows need a batch axis the model lacks."""
        if max_batch > 1 and not self.batchable:
            raise InvalidModel(
                f"{self.path}: the batch dim of input '{self._fixed_input}' is fixed at 1, so the model cannot run "
                f"batches of {max_batch} rows: re-export it with a dynamic batch axis or use max batch 1"
            )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {self.sample_shapes[n]} {self.dtypes[n]}" for n in self.input_names)
        return f"ServedModel({self.path.name}; {shapes}; batchable={self.batchable})"


def export_zoo_onnx(name: str, path: str | Path) -> Path:
    """Export the zoo model ``name`` (see :mod:`mlsysopt.zoo`) to ONNX at ``path`` with a dynamic batch axis."""
    from mlsysopt import zoo
    from mlsysopt.graph.importers.onnx import export_onnx
    from mlsysopt.runtime.threads import torch_threads

    module, inputs = zoo.get(name)
    with torch_threads(1):
        return export_onnx(module, inputs, path, dynamic_batch=True)
