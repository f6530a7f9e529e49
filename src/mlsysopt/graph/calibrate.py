"""Measure this CPU's op profile (:mod:`mlsysopt.graph.op_profile`) on micro-kernels run by PyTorch.

The kernels are single layers at sizes from tens to tens of millions of FLOPs, chosen once for their spread, not
for any model: dense, strided and patchifying convolutions, depthwise convolutions, linear layers from a
matrix-vector product to a 256-wide GEMM, scaled-dot-product attention, batch and layer norms, cheap and
transcendental elementwise ops, pooling, views, small ``nn.GRU`` and ``nn.TransformerEncoder`` layers at two sizes
each (they carry the in-C++ op and the per-layer costs) and ``nn.LSTM`` layers at three. Each kernel is imported with
the torch.fx importer (so its FLOPs and bytes are the ones a user's graph gets), timed as the median of ``reps`` calls
in inference mode on ``threads`` threads, and the coefficients are fitted by non-negative least squares on the
relative error.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mlsysopt.errors import InvalidOption
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.op_profile import PARAMETERS, OpProfile, design, fit_coefficients

#: Most repetitions per kernel :func:`calibrate` accepts.
MAX_REPS = 100_000


class _Wrap(nn.Module):
    """One module as a leaf of a traced root (torch.fx traces a root's forward, a leaf's runs whole)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> Any:
        out = self.inner(x)
        return out[0] if isinstance(out, tuple) else out


class _Add(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x


class _SDPA(nn.Module):
    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = x.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q)


