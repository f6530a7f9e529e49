"""Throughput under the p99 SLO of every configuration of the Ray Serve grid (issue #33): how far above Ray Serve's
default a configuration can go, measured over HTTP here.

`benchmarks/serving_rayserve.py` tunes p99 at two fixed rates and then measures the pick's throughput; this script
measures the throughput under the SLO of *every* configuration (the rate search of
:class:`~mlsysopt.serving.capacity.CapacityBackend`, 3 bisections: ~10% resolution), as Triton Model Analyzer's
throughput objective would. The grid is `serving_rayserve.py`'s with max batch 16 added back (24 configurations).
Each configuration is written to the JSON as it finishes (a killed run keeps what it measured). Run it alone.

    cd benchmarks && python serving_rayserve_capacity.py --model vit --out results/serving_rayserve_capacity_vit.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from serving_rayserve import MODELS, SLO_MS, capacity_of, knobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=sorted(MODELS))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from mlsysopt.serving.capacity import CapacityBackend
    from mlsysopt.serving.inputs import ModelStage, machine_threads, tuning_space
    from mlsysopt.serving.rayserve import RayServeEngine
    from mlsysopt.serving.space import Workload
    from mlsysopt.serving.windows import StableBackend

    cores = machine_threads()
    grid = {**knobs(False), "max_batch": (1, 4, 16)}
    space = tuning_space("rayserve", cores, grid)
    default = space.default(cores)
    stage = ModelStage(MODELS[args.model], None, largest=16, instances=2)
    out: dict[str, Any] = {"model": args.model, "slo_ms": SLO_MS, "load_before": os.getloadavg(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S"), "throughput_under_slo": {}}  # fmt: skip
    t0 = time.perf_counter()
    log = str(args.out.with_suffix(".ray.log"))
    with RayServeEngine(stage.model, n_requests=400, window_s=1.0, slo_ms=SLO_MS, seed=args.seed, log=log) as engine:
        stable = StableBackend(engine)

        search = CapacityBackend(stable, SLO_MS, doublings=5, bisections=3)

        def capacity(config: Any, start: float) -> float:
            return capacity_of(search.measure(config, Workload(start)))

        out["default"] = {"config": default.label(), "throughput_under_slo": capacity(default, 40.0)}
        start = out["default"]["throughput_under_slo"] or 40.0
        # grouped by CPUs per replica: Ray Serve restarts replicas only when num_cpus changes
        for c in sorted(space, key=lambda c: (c.threads_per_instance, c.instances, c.max_batch, c.ongoing)):
            out["throughput_under_slo"][c.label()] = capacity(c, start)
            out["seconds"] = time.perf_counter() - t0
            args.out.write_text(json.dumps(out, indent=1))
            print(c.label(), out["throughput_under_slo"][c.label()], flush=True)
    stage.close()
    best = max(out["throughput_under_slo"], key=out["throughput_under_slo"].get)
    out["best"] = {"config": best, "throughput_under_slo": out["throughput_under_slo"][best],
                   "over_default": out["throughput_under_slo"][best] / start}  # fmt: skip
    out["load_after"] = os.getloadavg()
    out["seconds"] = time.perf_counter() - t0
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["best"]))


if __name__ == "__main__":
    main()
