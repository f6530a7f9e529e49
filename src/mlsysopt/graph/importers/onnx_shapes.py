"""Every tensor shape of an ONNX model, for the importer's FLOP and byte counts: inferred, else measured.

A file exported with a dynamic batch axis (``torch.onnx.export(..., dynamic_axes=...)``) computes its reshapes
from ``Shape`` ops at run time, and ``onnx.shape_inference`` leaves their outputs unknown (``unk__N``): an
attention block's QKᵀ and AV MatMuls then count as 2 FLOPs each (a tiny ViT: 15.4 instead of 21.9 MFLOP). So
:func:`resolve_shapes` fixes the inputs' dynamic dims at 1 (the importer counts a batch of one) and tries, in
turn, until no dim is unknown:

1. ``onnx.shape_inference`` with data propagation (cheap, exact where it resolves);
2. ONNX Runtime's symbolic shape inference (``onnxruntime.tools.symbolic_shape_infer``);
3. one run of the model in ONNX Runtime at those input shapes (zeros), every intermediate tensor an output:
   the shapes the engine really produces (skipped for a model whose inputs are not all known, or larger than
   :data:`MAX_RUN_BYTES`).

What is still unknown counts as 1, and :func:`shape_warnings` names it, as it names an input's dynamic dims
other than the first (a dynamic sequence length counted as 1 makes every op of the model look tiny).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, shape_inference

#: A model file larger than this is not run to measure its shapes (its weights alone would fill the memory).
MAX_RUN_BYTES = 2 * 2**30
Shape = tuple[int, ...]


@dataclass
class Shapes:
    """What :func:`resolve_shapes` found: the model with inferred ``value_info``, measured shapes, and gaps."""

    model: onnx.ModelProto
    measured: dict[str, Shape] = field(default_factory=dict)  # tensor -> shape from an ONNX Runtime run
    method: str = "onnx"  # onnx | onnxruntime-symbolic | onnxruntime-run
    dynamic_inputs: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # input -> [(dim, name)]
    unresolved: list[str] = field(default_factory=list)  # tensors with a dim still unknown


def _dynamic_inputs(model: onnx.ModelProto) -> dict[str, list[tuple[int, str]]]:
    inits = {t.name for t in model.graph.initializer}
    found: dict[str, list[tuple[int, str]]] = {}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        dims = [(k, d.dim_param or "?") for k, d in enumerate(inp.type.tensor_type.shape.dim) if d.dim_value <= 0]
        if dims:
            found[inp.name] = dims
    return found


def _fixed_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose inputs' dynamic dims are 1."""
    fixed = copy.deepcopy(model)
    for inp in fixed.graph.input:
        if inp.type.HasField("tensor_type"):
            for d in inp.type.tensor_type.shape.dim:
                if d.dim_value <= 0:
                    d.Clear()
                    d.dim_value = 1
    return fixed


def _unknown(model: onnx.ModelProto, measured: dict[str, Shape] | None = None) -> list[str]:
    """Tensors (node outputs) whose shape has an unknown dim, or is missing altogether."""
    measured = measured or {}
    known: dict[str, Any] = {v.name: v.type for v in [*model.graph.value_info, *model.graph.output]}
    bad = []
    for node in model.graph.node:
        for name in node.output:
            if not name or name in measured:
                continue
            t = known.get(name)
            if (
                t is None
                or not t.HasField("tensor_type")
                or not t.tensor_type.HasField("shape")
                or any(d.dim_value <= 0 for d in t.tensor_type.shape.dim)
            ):
                bad.append(name)
    return bad


def _onnx_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    with contextlib.suppress(Exception):
        return shape_inference.infer_shapes(model, data_prop=True)
    with contextlib.suppress(Exception):
        return shape_inference.infer_shapes(model)
    return model


