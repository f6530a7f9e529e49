"""Is it `serve run`, or the client? One configuration served by the tune's private Ray and by Ray Serve's own
`serve run`, each measured with a warm client and with a fresh one (issue #33, an exploration).

`serving_rayserve.py`'s deploy check failed where the tune had met the SLO. This script serves the pick of a
`serving_rayserve.py --quick` run (``--work``: its work folder, which keeps ``cnn_quick.json`` and ``deploy_cnn/``)
at 120, 150 and 180 req/s in both environments:

* **warm client**: one HTTP client, 10 sequential requests, then four 1-s open-loop windows per rate (the engine's
  way): each window's p99 and the p99 pooled over the four;
* **fresh client**: :func:`~mlsysopt.serving.rayserve_driver.http_p99_ms` with ``warm_s=0`` (a new client whose
  connections open during the measured 3-s burst: how the deploy check measured before 2026-12-07).

Run it alone:

    cd benchmarks && python serving_rayserve_client.py --work ../runs/bench/sr_quick \
        --out results/serving_rayserve_client.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from serving_rayserve import MODELS, SLO_MS

RATES = (120, 150, 180)


def warm_client(port: int, path: Path) -> dict[int, dict[str, Any]]:
    """Four 1-s windows per rate from one warm client: each window's p99 and the pooled p99 (ms)."""
    from mlsysopt.serving.loadgen import workload_arrivals
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.rayserve_driver import _client, _warmup, _window, request_body
    from mlsysopt.serving.space import Workload

    body, url = request_body(ServedModel(path), 1, 0), f"http://127.0.0.1:{port}/"

    async def go() -> dict[int, list[np.ndarray]]:
        client, out = await _client(), {}
        try:
            for rate in RATES:
                for k in range(4):
                    await _warmup(client, url, [body], 10)
                    w = await _window(client, url, body, workload_arrivals(Workload(rate), rate, 0, k), 3.0)
                    out.setdefault(rate, []).append(np.asarray(w["latency_ms"]))
        finally:
            await client.close()
        return out

    measured = asyncio.run(go())
    return {
        rate: {
            "window_p99": [float(np.percentile(x, 99)) for x in v],
            "pooled_p99": float(np.percentile(np.concatenate(v), 99)),
        }
        for rate, v in measured.items()
    }


def fresh_client(port: int, path: Path) -> dict[int, float]:
    """One 3-s window per rate from a new client (no warm-up): p99 (ms)."""
    from mlsysopt.serving.rayserve_driver import http_p99_ms

    return {rate: http_p99_ms(port, path, rate=rate, seconds=3.0, seed=rate, warm_s=0.0) for rate in RATES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from mlsysopt.serving.inputs import ModelStage
    from mlsysopt.serving.rayserve import RayServeEngine
    from mlsysopt.serving.rayserve_deploy import ServeRun
    from mlsysopt.serving.space import Config

    folder = args.work / "deploy_cnn"
    path = folder / "model.onnx"
    config = Config.from_dict(json.loads((args.work / "cnn_quick.json").read_text())["_pick"])
    out: dict[str, Any] = {"config": config.label(), "slo_ms": SLO_MS, "load_before": os.getloadavg(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    stage = ModelStage(MODELS["cnn"], None, largest=16, instances=2)
    with RayServeEngine(stage.model, n_requests=400, window_s=1.0, max_seconds=3.0, slo_ms=SLO_MS) as engine:
        engine.configure(config)
        time.sleep(5.0)
        out["private_ray"] = {"warm": warm_client(engine.port, path), "fresh": fresh_client(engine.port, path)}
    with ServeRun(folder) as run:
        time.sleep(5.0)
        out["serve_run"] = {"warm": warm_client(run.port, path), "fresh": fresh_client(run.port, path)}
    stage.close()
    out["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
