"""Probe tasks for measuring executors (``benchmarks/scaleout.py``): importable on every worker by module name."""

from __future__ import annotations

import os
import time
from pathlib import Path


def noop(x: int) -> int:
    """The cheapest task: its wall time is the executor's overhead."""
    return x


def sleeper(seconds: float) -> float:
    """A task whose cost is waiting, not CPU (so a 2-core machine does not cap the scaling)."""
    time.sleep(seconds)
    return seconds


def node_ip() -> str:
    """The IP of the Ray node running this task ("local" outside Ray)."""
    try:
        import ray  # deferred: Ray loads only when the ray backend is used

        return str(ray.util.get_node_ip_address()) if ray.is_initialized() else "local"
    except ModuleNotFoundError:
        return "local"


def marked_sleeper(args: tuple[int, str, float]) -> int:
    """Write ``folder/<x>-<pid>-<node ip>`` (content: the pid), sleep, return ``x * 10`` (a fault can target it)."""
    x, folder, seconds = args
    Path(folder, f"{x}-{os.getpid()}-{node_ip()}").write_text(str(os.getpid()))
    time.sleep(seconds)
    return x * 10


def pid_sleeper(seconds: float) -> int:
    """Sleep, then return the worker's pid (a warm-up can tell when every worker process is up)."""
    time.sleep(seconds)
    return os.getpid()


def plain_ray_throughput(args: tuple[int, float, int]) -> dict[str, float]:
    """Run in a Ray driver (``RayExecutor.run_in_driver``): plain ``ray.remote`` tasks, the reference for the
    executor's windowed submission.

    ``(workers, seconds, waves)``: ``workers`` = 1 (one task after another) or the cluster's CPUs (one task per CPU,
    all submitted at once). Returns tasks/s of the first map (cold: the worker processes start during it) and of a
    second one on warm workers.
    """
    import ray  # deferred: Ray loads only when the ray backend is used

    workers, seconds, waves = args
    task = ray.remote(num_cpus=1)(sleeper)
    out = {}
    for phase in ("cold", "warm"):
        t0 = time.perf_counter()
        if workers == 1:  # one at a time (the cluster has more CPUs than that)
            for _ in range(waves):
                ray.get(task.remote(seconds))
        else:
            ray.get([task.remote(seconds) for _ in range(workers * waves)])
        out[phase] = workers * waves / (time.perf_counter() - t0)
    return out
