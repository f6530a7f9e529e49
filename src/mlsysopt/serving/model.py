"""An ONNX model ready to serve: its inputs, random request data, and ONNX Runtime sessions per thread setting.

The first dim of every input is the batch axis. A model is *batchable* when that dim is dynamic (symbolic or
unknown) on every input; a model whose batch dim is fixed at 1 loads too, but serves batches of one row only.
Other dynamic dims need a per-row ``input_shape`` (the shape of one row, without the batch dim).
"""

from __future__ import annotations

import contextlib
import math
import re
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from mlsysopt.errors import InvalidModel, MlsysoptError
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.deploy import session_options
from mlsysopt.serving.limits import check_row_input

# ONNX Runtime logs a failing kernel to stderr itself; mlsysopt reports it once, in its own words
ort.set_default_logger_severity(3)

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


def describe_ort_error(exc: BaseException) -> str:
    """ONNX Runtime's failure in a few words: the op, the node and the shapes it names (not the C++ file path)."""
    text = " ".join(str(exc).split())
    op = re.search(r"running (\w+) node\. Name:'([^']*)'", text)
    shapes = re.findall(r"(\w[\w ]*?shape\s*:\s*\{[^}]*\})", text)
    if op:
        detail = f"op {op.group(1)} (node '{op.group(2)}')"
        return f"{detail}: {', '.join(s.strip() for s in shapes)}" if shapes else detail
    return f"{type(exc).__name__}: {text[:300]}"


