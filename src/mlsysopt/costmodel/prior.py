"""The cost model as a prior for serving tuning, where it fits: the op-level knobs of ONNX Runtime.

A served model's latency at light load is its service time: one inference under the session's op-level settings
(intra-op threads, sequential or parallel execution with its inter-op threads). A cost model trained with an
absolute target on ``costmodel collect`` runtimes of ONNX models under those settings predicts that time
(:meth:`~mlsysopt.costmodel.latency.LatencyModel.session_ms`). :func:`serving_prior` turns the predictions into
*history records* in the serving contract's format (``Measurement.to_dict()``, what ``result.json["measurements"]``
holds): one per op-level configuration of the space, at its smallest request-level setting (one instance, no
batching), ``extra.source = "costmodel prediction"``. Request-level knobs (instances, batching) are the queue's
business, which a per-inference cost model does not see: it gives no records for them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidOption

SOURCE = "costmodel prediction"


def serving_prior(run: str | Path, onnx_path: str | Path, space: Any, workload: Any) -> list[dict[str, Any]]:
    """Predicted service times of ``onnx_path`` for the op-level configurations of a serving ``space``, as
    ``Measurement.to_dict()`` records under ``workload`` (mean = p50 = p95 = p99 = the predicted time)."""
    from dataclasses import replace

    from mlsysopt.costmodel.latency import LatencyModel
    from mlsysopt.serving.backend import Measurement

    configs = [c for c in space.configs() if c.instances == min(space.values["instances"]) and c.max_batch == 1]
    if not configs:
        raise InvalidOption("the serving space has no configuration with max_batch 1 and its fewest instances: the "
                            "cost-model prior covers op-level knobs at the smallest request-level setting")  # fmt: skip
    oracle = LatencyModel(run)
    ms = oracle.session_ms(onnx_path, [(c.intra_threads, c.execution_mode) for c in configs])
    records = []
    for cfg, t in zip(configs, ms, strict=True):
        m = Measurement(config=cfg, workload=workload, mean_ms=float(t), p50_ms=float(t), p95_ms=float(t),
                        p99_ms=float(t), throughput=min(workload.rate, 1000.0 / float(t)), violation_rate=None,
                        mean_queue=0.0, max_queue=0, n_requests=0, completed=0, dropped=0, saturated=False,
                        wall_s=0.0, offered_rps=math.nan, windows=0, stable=None,
                        extra={"source": SOURCE, "run": str(run), "model": str(onnx_path)})  # fmt: skip
        records.append(replace(m).to_dict())
    return records
