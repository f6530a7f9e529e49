"""What ``costmodel collect`` measures a configuration with: PyTorch eager (per-node memory formats) or ONNX Runtime.

**torch** (a PyTorch model): the configurable nodes are the graph input (graph-level settings) and every 2-D
convolution. A configuration gives each convolution a memory format, *contiguous* (NCHW) or *channels-last*
(NHWC): the convolution converts its input to that format and keeps its weight in it, so neighbours that disagree
pay a layout conversion, as an XLA op does when its operand's layout differs (TpuGraphs' layout collection).
Graph-level: PyTorch's intra-op threads (``threads``, by default 1 or 2). Configuration 0 is PyTorch's default
(every convolution contiguous, the fewest threads).

**onnxruntime** (an ``.onnx`` file): graph-level settings only: the graph optimisation level (disabled, basic,
extended, all), intra-op threads (1 or 2) and the execution mode (sequential or parallel, with 2 inter-op
threads). The configurable nodes are the graph inputs and the convolutions, each carrying the session settings.

Both describe a configurable node with the 18 layout-configuration features of :data:`CONFIG_COLUMNS`.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.costmodel.data.features import layout_graph, torch_graph
from mlsysopt.errors import InvalidOption

CONFIG_DIM = 18
#: The configuration features of a configurable node, by column (the rest are 0).
CONFIG_COLUMNS: dict[int, str] = {0: "channels_last", 1: "contiguous", 2: "graph_settings_node",
                                  3: "log2_intra_threads", 4: "onnxruntime", 5: "ort_opt_disabled",
                                  6: "ort_opt_basic", 7: "ort_opt_extended", 8: "ort_opt_all",
                                  9: "ort_parallel", 10: "log2_inter_threads"}  # fmt: skip
THREADS = (1, 2)


class _Formatted(nn.Module):
    """A convolution that runs in a chosen memory format (its input converted, its weight stored in it)."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv
        self.channels_last = False

    def set(self, channels_last: bool) -> None:
        """Switch the memory format (the weight is converted once, here, not per call)."""
        if channels_last != self.channels_last:
            fmt = torch.channels_last if channels_last else torch.contiguous_format
            self.conv.weight.data = self.conv.weight.data.contiguous(memory_format=fmt)
            self.channels_last = channels_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution of ``x`` converted to this node's format (a no-op when it already is)."""
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        return self.conv(x.contiguous(memory_format=fmt))


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class TorchEngine:
    """A PyTorch model whose convolutions' memory formats and intra-op threads a configuration sets."""

    name = "torch"

    def __init__(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], name: str,
                 threads: tuple[int, ...] = THREADS) -> None:  # fmt: skip
        self.threads = tuple(sorted(int(t) for t in threads))
        self.graph, self.attrs, gm = torch_graph(module, inputs, name)
        self.gm, self.inputs = gm.eval(), inputs
        self.wrappers: list[_Formatted] = []
        owner: dict[str, int] = {}
        conv_nodes: list[tuple[int, int]] = []  # (node id, wrapper id)
        nodes = list(gm.graph.nodes)
        for i, node in enumerate(nodes):
            mod = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
            if isinstance(mod, nn.Conv2d):
                key = str(node.target)
                if key not in owner:
                    owner[key] = len(self.wrappers)
                    self.wrappers.append(self._wrap(key, mod))
                conv_nodes.append((i, owner[key]))
        inputs_ids = [i for i, n in enumerate(nodes) if n.op == "placeholder"]
        if not conv_nodes:
            raise InvalidOption(f"{name}: no 2-D convolution to configure (the torch engine sets their memory "
                                "formats); export it to ONNX and collect it with the onnxruntime engine")  # fmt: skip
        self.config_nodes = [*inputs_ids, *(i for i, _ in conv_nodes)]
        self._conv_of = [-1] * len(inputs_ids) + [w for _, w in conv_nodes]
        self.choices = len(self.wrappers) + 1  # a format per convolution module, then threads

    def _wrap(self, target: str, conv: nn.Conv2d) -> _Formatted:
        parent_name, _, child = target.rpartition(".")
        parent = self.gm.get_submodule(parent_name) if parent_name else self.gm
        wrapper = _Formatted(conv)
        setattr(parent, child, wrapper)
        return wrapper

    def arrays(self) -> dict[str, np.ndarray]:
        """The graph's layout arrays (node features, opcodes, edges, configurable node ids)."""
        return layout_graph(self.graph, self.attrs, self.config_nodes)

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` configurations ``(count, choices)``: the default, all channels-last, both at the most threads,
        then random mixes (each convolution channels-last with a per-configuration probability, threads drawn from
        ``threads``) and two exact repeats of the default (they measure the noise floor)."""
        w, lo, hi = len(self.wrappers), self.threads[0], self.threads[-1]
        fixed = [np.r_[np.zeros(w), lo], np.r_[np.ones(w), lo]]
        fixed += [np.r_[np.zeros(w), hi], np.r_[np.ones(w), hi]] if hi != lo else []
        rows = [np.asarray(r, np.int64) for r in fixed][: max(1, count - 2)]
        while len(rows) < count - 2:
            q = rng.random()
            rows.append(np.r_[(rng.random(w) < q).astype(np.int64), rng.choice(self.threads)])
        rows += [rows[0].copy() for _ in range(min(2, count - len(rows)))]
        return np.stack(rows)

    def features(self, configs: np.ndarray) -> np.ndarray:
        """Configuration features ``(C, configurable nodes, 18)`` of configurations ``configs``."""
        c = configs.shape[0]
        out = np.zeros((c, len(self.config_nodes), CONFIG_DIM), np.float32)
        for j, w in enumerate(self._conv_of):
            if w < 0:
                out[:, j, 2] = 1.0
            else:
                out[:, j, 0] = configs[:, w]
                out[:, j, 1] = 1 - configs[:, w]
        out[:, :, 3] = np.log2(configs[:, -1:])
        return out

    def apply(self, config: np.ndarray) -> None:
        """Set the formats and threads of one configuration."""
        for wrapper, cl in zip(self.wrappers, config[:-1], strict=True):
            wrapper.set(bool(cl))
        torch.set_num_threads(int(config[-1]))

    def run(self) -> None:
        """One forward pass (inference mode)."""
        with torch.inference_mode():
            self.gm(*self.inputs)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Restore the process's thread count afterwards."""
        with _threads(torch.get_num_threads()):
            yield


_OPT_LEVELS = ("disabled", "basic", "extended", "all")


class OrtEngine:
    """An ONNX model under ONNX Runtime session settings (optimisation level, threads, execution mode)."""

    name = "onnxruntime"

    def __init__(self, path: str | Path, name: str, threads: tuple[int, ...] = THREADS) -> None:
        import onnx  # deferred: onnx loads only when this engine exports a model

        self.threads = tuple(sorted(int(t) for t in threads))
        # deferred: imports onnx
        from mlsysopt.graph.importers.onnx import from_onnx

        self.path, self.graph = Path(path), from_onnx(path)
        model = onnx.load(str(path))
        inits = {t.name for t in model.graph.initializer}
        self.feeds: dict[str, np.ndarray] = {}
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            tt = inp.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            rng = np.random.default_rng(0)
            self.feeds[inp.name] = (rng.standard_normal(dims).astype(dtype) if np.issubdtype(dtype, np.floating)
                                    else np.zeros(dims, dtype))  # fmt: skip
        ops = self.graph.ops
        self.config_nodes = [i for i, op in enumerate(ops) if op in ("input", "conv", "matmul", "linear")]
        if not self.config_nodes:
            self.config_nodes = [0]
        self.choices = 3
        self._sessions: dict[tuple[int, ...], Any] = {}
        self._current: Any = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The graph's layout arrays (no shapes beyond what the ONNX importer counts)."""
        return layout_graph(self.graph, None, self.config_nodes)

    def draw(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """Every (level, threads, mode) combination, the default (all optimisations, 1 thread, sequential) first,
        cycled to ``count``."""
        combos = [(lvl, t, m) for lvl in (3, 0, 1, 2) for t in self.threads for m in (0, 1)]
        rows = [combos[i % len(combos)] for i in range(count)]
        return np.asarray(rows, np.int64)

    def features(self, configs: np.ndarray) -> np.ndarray:
        """Configuration features ``(C, configurable nodes, 18)``: the session settings on every such node."""
        c = configs.shape[0]
        out = np.zeros((c, len(self.config_nodes), CONFIG_DIM), np.float32)
        out[:, :, 3] = np.log2(configs[:, 1:2])
        out[:, :, 4] = 1.0
        out[np.arange(c), :, 5 + configs[:, 0]] = 1.0
        out[:, :, 9] = configs[:, 2:3]
        out[:, :, 10] = configs[:, 2:3]  # log2(2 inter-op threads) in parallel mode, log2(1) = 0 otherwise
        out[:, 0, 2] = 1.0
        return out

    def apply(self, config: np.ndarray) -> None:
        """Pick (creating once) the session of one configuration."""
        import onnxruntime as ort  # deferred: onnxruntime loads only when this engine runs

        key = tuple(int(v) for v in config)
        if key not in self._sessions:
            so = ort.SessionOptions()
            so.graph_optimization_level = [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                           ort.GraphOptimizationLevel.ORT_ENABLE_ALL][key[0]]  # fmt: skip
            so.intra_op_num_threads = key[1]
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if key[2] else ort.ExecutionMode.ORT_SEQUENTIAL
            so.inter_op_num_threads = 2 if key[2] else 1
            self._sessions[key] = ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
        self._current = self._sessions[key]

    def run(self) -> None:
        """One inference."""
        self._current.run(None, self.feeds)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Drop the sessions afterwards."""
        try:
            yield
        finally:
            self._sessions.clear()


def time_configs(engine: Any, configs: np.ndarray, rounds: int, rng: np.random.Generator,
                 min_seconds: float = 2e-3) -> np.ndarray:  # fmt: skip
    """Seconds per run of every configuration in every round: ``(C, rounds)``.

    A round visits the configurations in a fresh random order (so drift of the machine spreads over all of them);
    each visit applies the configuration, runs once to warm up, then times ``inner`` runs back to back (``inner``
    set once so that a visit lasts at least ``min_seconds``) and records their mean. Garbage collection is off.
    """

    c = configs.shape[0]
    out = np.zeros((c, rounds))
    with engine.session():
        engine.apply(configs[0])
        engine.run()
        t0 = time.perf_counter()
        engine.run()
        once = max(time.perf_counter() - t0, 1e-6)
        inner = max(1, int(np.ceil(min_seconds / once)))
        was = gc.isenabled()
        gc.disable()
        try:
            for r in range(rounds):
                for i in rng.permutation(c):
                    engine.apply(configs[i])
                    engine.run()
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        engine.run()
                    out[i, r] = (time.perf_counter() - t0) / inner
        finally:
            if was:
                gc.enable()
    return out
