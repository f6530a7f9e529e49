"""How far from the best placement: the exact optimum on small problems, a CP-SAT lower bound on larger ones.

* :func:`exact_optimum` enumerates every feasible placement (in batches through :meth:`Simulator.makespans`, the
  simulator's own FIFO semantics) and returns the best: exact, for problems of at most :data:`EXACT_MAX`
  placements (10 tasks on 4 devices is ~10^6).
* :func:`lower_bound` asks OR-Tools' CP-SAT for the shortest schedule of a relaxation: each task on one feasible
  device, durations ``compute / speed``, transfers ``delay + bytes / bandwidth`` between devices, one task at a time
  per device, in *any* order (the simulator's FIFO order is one of them). Every placement's simulated makespan is
  a schedule of that model, so the solver's best bound is a lower bound on the optimum; all durations are rounded
  *down* to integer ticks, which keeps it one. The bound is exact when the solver proves optimality within its
  time limit (``proved``).
* :func:`gap` is ``makespan / reference - 1``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.problem import PlacementProblem

#: Most placements :func:`exact_optimum` enumerates (4^10 is 1,048,576).
EXACT_MAX = 4**10 + 1
#: Most tasks :func:`lower_bound` models (its constraints grow with edges x devices^2).
BOUND_MAX_TASKS = 30
#: Placements simulated per batch.
BATCH = 1 << 16
#: Integer ticks the longest simulated makespan maps to in the CP-SAT model.
TICKS = 1_000_000


def placements_count(problem: PlacementProblem) -> int:
    """Number of feasible placements (the product of each task's feasible devices)."""
    return math.prod(int(k) for k in problem.mask.sum(axis=1))


def exact_optimum(problem: PlacementProblem) -> tuple[np.ndarray, float]:
    """The best placement under the simulator's semantics and its makespan, by enumerating every one.

    Args:
        problem: The problem; at most :data:`EXACT_MAX` feasible placements.

    Returns:
        ``(placement, makespan)``: the optimal placement, shape (num_tasks,) int64 device index per task, and its
        makespan in the graph's time unit.

    Raises:
        MlsysoptError: If the problem has too many feasible placements to enumerate.
    """
    total = placements_count(problem)
    if total > EXACT_MAX:
        raise MlsysoptError(
            f"{total:,} placements: too many to enumerate (at most {EXACT_MAX - 1:,}); use lower_bound instead"
        )
    options = [np.flatnonzero(row) for row in problem.mask]
    radix = np.array([o.size for o in options], np.int64)
    n = problem.num_tasks
    best_ms, best = np.inf, np.zeros(n, np.int64)
    for lo in range(0, total, BATCH):
        code = np.arange(lo, min(lo + BATCH, total), dtype=np.int64)
        rows = np.empty((code.size, n), np.int64)
        for t in range(n):
            rows[:, t] = options[t][code % radix[t]]
            code //= radix[t]
        ms = problem.simulator.makespans(rows, check=False)
        k = int(np.argmin(ms))
        if ms[k] < best_ms:
            best_ms, best = float(ms[k]), rows[k].copy()
    return best, best_ms


@dataclass
class Bound:
    """A CP-SAT lower bound on the optimal makespan, and whether the solver proved it optimal."""

    value: float
    proved: bool
    solver_makespan: float | None  # the best schedule CP-SAT found in its (any-order) model, if any
    seconds: float


def lower_bound(
    problem: PlacementProblem, time_limit: float = 10.0, hint: np.ndarray | None = None, workers: int = 1
) -> Bound:
    """CP-SAT's lower bound on every placement's makespan (see the module docstring); ``hint``: a start placement.

    Needs OR-Tools (``ortools``).

    Args:
        problem: The problem; at most :data:`BOUND_MAX_TASKS` tasks.
        time_limit: Seconds the solver may take.
        hint: A start placement, shape (num_tasks,) int device index per task (also sets the horizon); None:
            the sum of every task's longest execution time does.
        workers: Solver threads.

    Returns:
        The bound (never below CP_MIN), whether the solver proved it optimal, the solver's best makespan in its
        relaxed model (None if none found) and the seconds it took.

    Raises:
        MlsysoptError: If the problem has more than :data:`BOUND_MAX_TASKS` tasks.
    """
    from ortools.sat.python import cp_model  # deferred: ortools loads only when an exact bound is asked for

    g, c, mask = problem.graph, problem.cluster, problem.mask
    n, d = mask.shape
    if n > BOUND_MAX_TASKS:
        raise MlsysoptError(f"{n} tasks: the CP-SAT bound models at most {BOUND_MAX_TASKS} tasks")
    upper = float(problem.makespan(hint)) if hint is not None else float(np.nansum(problem.exec_times.max(axis=1)))
    comm_all = g.edge_bytes[:, None, None] * c.inv_bandwidth[None] + c.delay[None]
    horizon_s = upper + float(comm_all.max(initial=0.0)) * max(g.num_edges, 1)
    if not np.isfinite(horizon_s) or horizon_s <= 0:
        return Bound(0.0, True, 0.0, 0.0)
    scale = TICKS / max(upper, 1e-300)
    dur = np.floor(problem.exec_times * scale).astype(np.int64)
    comm = np.floor(comm_all * scale).astype(np.int64)
    horizon = int(min(np.ceil(horizon_s * scale), 2**40))
    m = cp_model.CpModel()
    x = {(t, k): m.NewBoolVar(f"x{t}_{k}") for t in range(n) for k in np.flatnonzero(mask[t]).tolist()}
    s = [m.NewIntVar(0, horizon, f"s{t}") for t in range(n)]
    e = [m.NewIntVar(0, horizon, f"e{t}") for t in range(n)]
    per_device: list[list] = [[] for _ in range(d)]
    for t in range(n):
        devs = np.flatnonzero(mask[t]).tolist()
        m.AddExactlyOne(x[t, k] for k in devs)
        m.Add(e[t] == s[t] + sum(int(dur[t, k]) * x[t, k] for k in devs))
        for k in devs:
            per_device[k].append(m.NewOptionalFixedSizeIntervalVar(s[t], int(dur[t, k]), x[t, k], f"i{t}_{k}"))
    for k in range(d):
        if len(per_device[k]) > 1:
            m.AddNoOverlap(per_device[k])
    src, dst = g.edge_index
    for j, (u, v) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)):
        m.Add(s[v] >= e[u])
        for a, b in itertools.product(np.flatnonzero(mask[u]).tolist(), np.flatnonzero(mask[v]).tolist()):
            if a != b and comm[j, a, b] > 0:
                m.Add(s[v] >= e[u] + int(comm[j, a, b])).OnlyEnforceIf([x[u, a], x[v, b]])
    makespan = m.NewIntVar(0, horizon, "makespan")
    m.AddMaxEquality(makespan, e)
    m.Minimize(makespan)
    if hint is not None:
        for (t, k), var in x.items():
            m.AddHint(var, int(hint[t] == k))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_search_workers = int(workers)
    solver.parameters.random_seed = 0
    status = solver.Solve(m)
    seconds = float(solver.WallTime())
    bound = max(float(solver.BestObjectiveBound()) / scale, problem.cp_min)  # CP_MIN is a bound too
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Bound(bound, False, None, seconds)
    return Bound(bound, status == cp_model.OPTIMAL, float(solver.ObjectiveValue()) / scale, seconds)


def gap(makespan: float, reference: float) -> float:
    """Relative gap ``makespan / reference - 1`` (0 when both are 0)."""
    if reference <= 0:
        return 0.0 if makespan <= 0 else float("inf")
    return float(makespan / reference - 1.0)
