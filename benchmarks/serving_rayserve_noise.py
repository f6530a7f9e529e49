"""How much a configuration's throughput under the SLO moves between rate searches on Ray Serve, under two p99 rules
(issue #33, an exploration for the next step).

`serving_rayserve.py` found that two searches of one configuration differ by a median 23%. A search's verdict at a
rate is the **mean of its windows' p99s** (:class:`~mlsysopt.serving.windows.StableBackend`); perf_analyzer instead
takes one percentile over **every request of the measurement** (pooled). This script searches two configurations of
the zoo CNN (Ray Serve's default, and 1 replica, max batch 4, 2 threads, ``max_ongoing_requests`` 32) ``--reps`` times
under each rule, interleaved (rep, rule, configuration), with the same windows and early stop as the benchmark, and
reports each rule's spread. The pooled rule is applied here by keeping each window's latencies (a patch of this
script, not the library's behaviour). Run it alone:

    cd benchmarks && python serving_rayserve_noise.py --out results/serving_rayserve_noise.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from serving_rayserve import MODELS, SLO_MS, capacity_of, decisive, knobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import mlsysopt.serving.rayserve as rs
    from mlsysopt.serving.capacity import CapacityBackend
    from mlsysopt.serving.inputs import ModelStage, machine_threads, tuning_space
    from mlsysopt.serving.rayserve import RayServeEngine
    from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING, Workload

    last: dict[str, Any] = {}
    plain = rs.summarize

    def keeping(config, workload, latencies, **kw):  # the window's latencies, for the pooled rule
        last["latencies"] = np.asarray(latencies, dtype=float)
        return plain(config, workload, latencies, **kw)

    rs.summarize = keeping
    cores = machine_threads()
    space = tuning_space("rayserve", cores, knobs(False))
    default = replace(space.default(cores), max_ongoing=SERVE_DEFAULT_ONGOING)
    tuned = next(c for c in space if (c.instances, c.max_batch, c.threads_per_instance, c.ongoing) == (1, 4, 2, 32))
    stage = ModelStage(MODELS["cnn"], None, largest=16, instances=2)
    out: dict[str, Any] = {"slo_ms": SLO_MS, "load_before": os.getloadavg(), "started": time.strftime("%H:%M:%S"),
                           "searches": {"mean_of_windows": {}, "pooled": {}}}  # fmt: skip
    t0 = time.perf_counter()
    with RayServeEngine(stage.model, n_requests=400, window_s=1.0, max_seconds=3.0, slo_ms=SLO_MS, seed=args.seed) as e:
        windows: list[np.ndarray] = []  # the latencies of every window of the measurement running now

        class Keeping:  # the engine, keeping each window's latencies
            cores = e.cores

            def __getattr__(self, name):
                return getattr(e, name)

            def measure(self, config, workload, window=0):
                m = e.measure(config, workload, window)
                windows.append(last["latencies"])
                return m

        mean_rule = decisive(Keeping())

        class Pooled(Keeping):  # the same windows; p99 over every request of every window the measurement ran
            def measure(self, config, workload, window=0):
                windows.clear()
                m = mean_rule.measure(config, workload, window)
                m.p99_ms = float(np.percentile(np.concatenate(windows), 99))
                return m

        rules = {"mean_of_windows": mean_rule, "pooled": Pooled()}
        search = {rule: CapacityBackend(b, SLO_MS, doublings=5, bisections=3) for rule, b in rules.items()}
        for rep in range(args.reps):
            for rule in rules:
                for c in (default, tuned):
                    m = search[rule].measure(c, Workload(120.0), rep)
                    out["searches"][rule].setdefault(c.label(), []).append(capacity_of(m))
                    print(rep, rule, c.label(), capacity_of(m), flush=True)
                    out["seconds"] = time.perf_counter() - t0
                    args.out.write_text(json.dumps(out, indent=1))
    stage.close()

    def spread(v: list[float]) -> float:
        return (max(v) - min(v)) / statistics.mean(v) if statistics.mean(v) else float("nan")

    out["spread"] = {r: {c: spread(v) for c, v in d.items()} for r, d in out["searches"].items()}
    out["load_after"] = os.getloadavg()
    out["seconds"] = time.perf_counter() - t0
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["spread"], indent=1))


if __name__ == "__main__":
    main()
