"""A device model by op group: one CPU's per-op times from micro-kernels, as a linear model per group of ops.

One speed per device (``compute / speed + overhead``) cannot say that a CPU runs a depthwise convolution at a tenth
of a GEMM's FLOP rate, that a small convolution costs tens of microseconds before its first FLOP, or that an op
PyTorch dispatches inside a GRU's C++ loop costs a fraction of a Python module call. Paleo (Qi, Sparks and
Talwalkar, ICLR 2017, https://openreview.net/forum?id=SyVVJ85lg) and NeuralPower (Cai et al., ACML 2017,
https://arxiv.org/abs/1710.05420) model a layer's time per layer type from measurements on the device; this module
does the same with one linear model per op group, fitted on micro-kernels timed on the device
(:mod:`mlsysopt.graph.calibrate`). A node of group ``g`` takes::

    fixed[g] + flops * per_flop[g] + bytes * per_byte[g]
      (+ layer[kind] on the first op of each layer of an expanded GRU/RNN or transformer encoder)

where ``bytes`` is what the op reads and writes (its input and output tensors and its weights), an ``nn.LSTM`` (one
fused op per layer and direction on a CPU) pays ``fixed[lstm]`` once per layer and direction, and an op that an
expanded layer runs inside one C++ call pays ``inner`` instead of ``fixed[g]``
(:mod:`mlsysopt.graph.importers.expansion`; the torch.fx importer records those ranges in ``meta["expanded"]`` and
depthwise convolutions in ``meta["depthwise"]``). A layer kept whole (``meta["kept_whole"]``) pays its layers'
``layer`` cost, ``inner`` per op it runs, and its FLOPs and bytes at the ``linear`` rates. Input and output nodes
and shape reads cost nothing.

:func:`with_op_profile` rewrites a graph's ``compute`` so that one CPU device runs every node for its profiled time
(that device's overhead becomes 0, other devices keep their speed ratio to it), as ``--op-costs`` does with the
latency oracle's times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidOption
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.units import units_of
from mlsysopt.io import read_json, write_json_atomic

#: Op groups, each a row of the model.
GROUPS: tuple[str, ...] = ("conv", "depthwise", "linear", "attention", "lstm", "norm", "eltwise", "act", "pool",
                           "reduce", "free")  # fmt: skip
#: Groups that pay FLOPs and bytes; the memory groups pay bytes only; ``free`` pays its fixed cost only.
COMPUTE_GROUPS = ("conv", "depthwise", "linear", "attention", "lstm")
MEMORY_GROUPS = ("norm", "eltwise", "act", "pool", "reduce")
#: Kinds of expanded layer (:attr:`mlsysopt.graph.importers.expansion.Expansion.kind`).
LAYER_KINDS = ("recurrent", "transformer")

_GROUP_OF: dict[str, str] = {
    op: group
    for group, ops in {
        "conv": "conv conv_transpose",
        "linear": "linear matmul einsum embedding_bag gru rnn transformer",
        "attention": "attention",
        "lstm": "lstm",
        "norm": "batch_norm layer_norm group_norm",
        "eltwise": "add sub mul div elementwise relu embedding concat pad interpolate unpool",
        "act": "gelu silu sigmoid tanh hardswish softmax",
        "pool": "max_pool avg_pool lp_pool",
        "reduce": "adaptive_avg_pool reduce",
        "free": "reshape transpose slice split dropout constant other task",
    }.items()
    for op in ops.split()
}
_NO_COST = ("input", "output")


def parameter_names() -> tuple[str, ...]:
    """The model's coefficients in order: per group ``g.fixed`` (s), ``g.per_flop`` (s/FLOP), ``g.per_byte``
    (s/byte) as the group has them, then ``inner`` (s) and ``layer.KIND`` (s)."""
    names: list[str] = []
    for g in GROUPS:
        names.append(f"{g}.fixed")
        if g in COMPUTE_GROUPS:
            names.append(f"{g}.per_flop")
        if g in COMPUTE_GROUPS or g in MEMORY_GROUPS:
            names.append(f"{g}.per_byte")
    return (*names, "inner", *(f"layer.{k}" for k in LAYER_KINDS))


PARAMETERS = parameter_names()
_INDEX = {name: i for i, name in enumerate(PARAMETERS)}


def group_of(op: str) -> str | None:
    """The group of a canonical op name (an op with no group is costed as ``eltwise``); None for input/output."""
    if op in _NO_COST:
        return None
    return _GROUP_OF.get(op, "eltwise")


def design(graph: CompGraph) -> np.ndarray:
    """Every node's row of the model: how many of each coefficient it pays.

    Args:
        graph: A graph with the importers' features (``flops``, ``bytes_in``, ``bytes_out``, ``params``,
            ``out_elems``).

    Returns:
        np.ndarray: The rows; ``design(graph) @ coefficients`` is each node's time in seconds.

    Shapes:
        return: (num_nodes, len(PARAMETERS)) float64

    Raises:
        InvalidOption: If the graph is not a DNN's (a workflow or synthetic graph has no ops to price).
    """
    feats = graph.feature_names
    missing = [k for k in ("flops", "bytes_in", "bytes_out", "params", "out_elems") if k not in feats]
    if missing or units_of(graph) != "dnn":
        raise InvalidOption(f"an op profile prices the ops of a DNN; graph '{graph.meta.get('name', '?')}' is "
                            f"{units_of(graph)}, not a model imported from PyTorch or ONNX")  # fmt: skip
    x = graph.x
    flops, b_in, b_out, params, elems = (x[:, feats.index(k)] for k in ("flops", "bytes_in", "bytes_out", "params",
                                                                         "out_elems"))  # fmt: skip
    itemsize = np.where(elems > 0, b_out / np.maximum(elems, 1.0), 4.0)
    moved = b_in + b_out + params * itemsize
    rows = np.zeros((graph.num_nodes, len(PARAMETERS)))
    inner, depthwise, lstm_layers, whole = _layer_meta(graph, rows)
    for i in range(graph.num_nodes):
        group = group_of(graph.vocab[graph.opcodes[i]])
        if group is None or (elems[i] == 0 and flops[i] == 0):
            continue  # inputs, outputs and shape reads
        kept = whole.get(graph.names[i])
        if isinstance(kept, Mapping) and kept.get("kind") in LAYER_KINDS:
            rows[i, _INDEX[f"layer.{kept['kind']}"]] += float(kept.get("layers", 1))
            rows[i, _INDEX["inner"]] += float(kept.get("ops", 1))
            group = "linear"
        else:
            if group == "conv" and i in depthwise:
                group = "depthwise"
            rows[i, _INDEX["inner" if inner[i] else f"{group}.fixed"]] += lstm_layers.get(i, 1.0)
        if group in COMPUTE_GROUPS:
            rows[i, _INDEX[f"{group}.per_flop"]] += flops[i]
        if group in COMPUTE_GROUPS or group in MEMORY_GROUPS:
            rows[i, _INDEX[f"{group}.per_byte"]] += moved[i]
    return rows


def _layer_meta(graph: CompGraph, rows: np.ndarray) -> tuple[np.ndarray, set[int], dict[int, float], dict]:
    """What the importer recorded of layers (see :func:`design`), the layer costs added to ``rows``; one line naming
    the key when a graph file's ``meta`` is not what the importer writes."""
    n = graph.num_nodes
    inner = np.zeros(n, bool)
    try:
        for entry in graph.meta.get("expanded") or []:
            start, stop = int(entry["start"]), int(entry["stop"])
            starts = [int(v) for v in entry.get("layer_starts", [])]
            if not 0 <= start <= stop <= n or any(not start <= v < stop for v in starts):
                raise ValueError(f"range {start}..{stop} of {n} nodes")
            inner[start:stop] = True
            rows[starts, _INDEX[f"layer.{entry['kind']}"]] += 1.0
        depthwise = {int(v) for v in graph.meta.get("depthwise") or [] if 0 <= int(v) < n}
        lstm_layers = {int(v): float(k) for v, k in graph.meta.get("lstm_layers") or [] if 0 <= int(v) < n}
        whole = dict(graph.meta.get("kept_whole") or {})
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidOption(f"graph '{graph.meta.get('name', '?')}': its meta (expanded, depthwise, lstm_layers or "
                            f"kept_whole) is not what the importer writes ({type(e).__name__}: {e}); import the "
                            "model again") from None  # fmt: skip
    return inner, depthwise, lstm_layers, whole


