"""This machine's memory, the ground every size limit stands on (graph, placement, serving and file reads).

Each system keeps its own share of it (:mod:`mlsysopt.graph.limits`, :mod:`mlsysopt.placement.limits`,
:mod:`mlsysopt.serving.limits`) and its own estimates of what a size costs; only the reading of the machine is here.
"""

from __future__ import annotations

import os
from functools import cache

#: Share of the physical memory one graph command, or one file read, may plan to use.
MEMORY_FRACTION = 0.25
#: What a machine that does not say how much memory it has is assumed to have: a small 8 GiB one.
FALLBACK_BYTES = 8 * 2**30


@cache
def physical_memory() -> int:
    """Bytes of physical memory of this machine (:data:`FALLBACK_BYTES` where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX
        return FALLBACK_BYTES


def available_memory() -> int:
    """Bytes of memory available now (``MemAvailable`` of /proc/meminfo; physical memory where that is missing)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return physical_memory()


@cache
def memory_budget() -> int:
    """Bytes a command may plan to allocate: :data:`MEMORY_FRACTION` of the physical memory.

    Returns:
        The budget in bytes (cached for the process).
    """
    return int(physical_memory() * MEMORY_FRACTION)
