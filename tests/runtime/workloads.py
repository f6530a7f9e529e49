"""Module-level task functions for executor tests (workers unpickle them by module and name)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from mlsysopt.errors import InvalidOption


def square_plus(x: int) -> tuple[int, int]:
    """x*x + 1 and the pid that computed it."""
    return x * x + 1, os.getpid()


def env_value(key: str) -> str | None:
    """The value of an environment variable in the process that runs this."""
    return os.environ.get(key)


def hash_of(text: str) -> tuple[str | None, int]:
    """The worker's ``PYTHONHASHSEED`` and its ``hash(text)`` (salted unless the seed is fixed)."""
    return os.environ.get("PYTHONHASHSEED"), hash(text)


def fail_on_three(x: int) -> int:
    """Raises a library error for 3."""
    if x == 3:
        raise InvalidOption("three is not allowed")
    return x


def slow_echo(args: tuple[int, str, float]) -> int:
    """Record ``folder/<x>-<pid>-<node ip>``, sleep, return x * 10 (the library's probe task)."""
    from mlsysopt.runtime.probes import marked_sleeper

    return marked_sleeper(args)


def die_once(args: tuple[int, str]) -> int:
    """Kill this worker process the first time item 2 runs (a marker file remembers); x * 10 otherwise."""
    x, folder = args
    marker = Path(folder, f"died-{x}")
    if x == 2 and not marker.exists():
        marker.write_text("1")
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def always_die(x: int) -> int:
    """Kill this worker process every time."""
    os.kill(os.getpid(), signal.SIGKILL)
    return x


#: what both ranks of ``run_data_parallel(allreduce_rank, 2, 1.5)`` return: 1.5 + 3.0 summed, ranks 0 + 1 summed
RANKS = [[4.5, 1.0], [4.5, 1.0]]


def allreduce_rank(rank: int, world: int, payload: float) -> list[float]:
    """Sum a rank-dependent tensor over the group; every rank returns the same list."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([payload * (rank + 1), float(rank)])
    dist.all_reduce(t)
    return t.tolist()