class ServedModel:
    """An ONNX model file with known per-row input shapes, random batches, and cached ONNX Runtime sessions.

    Args:
        path: Path to the ``.onnx`` file.
        input_shape: Shape of one row (without the batch dim) for inputs with other dynamic dims or no declared
            shape (None: every such input is an error).

    Raises:
        InvalidModel: If the file is missing or cannot be loaded, an input has an unsupported type, no batch axis,
            a fixed batch dim other than 1, or dynamic dims ``input_shape`` does not fix, or there are no inputs.
    """

    def __init__(self, path: str | Path, input_shape: tuple[int, ...] | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InvalidModel(f"{self.path}: no such model file")
        if input_shape is not None:
            input_shape = tuple(input_shape)
            if not all(isinstance(d, (int, np.integer)) and d > 0 for d in input_shape):
                raise InvalidModel(f"{self.path}: input shape {input_shape} must be positive integers")
            input_shape = tuple(int(d) for d in input_shape)
        self._sessions: dict[tuple[int, int, int, int], ort.InferenceSession] = {}
        self._lock = threading.Lock()
        try:
            first = self._new_session(1, 1, 0)
        except Exception as exc:
            msg = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise InvalidModel(
                f"{self.path}: not an ONNX model ONNX Runtime can load ({type(exc).__name__}: {msg})"
            ) from None
        self._sessions[(1, 1, 0, 0)] = first
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

        dtype = np.dtype(_DTYPES[arg.type])
        check_row_input(math.prod(int(d) for d in rest) * dtype.itemsize, f"{where} shape {[1, *rest]}")
        self.input_names.append(name)
        self.sample_shapes[name] = tuple(int(d) for d in rest)
        self.dtypes[name] = dtype

    def _new_session(self, intra: int, inter: int, execution_mode: int) -> ort.InferenceSession:

        opts = session_options(intra, inter, execution_mode)
        return ort.InferenceSession(str(self.path), sess_options=opts, providers=["CPUExecutionProvider"])

    def session(self, intra: int, inter: int, execution_mode: int | None = None, slot: int = 0) -> ort.InferenceSession:
        """The session with these op threads and execution mode (default: parallel iff ``inter`` > 1), cached.

        Concurrent runs of one session share its thread pools, so each serving instance uses its own ``slot``.
        """
        mode = (1 if inter > 1 else 0) if execution_mode is None else int(execution_mode)
        key = (int(intra), int(inter), mode, int(slot))
        with self._lock:
            if key not in self._sessions:
                self._sessions[key] = self._new_session(key[0], key[1], key[2])
            return self._sessions[key]

    def drop_sessions(self) -> None:
        """Forget the cached sessions (the next :meth:`session` call creates a new one)."""
        with self._lock:
            self._sessions.clear()

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

    def time_batch(self, rows: int, intra: int, inter: int, repeats: int = 5, warmup: int = 3) -> float:
        """Median wall time (ms) of one ``session.run`` on ``rows`` rows (parallel mode iff ``inter`` > 1).

        ``warmup`` untimed runs first, as many as the engine's warm-up gives a session, so that first-run
        allocations stay out of the timing.
        """
        sess = self.session(intra, inter)
        feed = self.make_batch(rows)
        for _ in range(max(warmup, 1)):
            sess.run(None, feed)
        times = []
        for _ in range(max(repeats, 1)):
            t = time.perf_counter()
            sess.run(None, feed)
            times.append((time.perf_counter() - t) * 1000.0)
        return float(statistics.median(times))

    def row_bytes(self) -> int:
        """Bytes one row needs: its inputs plus every intermediate and output tensor (ONNX shape inference at batch 1).

        An upper bound of what a batch holds at once (ONNX Runtime reuses buffers); dims inference cannot resolve
        count as 1.
        """
        if getattr(self, "_row_bytes", None) is None:
            self._row_bytes = _row_bytes(self.path, self.sample_shapes, self.dtypes)
        return self._row_bytes

    def run_check(self, rows: int) -> float:
        """Run one batch of ``rows`` rows (after one untimed run); its ms. :class:`InvalidModel` names op and shapes.

        The outputs must keep the batch axis: a model that answers a batch of ``rows`` with another first dim
        was exported with a fixed batch somewhere.
        """
        feed = self.make_batch(rows)
        sess = self.session(1, 1, 0)
        quiet = ort.RunOptions()
        quiet.log_severity_level = 4  # a failing run is reported below, in one line; ORT's own log is not
        try:
            sess.run(None, feed, quiet)
            t = time.perf_counter()
            outs = sess.run(None, feed, quiet)
            ms = (time.perf_counter() - t) * 1000.0
        except Exception as exc:
            shapes = ", ".join(f"{n} {[rows, *self.sample_shapes[n]]}" for n in self.input_names)
            raise InvalidModel(
                f"{self.path}: ONNX Runtime fails at batch {rows} (inputs {shapes}): {describe_ort_error(exc)}"
            ) from None
        for o, arg in zip(outs, sess.get_outputs(), strict=False):
            if getattr(o, "ndim", 0) >= 1 and o.shape[0] != rows:
                raise InvalidModel(
                    f"{self.path}: at batch {rows} output '{arg.name}' has shape {list(o.shape)}: its first dim is "
                    f"not the batch axis (a fixed batch of {o.shape[0]} inside the model)"
                )
        return ms

    def facts(self) -> dict[str, float]:
        """The model's FLOPs and parameters for one row (ONNX graph import at batch 1) and its input bytes per row.

        What a prior across models knows of a model besides its timings; 0 where the import cannot tell.
        """
        # deferred: imports numba, onnx, scipy, yaml
        from mlsysopt.graph.importers.onnx import from_onnx

        input_bytes = float(sum(math.prod(s) * self.dtypes[n].itemsize for n, s in self.sample_shapes.items()))
        try:
            graph = from_onnx(self.path)
            flops, params = float(graph.total_flops), float(graph.feature("params").sum())
        except MlsysoptError:
            flops, params = 0.0, 0.0
        return {"flops": flops, "n_params": params, "input_bytes": input_bytes}

    def check_batch(self, max_batch: int) -> None:
        """Raise :class:`InvalidModel` if batches of ``max_batch`` rows need a batch axis the model lacks."""
        if max_batch > 1 and not self.batchable:
            raise InvalidModel(
                f"{self.path}: the batch dim of input '{self._fixed_input}' is fixed at 1, so the model cannot run "
                f"batches of {max_batch} rows: re-export it with a dynamic batch axis or use max batch 1"
            )

    def check_request_size(self, rows: int) -> None:
        """Raise :class:`InvalidModel` if requests of ``rows`` rows need a batch axis the model lacks."""
        if rows > 1 and not self.batchable:
            raise InvalidModel(
                f"{self.path}: requests of {rows} rows need a dynamic batch axis the model lacks: "
                "re-export it with a dynamic batch axis or use request size 1"
            )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {self.sample_shapes[n]} {self.dtypes[n]}" for n in self.input_names)
        return f"ServedModel({self.path.name}; {shapes}; batchable={self.batchable})"


def export_zoo_onnx(name: str, path: str | Path) -> Path:
    """Export the zoo model ``name`` (see :mod:`mlsysopt.zoo`) to ONNX at ``path`` with a dynamic batch axis.

    Args:
        name: Zoo model name (case-insensitive), see :mod:`mlsysopt.zoo`.
        path: Where to write the ONNX file.

    Returns:
        Path: The written ONNX file.

    Raises:
        MlsysoptError: If ``name`` is not a zoo model.
    """
    # deferred: imports numba, onnx, scipy, yaml
    from mlsysopt import zoo  # deferred: the zoo imports torch, which a served model's processes never need
    from mlsysopt.graph.importers.onnx import export_onnx

    module, inputs = zoo.get(name)
    with torch_threads(1):
        return export_onnx(module, inputs, path, dynamic_batch=True)


def _row_bytes(path: Path, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, np.dtype]) -> int:
    import onnx  # deferred: onnx loads only for a model's input sizes
    from onnx import shape_inference  # deferred: onnx loads only for a model's input sizes

    model = onnx.load(str(path), load_external_data=False)
    for inp in model.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            want = (1, *shapes[inp.name])
            if len(dims) == len(want):
                for d, v in zip(dims, want, strict=True):
                    d.ClearField("dim_param")
                    d.dim_value = int(v)
    with contextlib.suppress(Exception):  # shape inference is best effort: the inputs alone are then the estimate
        model = shape_inference.infer_shapes(model)
    total = sum(math.prod(s) * dtypes[n].itemsize for n, s in shapes.items())
    for vi in (*model.graph.value_info, *model.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        n = math.prod(max(d.dim_value, 1) if d.HasField("dim_value") else 1 for d in t.shape.dim)
        try:
            size = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            size = 4
        total += n * size
    return int(total)
