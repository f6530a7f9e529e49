"""Size limits of the graph commands, derived from this machine's memory and a time budget.

Every size a user asks for (tasks of a generated DAG or a recipe, devices of a random cluster, the tasks x devices
of a placement problem) is checked here *before* anything is allocated, so a typo such as ``--tasks 10000000``
is one clear error that states the limit instead of minutes of swapping and a killed process.

The budgets: :data:`MEMORY_FRACTION` of the machine's physical memory, and :data:`TIME_BUDGET_S` seconds of
work at the rates measured for each generator (the ``*_BYTES`` / ``*_SECONDS`` constants, measured on a
2-core laptop-class machine with headroom).
"""

from __future__ import annotations

import math

from mlsysopt.errors import InvalidOption
from mlsysopt.limits import MEMORY_FRACTION, memory_budget  # this module's budget is the ground one

#: Seconds of generation work one command may plan to spend.
TIME_BUDGET_S = 600.0

#: Peak bytes per edge and per task while a layered DAG is generated and turned into a CompGraph.
EDGE_BYTES = 160.0
TASK_BYTES = 300.0
#: Seconds per edge and per pair of tasks tested for an edge (layered DAG generator).
EDGE_SECONDS = 1e-6
PAIR_SECONDS = 1e-8
#: Bytes per device pair of a cluster (bandwidth, delay, their inverses and temporaries).
DEVICE_PAIR_BYTES = 80.0
#: Bytes per (task, device) of a placement problem (execution times, feasibility, simulator state).
TASK_DEVICE_BYTES = 32.0
#: Peak bytes and seconds per task of a WfChef recipe instance (wfcommons keeps JSON and networkx copies).
RECIPE_TASK_BYTES = 8192.0
RECIPE_TASK_SECONDS = 1e-3


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def _refuse(option: str, value: int, limit: int, why: str) -> None:
    raise InvalidOption(f"{option} {value:,} is above this machine's limit of {limit:,} ({why})")


def _largest(ok: object, high: int) -> int:
    """The largest n in [1, high] for which ``ok(n)`` holds (``ok`` is monotone), by bisection."""
    lo, hi = 1, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):  # type: ignore[operator]
            lo = mid
        else:
            hi = mid - 1
    return lo


def dag_cost(tasks: int, p: float) -> tuple[float, float]:
    """Estimated (peak bytes, seconds) of a layered DAG of ``tasks`` tasks and edge probability ``p``."""
    pairs = tasks * (tasks - 1) / 2
    edges = p * pairs + tasks
    return EDGE_BYTES * edges + TASK_BYTES * tasks, EDGE_SECONDS * edges + PAIR_SECONDS * pairs


def check_tasks(tasks: int, p: float, option: str = "--tasks") -> None:
    """Refuse a layered DAG too big for this machine's memory or the time budget (the error states the limit)."""
    budget = memory_budget()

    def ok(n: int) -> bool:
        nbytes, seconds = dag_cost(n, p)
        return nbytes <= budget and seconds <= TIME_BUDGET_S

    if not ok(tasks):
        nbytes, seconds = dag_cost(tasks, p)
        limit = _largest(ok, tasks)
        why = (
            f"with edge probability {p:g} it needs ~{_gib(nbytes)} and ~{seconds:,.0f} s; the budget is "
            f"{_gib(budget)} ({MEMORY_FRACTION:.0%} of the memory) and {TIME_BUDGET_S:.0f} s"
        )
        _refuse(option, tasks, limit, why)


def check_devices(devices: int, tasks: int = 1, option: str = "--devices") -> None:
    """Refuse a cluster (and a tasks x devices problem) too big for this machine's memory."""
    budget = memory_budget()

    def need(d: int) -> float:
        return DEVICE_PAIR_BYTES * d * d + TASK_DEVICE_BYTES * max(tasks, 1) * d

    if need(devices) > budget:
        limit = _largest(lambda d: need(d) <= budget, devices)
        why = f"{devices:,} devices for {tasks:,} tasks need ~{_gib(need(devices))}, the budget is {_gib(budget)}"
        _refuse(option, devices, limit, why)


def check_problem(tasks: int, devices: int) -> None:
    """Refuse a placement problem whose (tasks, devices) matrices do not fit the memory budget."""
    budget = memory_budget()
    need = TASK_DEVICE_BYTES * tasks * devices
    if need > budget:
        raise InvalidOption(
            f"{tasks:,} tasks on {devices:,} devices need ~{_gib(need)} for the placement problem, more than "
            f"this machine's budget of {_gib(budget)}: use a smaller graph or fewer devices"
        )


def recipe_task_limit() -> int:
    """The most tasks a WfChef recipe instance may have on this machine (memory and time budgets)."""
    return int(min(memory_budget() / RECIPE_TASK_BYTES, TIME_BUDGET_S / RECIPE_TASK_SECONDS))


def check_recipe_tasks(num_tasks: int, option: str = "--num-tasks") -> None:
    """Refuse a WfChef recipe instance too big for the memory or time budget."""
    limit = recipe_task_limit()
    if num_tasks > limit:
        why = f"~{RECIPE_TASK_BYTES / 1024:.0f} KiB and ~{RECIPE_TASK_SECONDS * 1e3:g} ms per task"
        _refuse(option, num_tasks, limit, why)


def finite_product(*factors: float) -> bool:
    """Whether the product of ``factors`` is a finite float (an overflow check that does not overflow)."""
    total = 0.0
    for f in factors:
        if f == 0:
            return True
        if not math.isfinite(f):
            return False
        total += math.log10(abs(f))
    return total < 308.0


def parse_shape(value: str | None, option: str = "--input-shape") -> tuple[int, ...] | None:
    """``"1,3,32,32"`` (or ``1x3x32x32``) -> ``(1, 3, 32, 32)``; one clear error naming ``option`` otherwise."""
    if value is None:
        return None
    try:
        shape = tuple(int(v) for v in value.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise InvalidOption(f"{option} '{value}' is not a comma-separated list of integers, e.g. 1,3,32,32") from None
    if not shape or any(s <= 0 for s in shape):
        raise InvalidOption(f"{option} '{value}' must list positive sizes, e.g. 1,3,32,32")
    budget = memory_budget()
    if 4 * math.prod(shape) > budget:  # one float32 example input must fit, with room for the model
        raise InvalidOption(
            f"{option} '{value}' is {4 * math.prod(shape) / 2**30:,.1f} GiB of float32, above this machine's limit "
            f"of {budget / 2**30:,.1f} GiB ({budget // 4:,} elements)"
        )
    return shape
