"""Step 5 of ``benchmarks/serving_rayserve.py``: a tuned configuration deployed by Ray Serve's own ``serve run`` from
the files a tune writes, its knobs read back from the replica and its p99 measured over HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def write_deploy(pick: Any, model: Any, folder: Path) -> None:
    """The pick as ``serve run`` reads it: ``serve_config.yaml``, the application module and the model."""
    from mlsysopt.serving.rayserve_config import model_inputs, write_deployment

    write_deployment(pick, model.path, model_inputs(model), folder)


def deploy_check(folder: Path, config: Any, rate: float, slo_ms: float) -> dict[str, Any]:
    """Deploy ``folder/serve_config.yaml`` with Ray Serve's own ``serve run``; knobs read back, p99 over HTTP at
    ``rate`` against ``slo_ms`` (and at 0.8x ``rate``, for information)."""
    from mlsysopt.errors import MlsysoptError
    from mlsysopt.serving.rayserve_config import deployment_options
    from mlsysopt.serving.rayserve_deploy import ServeRun
    from mlsysopt.serving.rayserve_driver import http_p99_ms

    try:
        with ServeRun(folder) as run:
            info = run.info
            opts = deployment_options(config)
            user = opts["user_config"]
            knobs_ok = (
                info["batching"]["max_batch_size"] == user["max_batch_size"]
                and info["session"]["intra_op_num_threads"] == user["intra_op_num_threads"]
                and info.get("ongoing") in (None, opts["max_ongoing_requests"])
            )
            # a fresh Ray (its dashboard and agents starting on the same cores) settles and the replicas warm up
            # first, as the tune's own engine did before its windows
            time.sleep(5.0)
            p99 = http_p99_ms(run.port, folder / "model.onnx", rate=rate, seconds=3.0, seed=1)
            lower = http_p99_ms(run.port, folder / "model.onnx", rate=0.8 * rate, seconds=3.0, seed=2)
            return {
                "deployed": True,
                "rate": rate,
                "start_s": round(run.start_s, 1),
                "knobs_match": knobs_ok,
                "ongoing": info.get("ongoing"),
                "p99_ms": p99,
                "p99_ms_at_0.8x": lower,
                "ok": bool(knobs_ok and p99 <= slo_ms),
            }
    except MlsysoptError as exc:
        return {"deployed": False, "rate": rate, "ok": False, "why": str(exc)}
