"""Simulator benchmark: mlsysopt's array simulator against a SimPy process simulation of the same semantics.

The GiPH reference evaluates each placement with SimPy (each device a capacity-1 resource, a process per task
that waits for its inputs, then queues FIFO for its device). ``simpy_makespan`` below is that design, written
for the semantics documented in ``mlsysopt.graph.simulator``. Both run the same random feasible placements of
the same generated graphs on 20-device clusters; we report simulations per second, the speedup, and the largest
relative makespan difference.

    python benchmarks/simulator.py [--quick] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

import numpy as np
import simpy

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import random_placement
from mlsysopt.graph.simulator import Simulator
from mlsysopt.io import write_json_atomic

# Connection probability per size: layered_dag links each task to every earlier layer with probability p,
# so p shrinks with n to keep ~5-6 inputs per task (p=0.1 at n=1000 would give 50k edges).
SIZES = {"n100": (100, 0.1), "n1000": (1000, 0.01)}


class SimpyReference:
    """SimPy model of one (graph, cluster): a process per task, a capacity-1 resource per device."""

    def __init__(self, graph: CompGraph, cluster: DeviceCluster) -> None:
        self.cluster = cluster
        self.compute = graph.compute.tolist()
        n = graph.num_nodes
        self.out_edges: list[list[tuple[int, int, float]]] = [[] for _ in range(n)]  # (edge, child, bytes)
        self.in_edges: list[list[int]] = [[] for _ in range(n)]
        src, dst = graph.edge_index
        for k in np.lexsort((dst, src)):  # children in id order, as the array simulator releases them
            u, v = int(src[k]), int(dst[k])
            self.out_edges[u].append((int(k), v, float(graph.edge_bytes[k])))
            self.in_edges[v].append(int(k))

    def makespan(self, placement: np.ndarray) -> float:
        """Run one placement to completion and return the last finish time."""
        env = simpy.Environment()
        devices = [simpy.Resource(env, capacity=1) for _ in range(self.cluster.num_devices)]
        arrived = [env.event() for _ in range(sum(len(e) for e in self.in_edges))]
        place = placement.tolist()
        speed, delay, bw = (
            self.cluster.speed.tolist(),
            self.cluster.delay.tolist(),
            self.cluster.bandwidth.tolist(),
        )
        finish = [0.0] * len(self.compute)

        def transfer(event: simpy.Event, seconds: float):
            yield env.timeout(seconds)
            event.succeed()

        def task(i: int):
            if self.in_edges[i]:
                yield simpy.AllOf(env, [arrived[k] for k in self.in_edges[i]])
            d = place[i]
            with devices[d].request() as req:
                yield req
                yield env.timeout(self.compute[i] / speed[d])
            finish[i] = env.now
            for k, c, nbytes in self.out_edges[i]:
                dc = place[c]
                comm = 0.0 if dc == d else delay[d][dc] + nbytes / bw[d][dc]
                env.process(transfer(arrived[k], comm))

        for i in range(len(self.compute)):
            env.process(task(i))
        env.run()
        return max(finish)


def _rate(fn, items: list, min_seconds: float) -> tuple[float, list[float]]:
    """Calls per second of ``fn`` over ``items`` (repeated until ``min_seconds``), and the first results."""
    results = [fn(x) for x in items]
    calls, t0 = 0, time.perf_counter()
    while True:
        for x in items:
            fn(x)
        calls += len(items)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return calls / elapsed, results


def run(quick: bool, seed: int) -> dict:
    """Measure both simulators on every size; return the benchmark JSON."""
    placements_per_graph = 20 if quick else 100
    graphs_per_size = 1 if quick else 3
    min_seconds = 0.5 if quick else 3.0
    out: dict = {
        "sims_per_s": {},
        "simpy_sims_per_s": {},
        "speedup": {},
        "batch_sims_per_s": {},
        "max_rel_diff": 0.0,
    }
    details: dict = {}
    for key, (n, p) in SIZES.items():
        fast_rates, simpy_rates, batch_rates, diffs, edges = [], [], [], [], []
        for gi in range(graphs_per_size):
            g = layered_dag(n, alpha=0.2, p=p, seed=seed + gi)
            c = random_cluster(20, num_types=5, delay_avg=0.1, seed=seed + 100 + gi)
            rng = np.random.default_rng(seed + 200 + gi)
            ps = [random_placement(g, c, rng) for _ in range(placements_per_graph)]
            sim, ref = Simulator(g, c), SimpyReference(g, c)
            sim.makespan(ps[0])  # compile / warm caches outside the timing
            fast_rate, fast_ms = _rate(sim.makespan, ps, min_seconds)
            ref_rate, ref_ms = _rate(ref.makespan, ps, min_seconds)
            batch = np.stack(ps)
            batch_rate = _rate(sim.makespans, [batch], min_seconds)[0] * len(ps)
            fast_ms, ref_ms = np.array(fast_ms), np.array(ref_ms)
            diffs.append(float(np.max(np.abs(fast_ms - ref_ms) / ref_ms)))
            fast_rates.append(fast_rate)
            simpy_rates.append(ref_rate)
            batch_rates.append(batch_rate)
            edges.append(g.num_edges)
        out["sims_per_s"][key] = float(np.mean(fast_rates))
        out["simpy_sims_per_s"][key] = float(np.mean(simpy_rates))
        out["batch_sims_per_s"][key] = float(np.mean(batch_rates))
        out["speedup"][key] = out["sims_per_s"][key] / out["simpy_sims_per_s"][key]
        out["max_rel_diff"] = max(out["max_rel_diff"], max(diffs))
        details[key] = {"tasks": n, "p": p, "mean_edges": float(np.mean(edges)), "graphs": graphs_per_size}
        print(
            f"{key}: {out['sims_per_s'][key]:9.0f} sims/s  simpy {out['simpy_sims_per_s'][key]:7.1f} sims/s  "
            f"speedup {out['speedup'][key]:6.1f}x  batch {out['batch_sims_per_s'][key]:9.0f} sims/s  "
            f"max rel diff {max(diffs):.2e}"
        )
    out["setup"] = {
        "data": "synthetic layered DAGs (GiPH/Topcuoglu generator) on random 20-device clusters",
        "placements_per_graph": placements_per_graph,
        "sizes": details,
        "quick": quick,
        "seed": seed,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "date": dt.date.today().isoformat(),
        "targets": {"speedup": ">= 20x at n100 and n1000", "max_rel_diff": "<= 1e-9"},
    }
    return out


def main() -> None:
    """Parse arguments, run, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer graphs and placements (well under a minute)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/simulator.json"))
    args = ap.parse_args()
    result = run(args.quick, args.seed)
    write_json_atomic(args.out, result)
    ok = min(result["speedup"].values()) >= 20 and result["max_rel_diff"] <= 1e-9
    print(f"wrote {args.out}; targets {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