def _ort_symbolic(model: onnx.ModelProto) -> onnx.ModelProto | None:
    try:
        # deferred: onnxruntime loads only for symbolic shape inference
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    except ImportError:
        return None

    quiet = logging.getLogger()  # the tool logs a warning per node it cannot infer
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    # The steps of ``SymbolicShapeInference.infer_shapes``, run here because on an incomplete inference that method
    # saves the model (weights included, as external data) into the current directory before raising.
    try:
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        complete = False
        inference._preprocess(model)
        while inference.run_:
            complete = inference._infer_impl()
        inference._update_output_from_vi()
        return inference.out_mp_ if complete else None
    except Exception:  # it asserts on patterns it does not know (nn.MultiheadAttention's dynamic reshapes)
        return None
    finally:
        quiet.setLevel(level)


def _ort_run(model: onnx.ModelProto) -> dict[str, Shape] | None:
    """Shapes of every node output from one ONNX Runtime run at the model's (now static) input shapes."""
    if model.ByteSize() > MAX_RUN_BYTES:
        return None
    try:
        import onnxruntime as ort  # deferred: onnxruntime loads only when shapes are inferred by running the model
    except ImportError:
        return None
    g = model.graph
    inits = {t.name for t in g.initializer}
    feeds: dict[str, Any] = {}
    for inp in g.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type") or not tt.HasField("shape"):
            return None
        shape = [int(d.dim_value) for d in tt.shape.dim]
        if any(s <= 0 for s in shape):
            return None
        try:
            feeds[inp.name] = np.zeros(shape, dtype=helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:
            return None
    types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.output] if v.type.HasField("tensor_type")}
    probe = copy.deepcopy(model)
    outputs = {o.name for o in probe.graph.output}
    wanted = [name for node in g.node for name in node.output if name and types.get(name)]
    for name in wanted:
        if name not in outputs:
            probe.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
            outputs.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor by name
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, feeds)
    except Exception:  # a model ORT cannot run with zeros (or at all): keep what inference gave
        return None
    return {n: tuple(int(s) for s in np.shape(v)) for n, v in zip(names, values, strict=True)}


def resolve_shapes(model: onnx.ModelProto) -> Shapes:
    """The model's tensor shapes with the inputs' dynamic dims at 1 (see the module docstring)."""
    dynamic = _dynamic_inputs(model)
    fixed = _fixed_inputs(model) if dynamic else model
    inferred = _onnx_inferred(fixed)
    result = Shapes(inferred, dynamic_inputs=dynamic)
    if not _unknown(inferred):
        return result
    symbolic = _ort_symbolic(fixed)
    if symbolic is not None and len(_unknown(symbolic)) < len(_unknown(inferred)):
        result.model, result.method = symbolic, "onnxruntime-symbolic"
        if not _unknown(symbolic):
            return result
    measured = _ort_run(result.model)
    if measured:
        result.measured, result.method = measured, "onnxruntime-run"
    result.unresolved = _unknown(result.model, result.measured)
    return result


def shape_warnings(shapes: Shapes, where: str) -> list[str]:
    """One message per problem a user should know about: dynamic dims beyond the batch, unresolved tensors."""
    out = []
    beyond = {name: [(k, n) for k, n in dims if k > 0] for name, dims in shapes.dynamic_inputs.items()}
    beyond = {name: dims for name, dims in beyond.items() if dims}
    if beyond:
        listed = "; ".join(
            f"input '{name}' dim{'s' if len(d) > 1 else ''} " + ", ".join(f"{k} ('{n}')" for k, n in d)
            for name, d in beyond.items()
        )
        out.append(
            f"{where}: dynamic dimensions counted as 1: {listed}; FLOPs and bytes are for that size (export with "
            "a fixed size to count another)"
        )
    if shapes.unresolved:
        shown = ", ".join(f"'{n}'" for n in shapes.unresolved[:3])
        more = f" and {len(shapes.unresolved) - 3} more" if len(shapes.unresolved) > 3 else ""
        out.append(
            f"{where}: the shapes of {len(shapes.unresolved)} tensors ({shown}{more}) could not be inferred nor "
            "measured; their unknown dims count as 1, so the FLOPs and bytes of the ops reading them are undercounted"
        )
    return out