#: Units the fit scales each kind of coefficient by, so that non-negative least squares is well conditioned.
_SCALE = {"fixed": 1e-6, "per_flop": 1e-11, "per_byte": 1e-10, "inner": 1e-6, "layer": 1e-6}


def _scale() -> np.ndarray:
    return np.array([_SCALE.get(n.rsplit(".", 1)[-1]) or _SCALE[n.split(".")[0]] for n in PARAMETERS])


def fit_coefficients(rows: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative coefficients that minimise the squared relative error of ``rows @ coef`` against ``seconds``.

    Args:
        rows: One summed design row per timed kernel (:func:`design` summed over its nodes).
        seconds: Each kernel's measured time.

    Returns:
        np.ndarray: The coefficients, in :data:`PARAMETERS` order.

    Shapes:
        rows: (num_kernels, len(PARAMETERS)); seconds: (num_kernels,); return: (len(PARAMETERS),)
    """
    # deferred: scipy.optimize is only needed when a profile is fitted
    from scipy.optimize import nnls

    rows, seconds = np.asarray(rows, np.float64), np.asarray(seconds, np.float64)
    scale = _scale()
    w = 1.0 / seconds
    coef, _ = nnls(rows * scale * w[:, None], seconds * w, maxiter=50 * rows.shape[1])
    return coef * scale


@dataclass
class OpProfile:
    """A CPU device's per-op time model (see the module docstring).

    Args:
        coefficients: Seconds per unit of each of :data:`PARAMETERS` (every one finite and >= 0).
        meta: Where it was measured (machine, threads, PyTorch version, date) and how well it fits its kernels.
    """

    coefficients: dict[str, float]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [k for k in PARAMETERS if k not in self.coefficients]
        unknown = [k for k in self.coefficients if k not in _INDEX]
        if missing or unknown:
            raise InvalidOption(f"op profile: {'missing ' + ', '.join(missing) if missing else ''}"
                                f"{'; ' if missing and unknown else ''}"
                                f"{'unknown ' + ', '.join(unknown) if unknown else ''} coefficient(s)")  # fmt: skip
        for k, v in self.coefficients.items():
            if not isinstance(v, int | float) or isinstance(v, bool) or not np.isfinite(v) or v < 0:
                raise InvalidOption(f"op profile: coefficient {k} = {v!r} is not a finite number >= 0")

    @property
    def vector(self) -> np.ndarray:
        """The coefficients in :data:`PARAMETERS` order."""
        return np.array([float(self.coefficients[k]) for k in PARAMETERS])

    def seconds(self, graph: CompGraph) -> np.ndarray:
        """Every node's time on this device (s). Shapes: return (num_nodes,) float64."""
        return design(graph) @ self.vector

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"format", "coefficients", "meta"}``."""
        return {"format": FORMAT, "coefficients": {k: float(self.coefficients[k]) for k in PARAMETERS},
                "meta": self.meta}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "op profile") -> OpProfile:
        """The profile a :meth:`to_dict` wrote; one line naming ``where`` and the key when it is not one."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InvalidOption(f"{where}: not an op profile (key 'format' is not '{FORMAT}'); write one with "
                                "'mlsysopt placement calibrate --out FILE.json'")  # fmt: skip
        coefficients = data.get("coefficients")
        if not isinstance(coefficients, Mapping):
            raise InvalidOption(f"{where}: key 'coefficients' is not an object")
        meta = data.get("meta", {})
        try:
            return cls(dict(coefficients), dict(meta) if isinstance(meta, Mapping) else {})
        except InvalidOption as e:
            raise InvalidOption(f"{where}: {str(e).removeprefix('op profile: ')}") from None

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON, atomically."""
        return write_json_atomic(path, self.to_dict())


#: The ``format`` key of a profile file.
FORMAT = "mlsysopt-op-profile-1"


def is_profile_path(value: str | None) -> bool:
    """Whether an ``--op-costs`` value names an op-profile file (a ``.json`` path) rather than an oracle."""
    return value is not None and str(value).lower().endswith(".json")


def check_profile_out(path: str | Path) -> Path:
    """Where ``placement calibrate --out`` may write a profile: a ``.json`` file whose folder is not a file.

    Raises:
        InvalidOption: If the name does not end in ``.json`` (``--op-costs`` tells a profile by it) or is a folder.
    """
    p = Path(path)
    if not is_profile_path(str(p)):
        raise InvalidOption(f"--out {path}: an op profile is a .json file (--op-costs tells it from an oracle by that)")
    if p.is_dir():
        raise InvalidOption(f"--out {path}: is a folder; name a .json file")
    if any(parent.exists() and not parent.is_dir() for parent in p.parents):
        raise InvalidOption(f"--out {path}: a parent of it is a file, not a folder")
    return p


def load_profile(path: str | Path) -> OpProfile:
    """Read an op profile; one clear line naming the file (and key) when it cannot be one."""
    p = Path(path)
    if not p.is_file():
        raise InvalidOption(f"--op-costs {path}: no such file (write one with 'mlsysopt placement calibrate')")
    return OpProfile.from_dict(read_json(p, InvalidOption), where=str(path))


def with_device_seconds(graph: CompGraph, cluster: Any, seconds: np.ndarray, device: int,
                        meta: Mapping[str, Any]) -> tuple[CompGraph, Any]:  # fmt: skip
    """``graph`` with ``compute`` rewritten so that ``device`` runs node ``i`` for ``seconds[i]`` (other devices keep
    their speed ratio to it), and the cluster with that device's overhead 0 (the times hold it). The one mechanism
    behind ``--op-costs``, whether the times come from an op profile or the latency oracle.

    Args:
        graph: The graph.
        cluster: The devices (:class:`~mlsysopt.graph.cluster.DeviceCluster`).
        seconds: Every node's time on ``device``. Shapes: (num_nodes,).
        device: The index of the device the times are for.
        meta: Keys added to the new graph's ``meta`` (where the times came from).

    Returns:
        tuple[CompGraph, DeviceCluster]: The new graph and the new cluster.
    """
    x = graph.x.copy()
    x[:, graph.feature_names.index("compute")] = np.asarray(seconds, np.float64) * float(cluster.speed[device])
    new = CompGraph(graph.names, graph.opcodes, x, graph.feature_names, graph.edge_index, graph.edge_bytes,
                    graph.hw_type, graph.vocab, {**graph.meta, **meta})  # fmt: skip
    data = cluster.to_dict()
    overhead = np.asarray(cluster.overhead, np.float64).copy()
    overhead[device] = 0.0
    data["overhead"] = overhead.tolist()
    return new, type(cluster).from_dict(data)


def with_op_profile(graph: CompGraph, cluster: Any, profile: OpProfile, device: int) -> tuple[CompGraph, Any, float]:
    """``graph`` on ``cluster`` with ``device`` running every node for its profiled time (:func:`with_device_seconds`),
    and the whole graph's profiled time on it (s).

    Args:
        graph: A DNN graph (PyTorch or ONNX import).
        cluster: The devices (:class:`~mlsysopt.graph.cluster.DeviceCluster`).
        profile: The device's op profile.
        device: The index of the device the profile was measured on.

    Returns:
        tuple[CompGraph, DeviceCluster, float]: The new graph, the new cluster and the sum of the nodes' times.
    """
    seconds = profile.seconds(graph)
    new, costed = with_device_seconds(graph, cluster, seconds, device, {"op_profile": cluster.names[device]})
    return new, costed, float(seconds.sum())


def on_one_device(graph: CompGraph, cluster: Any, profile: OpProfile, device: int = 0) -> tuple[float, float]:
    """The whole graph run on ``device`` alone, simulated two ways: by the op profile, and by the cluster's own
    device model (FLOPs / speed + per-task overhead). What ``--op-costs FILE.json`` changes, for one model.

    Returns:
        tuple[float, float]: The makespan with the op profile and with one speed (s).
    """
    on = np.full(graph.num_nodes, device, np.int64)
    costed, profiled_cluster, _ = with_op_profile(graph, cluster, profile, device)
    return PlacementProblem(costed, profiled_cluster).makespan(on), PlacementProblem(graph, cluster).makespan(on)
