"""An independent reference for the ``ordered`` execution semantics (SimPy), shared by graph and placement tests."""

from __future__ import annotations

import numpy as np
import simpy

from mlsysopt.graph.problem import PlacementProblem


def simpy_ordered(problem: PlacementProblem, placement: np.ndarray, order: np.ndarray) -> float:
    """Each device a SimPy process running its tasks in ``order``; a task waits for every input's arrival event."""
    g, c = problem.graph, problem.cluster
    env = simpy.Environment()
    done = {i: env.event() for i in range(g.num_nodes)}
    finish: dict[int, float] = {}
    src, dst = g.edge_index

    def arrival(k: int):  # one edge's transfer, started when its producer finishes
        u, v = int(src[k]), int(dst[k])
        yield done[u]
        du, dv = int(placement[u]), int(placement[v])
        if du != dv:
            yield env.timeout(float(c.delay[du, dv] + g.edge_bytes[k] / c.bandwidth[du, dv]))

    inputs = {i: [] for i in range(g.num_nodes)}
    for k in range(g.num_edges):
        inputs[int(dst[k])].append(env.process(arrival(k)))

    def device(tasks: list[int], d: int):
        for i in tasks:
            if inputs[i]:
                yield env.all_of(inputs[i])
            yield env.timeout(float(g.compute[i] / c.speed[d] + c.overhead[d]))
            finish[i] = env.now
            done[i].succeed()

    for d in range(c.num_devices):
        env.process(device([int(i) for i in order if placement[i] == d], d))
    env.run()
    return max(finish.values())
