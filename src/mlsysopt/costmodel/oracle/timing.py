"""Timing one model under every setting: ONNX Runtime sessions and PyTorch eager, in random order, repeated.

:func:`time_model` runs ``rounds`` rounds; each round visits every setting in a fresh random order, runs it twice
to warm up, then times single inferences back to back until ``min_seconds`` have passed (at least ``min_runs``) and
keeps their median. The latency of a setting is the median over rounds; the gap between rounds is the noise the
collection reports. Python's garbage collector is off while timing. :func:`reference_ms` times a fixed workload:
the collection runs it before every round, so a host that ran slower for a while shows in ``host_speed``.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.costmodel.oracle.settings import Setting

#: ONNX Runtime's thread pools do not spin between runs, as mlsysopt's serving engine runs them: a pool spinning on
#: one of 2 cores steals it from the next setting timed.
SESSION_CONFIG_ENTRIES = {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
#: Seconds of sleep before each visit, for the previous setting's worker threads to go idle.
SETTLE_SECONDS = 0.003


def _ort_session(path: Path, threads: int, mode: str):
    import onnxruntime as ort  # deferred: onnxruntime loads only when a model is timed

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if mode == "par" else ort.ExecutionMode.ORT_SEQUENTIAL
    so.inter_op_num_threads = 2 if mode == "par" else 1
    so.log_severity_level = 3
    for key, value in SESSION_CONFIG_ENTRIES.items():
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def runners(module: torch.nn.Module, onnx_path: Path, inputs: dict[int, torch.Tensor],
            settings: tuple[Setting, ...]) -> dict[str, Callable[[], None]]:  # fmt: skip
    """One zero-argument callable per setting that runs one inference (sessions created once, here)."""
    sessions: dict[tuple[int, str], object] = {}
    name = None
    out: dict[str, Callable[[], None]] = {}
    for s in settings:
        x = inputs[s.batch]
        if s.engine == "onnxruntime":
            key = (s.threads, s.mode)
            if key not in sessions:
                sessions[key] = _ort_session(onnx_path, s.threads, s.mode)
            sess = sessions[key]
            name = name or sess.get_inputs()[0].name
            feed = {name: x.numpy()}
            out[s.key] = lambda sess=sess, feed=feed: sess.run(None, feed)
        else:

            def run(x: torch.Tensor = x, threads: int = s.threads) -> None:
                if torch.get_num_threads() != threads:
                    torch.set_num_threads(threads)
                with torch.inference_mode():
                    module(x)

            out[s.key] = run
    return out


def time_model(run: dict[str, Callable[[], None]], rounds: int, rng: np.random.Generator,
               min_seconds: float = 0.02, min_runs: int = 5,
               max_runs: int = 400) -> dict[str, list[float]]:  # fmt: skip
    """Seconds per inference of every setting in every round (``{setting: [round 0, round 1, ...]}``)."""
    keys = list(run)
    out: dict[str, list[float]] = {k: [] for k in keys}
    was = gc.isenabled()
    gc.disable()
    threads = torch.get_num_threads()
    try:
        for _ in range(rounds):
            for i in rng.permutation(len(keys)):
                f = run[keys[i]]
                time.sleep(SETTLE_SECONDS)
                f()
                f()
                times: list[float] = []
                start = time.perf_counter()
                while len(times) < max_runs and (len(times) < min_runs or time.perf_counter() - start < min_seconds):
                    t0 = time.perf_counter()
                    f()
                    times.append(time.perf_counter() - t0)
                out[keys[i]].append(float(np.median(times)))
    finally:
        torch.set_num_threads(threads)
        if was:
            gc.enable()
    return out


#: Rounds whose reference workload ran this much slower than the collection's median count as ``slow_rounds``.
SLOW_REFERENCE = 1.15


def reference_ms(reps: int = 15) -> float:
    """Median milliseconds of a fixed workload on one PyTorch thread: a 128x256 by 256x256 float32 matrix product
    (the same operands every call), the host's speed at this moment."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.ones(128, 256), torch.ones(256, 256)
        a @ b
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    return float(np.median(times)) * 1e3


def host_speed(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How much the reference workload's time moved over every round of ``rows`` (None: not recorded).

    ``spread`` is its 90th over its 10th percentile; ``slow_rounds`` counts rounds more than
    :data:`SLOW_REFERENCE` times its median."""
    refs = np.array([v for r in rows for v in r.get("reference_ms_rounds", ()) if v is not None], np.float64)
    if refs.size == 0:
        return None
    med = float(np.median(refs))
    return {"reference_ms_median": med, "p10": float(np.quantile(refs, 0.1)), "p90": float(np.quantile(refs, 0.9)),
            "spread": float(np.quantile(refs, 0.9) / np.quantile(refs, 0.1)),
            "slow_rounds": int((refs > SLOW_REFERENCE * med).sum()), "rounds": int(refs.size),
            "note": "ms of a 128x256x256 matrix product on one PyTorch thread, timed before every round; slow: "
                    f"above {SLOW_REFERENCE}x its median"}  # fmt: skip
