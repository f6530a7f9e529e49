"""The field's DAG schedulers from saga (PyPI ``anrg-saga``) as placers, and ``saga_best``, the best of them.

Each saga scheduler runs on the problem converted by :mod:`mlsysopt.placement.saga_convert` (delay folded into
effective link speeds, hardware types repaired afterwards); its task -> device map is evaluated once in
mlsysopt's simulator (that makespan is the result), and saga's own makespan (its model of the same problem) is
reported beside it in ``result.info``. saga's exponential schedulers (brute force, SMT, and DPS, whose priorities
recurse over every path of the graph) and its hybrid (a portfolio, which ``saga_best`` is) are left out
(:data:`LEFT_OUT`).

saga's schedulers are pure Python; several are quadratic in the number of tasks (a 1,000-task workflow on 8
devices takes MinMin about a minute here). Each has a run-time estimate (:data:`SAGA_SCHEDULERS`, calibrated on
this machine) and a scheduler estimated above ``time_limit`` seconds is skipped with a :class:`SagaSkipped` that
says so, instead of running for minutes: the estimate, not the clock, decides, so results do not depend on load.
Results of one (graph, cluster, scheduler) are kept for the graph's lifetime, so ``saga_best`` after the single
schedulers (as ``compare`` runs them) does not schedule twice.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Placer, SearchContext

#: Default limit on one scheduler's estimated run time (seconds).
TIME_LIMIT_S = 20.0


@dataclass(frozen=True)
class SagaSpec:
    """One saga scheduler: its class, what it does, and its run-time model ``coef * tasks**power * devices``."""

    cls: str
    about: str
    coef: float
    power: float

    def estimate(self, tasks: int, devices: int) -> float:
        """Estimated seconds on this machine for a graph of ``tasks`` tasks on ``devices`` devices."""
        return self.coef * float(tasks) ** self.power * devices


#: saga's schedulers by method name (``saga_<name>``), in the order ``saga_best`` tries them (cheap and strong
#: first). Run-time models fitted to montage workflows of 291 and 994 tasks on 8 devices (through the converter's
#: memoized look-ups), measured on this machine's 2 cores while they were shared: conservative on a quiet one.
SAGA_SCHEDULERS: dict[str, SagaSpec] = {
    "heft": SagaSpec("HeftScheduler", "saga's HEFT (upward rank, insertion, earliest finish)", 3.3e-5, 1.2),
    "cpop": SagaSpec(
        "CpopScheduler", "CPOP: critical-path tasks on one device, the rest by earliest finish", 5.9e-8, 2.2
    ),
    "mct": SagaSpec("MCTScheduler", "minimum completion time, tasks in topological order", 4.1e-6, 1.2),
    "olb": SagaSpec("OLBScheduler", "opportunistic load balancing: earliest-free device", 2.5e-6, 1.2),
    "fcp": SagaSpec("FCPScheduler", "fast critical path: a bounded choice of devices per task", 4.4e-6, 1.2),
    "flb": SagaSpec("FLBScheduler", "fast load balancing: earliest-start task-device pair", 5.8e-8, 2.0),
    "mst": SagaSpec("MSTScheduler", "minimum start time, tasks in topological order", 4.7e-6, 1.2),
    "met": SagaSpec("METScheduler", "minimum execution time: each task on its fastest device", 1.35e-6, 1.4),
    "bil": SagaSpec("BILScheduler", "best imaginary level (a lookahead list scheduler)", 5.6e-7, 2.0),
    "etf": SagaSpec("ETFScheduler", "earliest time first over every ready task-device pair", 1.2e-7, 2.0),
    "minmin": SagaSpec("MinMinScheduler", "MinMin: the ready task with the smallest completion first", 2.4e-8, 2.6),
    "maxmin": SagaSpec("MaxMinScheduler", "MaxMin: the ready task with the largest completion first", 2.7e-9, 3.0),
    "duplex": SagaSpec("DuplexScheduler", "the better of MinMin and MaxMin", 4.1e-9, 3.0),
    "sufferage": SagaSpec("SufferageScheduler", "the task that loses most without its best device first", 1.9e-6, 2.0),
    "wba": SagaSpec("WBAScheduler", "workflow-based allocation (randomized, seeded)", 1.1e-6, 2.1),
    "msbc": SagaSpec("MsbcScheduler", "multi-stage bottleneck clustering", 3.1e-7, 2.0),
    "gdl": SagaSpec("GDLScheduler", "generalized dynamic level", 1.3e-7, 2.3),
    "hbmct": SagaSpec("HbmctScheduler", "hybrid balanced minimum completion time", 1.3e-6, 2.0),
    "fastest_node": SagaSpec("FastestNodeScheduler", "every task on the fastest node (saga's)", 1.3e-6, 1.4),
}
#: saga's schedulers that are not run, and why.
LEFT_OUT: dict[str, str] = {
    "BruteForceScheduler": "exponential: enumerates every schedule",
    "SMTScheduler": "exponential: an SMT search over schedules",
    "HybridScheduler": "a portfolio of other schedulers (saga_best is that)",
    "DPSScheduler": "exponential: its priorities recurse over every path of the graph, unmemoized (6 minutes for a "
    "56-task transformer here)",
}


class SagaSkipped(MlsysoptError):
    """A saga scheduler that was not run on this problem (too slow by its estimate, or too many paths for DPS)."""


class SagaFailed(MlsysoptError):
    """A saga scheduler raised on this problem (a bug or a limit of saga's)."""


@dataclass(frozen=True)
class SagaRun:
    """One saga scheduler's outcome on one problem.

    Args:
        placement: Device id of every task.
        saga_makespan: saga's own makespan (its model), in the graph's time unit.
        repaired: Tasks moved to a feasible device or placed because the scheduler left them out.
        seconds: Wall-clock seconds the scheduler took.
        order: The schedule's task order (per device, the order saga planned).
        missing: Tasks the scheduler left out (> 0: an invalid schedule, never ranked).
    """

    placement: np.ndarray
    saga_makespan: float
    repaired: int
    seconds: float
    order: np.ndarray | None = None
    missing: int = 0

    @property
    def valid(self) -> bool:
        """Whether the schedule covers every task."""
        return self.missing == 0


# per graph: (cluster id, scheduler, seed) -> (the cluster, kept alive so that its id is not reused; the run). Keyed
# by graph and cluster, not by problem: the same problem under another execution semantics reuses saga's runs.
_RUNS: weakref.WeakKeyDictionary[Any, dict[tuple[int, str, int], tuple[Any, SagaRun]]] = weakref.WeakKeyDictionary()


def check_runnable(name: str, problem: PlacementProblem, time_limit: float | None) -> float:
    """The estimated seconds of saga scheduler ``name`` on ``problem``; SagaSkipped when it should not run."""
    est = SAGA_SCHEDULERS[name].estimate(problem.num_tasks, problem.num_devices)
    if time_limit is not None and est > time_limit:
        raise SagaSkipped(
            f"saga_{name}: estimated {est:.0f} s on {problem.num_tasks} tasks x {problem.num_devices} devices, over "
            f"the limit of {time_limit:g} s (saga's schedulers are pure Python; raise the limit to run it)"
        )
    return est


def saga_run(name: str, problem: PlacementProblem, seed: int = 0, time_limit: float | None = TIME_LIMIT_S) -> SagaRun:
    """Run saga scheduler ``name`` on ``problem`` (or reuse its earlier run); SagaSkipped / SagaFailed if not."""
    key = (id(problem.cluster), name, seed if name == "wba" else 0)  # only WBA draws random numbers
    runs = _RUNS.setdefault(problem.graph, {})
    if key in runs:
        return runs[key][1]
    check_runnable(name, problem, time_limit)
    import saga.schedulers  # deferred: saga (and networkx) load only when a saga scheduler runs

    # deferred: imports networkx, saga
    from mlsysopt.placement.saga_convert import from_saga, saga_context, to_saga

    network, task_graph = to_saga(problem)
    t0 = time.perf_counter()
    with saga_context(seed):
        try:
            schedule = getattr(saga.schedulers, SAGA_SCHEDULERS[name].cls)().schedule(network, task_graph)
        except Exception as exc:  # saga's own errors: report them as this method's failure, never a traceback
            raise SagaFailed(f"saga_{name} failed on this problem: {type(exc).__name__}: {exc}") from None
    seconds = time.perf_counter() - t0
    converted = from_saga(schedule, problem)
    run = SagaRun(
        converted.placement, converted.saga_makespan, converted.repaired, seconds, converted.order, converted.missing
    )
    runs[key] = (problem.cluster, run)
    return run


class SagaScheduler(Placer):
    """One saga scheduler: its task -> device map, evaluated once in mlsysopt's simulator.

    Args:
        scheduler: a key of :data:`SAGA_SCHEDULERS` (``heft``, ``cpop``, ...).
        time_limit: skip (SagaSkipped) when the estimated run time is above this many seconds; None: always run.
    """

    def __init__(self, scheduler: str, time_limit: float | None = TIME_LIMIT_S) -> None:
        if scheduler not in SAGA_SCHEDULERS:
            raise MlsysoptError(f"unknown saga scheduler '{scheduler}' (known: {', '.join(SAGA_SCHEDULERS)})")
        self.scheduler = scheduler
        self.name = f"saga_{scheduler}"
        self.time_limit = time_limit

    def search(self, ctx: SearchContext) -> None:
        """saga's schedule (``init`` is ignored); ``info`` gets saga's own makespan, the repaired and missing tasks.

        Under ``ordered`` execution the placement runs in saga's own order; under ``fifo`` its map runs with ready
        tasks in arrival order. A schedule that left tasks out is evaluated with them repaired and marked
        ``valid: false`` in ``info`` (its saga makespan covers part of the work).
        """
        run = saga_run(self.scheduler, ctx.problem, ctx.seed, self.time_limit)
        ctx.info.update(
            saga_makespan=run.saga_makespan,
            repaired_tasks=run.repaired,
            missing_tasks=run.missing,
            valid=run.valid,
            saga_seconds=run.seconds,
        )
        ctx.evaluate(run.placement, run.order)


class SagaBest(Placer):
    """The per-instance best of saga's *valid* schedules: each one evaluated (one evaluation each), best kept.

    A schedule that left tasks out (saga's HBMCT does on some workflows) is listed in ``info["skipped"]`` as
    invalid and never ranked. Under ``ordered`` execution each schedule runs in saga's own order.

    Args:
        time_limit: per scheduler, as :class:`SagaScheduler` (skipped ones are listed in ``info["skipped"]``).
        schedulers: which (default: every one of :data:`SAGA_SCHEDULERS`, in that order).
    """

    name = "saga_best"

    def __init__(self, time_limit: float | None = TIME_LIMIT_S, schedulers: tuple[str, ...] | None = None) -> None:
        self.time_limit = time_limit
        self.schedulers = tuple(SAGA_SCHEDULERS) if schedulers is None else tuple(schedulers)

    def search(self, ctx: SearchContext) -> None:
        """Every scheduler within the limit and the budget; ``info``: each one's makespans, the best, the skipped."""
        members: dict[str, dict[str, Any]] = {}
        skipped: dict[str, str] = {}
        ctx.info.update(members=members, skipped=skipped)
        best = (np.inf, "")
        for name in self.schedulers:
            if ctx.evaluate.remaining <= 0:
                skipped[name] = "the evaluation budget was used up"
                continue
            try:
                run = saga_run(name, ctx.problem, ctx.seed, self.time_limit)
            except (SagaSkipped, SagaFailed) as exc:
                skipped[name] = str(exc)
                continue
            if not run.valid:
                skipped[name] = f"invalid: its schedule left {run.missing} of {ctx.problem.num_tasks} tasks out"
                continue
            ms = ctx.evaluate(run.placement, run.order)
            members[name] = {
                "makespan": ms,
                "saga_makespan": run.saga_makespan,
                "repaired_tasks": run.repaired,
                "seconds": run.seconds,
            }
            if ms < best[0]:
                best = (ms, name)
                ctx.info["best"] = name
        ctx.info["saga_seconds"] = float(sum(m["seconds"] for m in members.values()))
        if not members:
            raise SagaSkipped(
                "saga_best: no saga scheduler could run on this problem (" + "; ".join(skipped.values()) + ")"
            )