def kernels() -> list[tuple[str, nn.Module, torch.Tensor]]:
    """The micro-kernels: ``(name, module, example input)``, every module a traceable root in eval mode."""
    out: list[tuple[str, nn.Module, torch.Tensor]] = []

    def add(name: str, module: nn.Module, shape: tuple[int, ...], wrap: bool = True) -> None:
        out.append((name, (_Wrap(module) if wrap else module).eval(), torch.randn(*shape)))

    for cin, cout, k, s, hw in ((3, 16, 3, 1, 32), (16, 16, 3, 1, 32), (32, 32, 3, 1, 16), (64, 64, 3, 1, 8),
                                (64, 128, 1, 1, 16), (128, 128, 3, 1, 8), (3, 32, 4, 4, 32), (16, 32, 3, 2, 32),
                                (32, 16, 1, 1, 32), (256, 256, 1, 1, 4)):  # fmt: skip
        add(f"conv{cin}-{cout}k{k}s{s}@{hw}", nn.Conv2d(cin, cout, k, s, padding=k // 2 if s == 1 else 0),
            (1, cin, hw, hw))  # fmt: skip
    for c, k, s, hw in ((16, 3, 1, 32), (32, 3, 1, 16), (64, 3, 1, 16), (128, 3, 1, 8), (64, 5, 2, 16),
                        (256, 3, 1, 4)):  # fmt: skip
        add(f"depthwise{c}k{k}s{s}@{hw}", nn.Conv2d(c, c, k, s, padding=k // 2, groups=c), (1, c, hw, hw))
    for t, i, o in ((1, 64, 10), (1, 256, 256), (16, 64, 64), (16, 64, 256), (64, 128, 128), (128, 256, 256),
                    (1, 1024, 1024), (8, 512, 128)):  # fmt: skip
        add(f"linear{t}x{i}x{o}", nn.Linear(i, o), (1, t, i))
    for t, d, h in ((8, 32, 2), (32, 128, 4), (128, 256, 8)):
        add(f"sdpa{t}x{d}h{h}", _SDPA(h), (1, t, d), wrap=False)
    for c, hw in ((16, 32), (64, 16), (256, 4)):
        add(f"batch_norm{c}@{hw}", nn.BatchNorm2d(c), (1, c, hw, hw))
    for t, d in ((8, 32), (64, 256), (1, 1024)):
        add(f"layer_norm{t}x{d}", nn.LayerNorm(d), (1, t, d))
    for n in (64, 4096, 65536, 262144):
        add(f"relu{n}", nn.ReLU(), (1, n))
        add(f"add{n}", _Add(), (1, n), wrap=False)
    for n in (1024, 65536):
        add(f"gelu{n}", nn.GELU(), (1, n))
        add(f"sigmoid{n}", nn.Sigmoid(), (1, n))
    for c, hw in ((16, 32), (64, 16), (128, 8)):
        add(f"max_pool{c}@{hw}", nn.MaxPool2d(2), (1, c, hw, hw))
        add(f"global_avg_pool{c}@{hw}", nn.AdaptiveAvgPool2d(1), (1, c, hw, hw))
    for n in (256, 65536):
        add(f"flatten{n}", nn.Flatten(), (1, 4, n // 4))
        add(f"dropout{n}", nn.Dropout(0.1), (1, n))
    for i, h, t in ((16, 32, 8), (64, 128, 12)):
        add(f"gru{i}-{h}x{t}", nn.GRU(i, h, batch_first=True), (1, t, i))
    for i, h, layers, t in ((16, 32, 1, 8), (24, 48, 1, 20), (64, 128, 2, 12)):
        add(f"lstm{i}-{h}x{t}l{layers}", nn.LSTM(i, h, layers, batch_first=True), (1, t, i))
    for d, heads, ffn, t in ((32, 2, 64, 8), (128, 4, 256, 32)):
        layer = nn.TransformerEncoderLayer(d, heads, ffn, batch_first=True)
        add(f"encoder{d}h{heads}t{t}", nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), (1, t, d))
    return out


def median_seconds(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of ``fn()`` over ``reps`` calls in inference mode, after ``max(5, reps // 10)`` warm-ups."""
    with torch.inference_mode():
        for _ in range(max(5, reps // 10)):
            fn()
        times = np.empty(reps)
        for k in range(reps):
            t0 = time.perf_counter()
            fn()
            times[k] = time.perf_counter() - t0
    return float(np.median(times))


def calibrate(threads: int = 1, reps: int = 300, seed: int = 0,
              progress: Callable[[int, int], None] | None = None) -> OpProfile:  # fmt: skip
    """Time the micro-kernels on this CPU and fit its op profile.

    Args:
        threads: PyTorch threads while timing (the profile holds for that many).
        reps: Timed calls per kernel (the median is taken).
        seed: Seeds the kernels' weights and inputs.
        progress: Called with (kernels done, kernels) after each kernel.

    Returns:
        OpProfile: The coefficients and, in ``meta``, the machine, threads, PyTorch version, date, every kernel's
        measured and fitted time, and the fit's spread (fitted / measured: median, min, max, share within 25%).

    Raises:
        InvalidOption: If ``threads`` or ``reps`` is out of range.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise InvalidOption(f"--threads {threads!r}: give a whole number from 1 to 1024")
    if isinstance(reps, bool) or not isinstance(reps, int) or not 5 <= reps <= MAX_REPS:
        raise InvalidOption(f"--reps {reps!r}: give a whole number from 5 to {MAX_REPS:,}")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    try:
        suite = kernels()
        rows, seconds, names = [], [], []
        for k, (name, module, x) in enumerate(suite):
            graph = from_module(module, (x,), name=name)
            rows.append(design(graph).sum(axis=0))
            seconds.append(median_seconds(lambda m=module, a=x: m(a), reps))
            names.append(name)
            if progress is not None:
                progress(k + 1, len(suite))
    finally:
        torch.set_num_threads(before)
    rows_a, seconds_a = np.array(rows), np.array(seconds)
    coef = fit_coefficients(rows_a, seconds_a)
    fitted = rows_a @ coef
    ratio = fitted / seconds_a
    fit = {
        "median_ratio": float(np.median(ratio)),
        "min_ratio": float(ratio.min()),
        "max_ratio": float(ratio.max()),
        "within_25pct": float(np.mean(np.abs(ratio - 1) <= 0.25)),
        "geomean_factor": float(math.exp(np.mean(np.abs(np.log(ratio))))),
    }
    meta = {
        "device": f"{platform.processor() or platform.machine()} ({platform.node()})",
        "threads": threads,
        "torch": torch.__version__,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "reps": reps,
        "seed": seed,
        "runtime": "PyTorch eager, inference mode",
        "kernels": {
            n: {"measured_s": float(s), "fitted_s": float(f)} for n, s, f in zip(names, seconds_a, fitted, strict=True)
        },
        "fit": fit,
    }
    return OpProfile({n: float(c) for n, c in zip(PARAMETERS, coef, strict=True)}, meta)
