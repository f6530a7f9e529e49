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
        import ray

        return str(ray.util.get_node_ip_address()) if ray.is_initialized() else "local"
    except ModuleNotFoundError:
        return "local"


def marked_sleeper(args: tuple[int, str, float]) -> int:
    """Write ``folder/<x>-<pid>-<node ip>`` (content: the pid), sleep, return ``x * 10`` (a fault can target it)."""
    x, folder, seconds = args
    Path(folder, f"{x}-{os.getpid()}-{node_ip()}").write_text(str(os.getpid()))
    time.sleep(seconds)
    return x * 10
