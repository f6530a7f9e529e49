"""The one placement interface: ``Placer.place(graph, cluster, budget, seed, init)`` and the evaluation budget.

``place`` is a template method: it builds the :class:`~mlsysopt.graph.problem.PlacementProblem` (graph and
cluster validated once), the :class:`Evaluator` (the budget) and checks ``init``, then calls the method's own
:meth:`Placer.search` hook, which spends evaluations through the evaluator; the best placement seen is the result.

The budget counts simulator evaluations; an optional wall-clock ``timeout`` (seconds) stops a search earlier:
once it has passed, the evaluator refuses further evaluations (:class:`TimeUp`) and the search ends with the best
placement seen (at least the first evaluation always runs). ``PlacementResult.stopped_by`` says which ended it.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import placement_to_dict
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule


class BudgetExhausted(MlsysoptError):
    """A placer asked the simulator for more evaluations than its budget allows."""


class TimeUp(BudgetExhausted):
    """A placer asked for an evaluation after its wall-clock timeout had passed (the search stops there)."""


@dataclass
class PlacementResult:
    """What every placer returns: the best placement found and how the search got there.

    Args:
        placement: Device id of every task in the best placement found.
        makespan: Its simulated makespan, in the graph's time unit (seconds for real units).
        method: Name of the method that found it.
        evaluations: Simulator evaluations spent.
        history: Best makespan after each simulator evaluation.
        stopped_by: ``budget`` (evaluations spent, or the method was done) or ``timeout``.
        info: What the method reports besides (e.g. a SAGA scheduler's own makespan).
        execution: The semantics the makespan was simulated in: ``fifo`` or ``ordered``.
        order: Under ``ordered`` execution, the schedule's task order (per device, the order it runs its tasks;
            the method's own when it made one, e.g. HEFT's, else re-derived by upward rank and insertion); None
            under ``fifo``.
        elapsed: Seconds of wall clock from the start of the search after each evaluation (beside ``history``).

    Shapes:
        placement: (num_tasks,) int64 device index per task
        order: (num_tasks,) int64 task ids
    """

    placement: np.ndarray
    makespan: float
    method: str
    evaluations: int
    history: list[float] = field(default_factory=list)  # best makespan after each simulator evaluation
    stopped_by: str = "budget"  # "budget" (evaluations spent, or the method was done) or "timeout"
    info: dict[str, Any] = field(default_factory=dict)  # what the method reports besides (saga's makespan, ...)
    execution: str = "fifo"
    order: np.ndarray | None = None
    elapsed: list[float] = field(default_factory=list)

    @property
    def steps_to_best(self) -> int:
        """Evaluations used until the final best makespan was first reached."""
        if not self.history:
            return 0
        return int(np.argmax(np.asarray(self.history) <= self.makespan)) + 1

    def to_dict(self, graph: CompGraph, cluster: DeviceCluster) -> dict[str, Any]:
        """JSON-ready dict with task and device names."""

        return {
            "method": self.method,
            "makespan": float(self.makespan),
            "evaluations": self.evaluations,
            "steps_to_best": self.steps_to_best,
            "history": [float(v) for v in self.history],
            "stopped_by": self.stopped_by,
            "execution": self.execution,
            "placement": placement_to_dict(graph, cluster, self.placement),
            **({"info": self.info} if self.info else {}),
        }


class Evaluator:
    """Counts simulator evaluations against a budget (and a wall-clock timeout) and tracks the best placement seen.

    Args:
        problem: the validated problem.
        budget: simulator evaluations (default :func:`default_budget`).
        timeout: seconds of wall clock from now; None: no time limit. The first evaluation always runs.
    """

    def __init__(self, problem: PlacementProblem, budget: int | None, timeout: float | None = None) -> None:
        self.problem = problem
        self.simulator = problem.simulator
        self.budget = default_budget(problem.graph) if budget is None else int(budget)
        if self.budget < 1:
            raise MlsysoptError(f"budget must be >= 1 simulator evaluation, got {self.budget}")
        if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
            raise MlsysoptError(f"timeout must be a finite number of seconds > 0, got {timeout}")
        self.deadline = None if timeout is None else time.monotonic() + float(timeout)
        self.started = time.perf_counter()  # for ``elapsed`` (the deadline reads the monotonic clock)
        self.timed_out = False
        self.history: list[float] = []
        self.elapsed: list[float] = []
        self.best_makespan = float("inf")
        self.best_placement: np.ndarray | None = None
        self.best_order: np.ndarray | None = None
        self.ordered = problem.execution == "ordered"

    @property
    def remaining(self) -> int:
        """Evaluations left (0 once the timeout has passed)."""
        left = self.budget - len(self.history)
        if left > 0 and self.deadline is not None and self.history and time.monotonic() >= self.deadline:
            self.timed_out = True
            return 0
        return left

    def __call__(self, placement: np.ndarray, order: np.ndarray | None = None) -> float:
        """Makespan of ``placement`` (one evaluation); remembers it if it is the best so far.

        Args:
            placement: Device id of every task.
            order: The method's own schedule order (HEFT's, a saga scheduler's): under ``ordered`` execution the
                placement runs in it; under ``fifo`` it is ignored (a dataflow runtime has no order).

        Returns:
            The makespan, in the graph's time unit.
        """
        self._spend()
        order = order if self.ordered else None
        return self._record(placement, self.simulator.makespan(placement, order=order), order)

    def batch(self, placements: np.ndarray) -> np.ndarray:
        """Makespans of a batch of placements, shape (B, tasks) -> (B,), one evaluation each, in one simulator call.

        Only the first :attr:`remaining` rows are evaluated when the budget (or the time) does not cover them all;
        the result is then shorter.
        """
        left = self._spend()  # read once: the deadline can pass between two reads, which left an empty batch
        rows = np.ascontiguousarray(placements, dtype=np.int64)[:left]
        ms = self.simulator.makespans(rows)
        for row, value in zip(rows, ms, strict=True):
            self._record(row, float(value))
        return ms

    def schedule(self, placement: np.ndarray) -> Schedule:
        """Full schedule of ``placement`` (one evaluation, for methods that read start times)."""
        self._spend()
        sched = self.simulator.run(placement)
        self._record(placement, sched.makespan)
        return sched

    def _spend(self) -> int:
        left = self.remaining
        if left <= 0:
            if self.timed_out:
                raise TimeUp(f"the timeout passed after {len(self.history)} simulator evaluations")
            raise BudgetExhausted(f"budget of {self.budget} simulator evaluations is used up")
        return left

    def _record(self, placement: np.ndarray, ms: float, order: np.ndarray | None = None) -> float:
        if ms < self.best_makespan:
            self.best_makespan = ms
            self.best_placement = np.array(placement, dtype=np.int64)
            self.best_order = None if order is None else np.array(order, dtype=np.int64)
        self.history.append(self.best_makespan)
        self.elapsed.append(time.perf_counter() - self.started)
        return ms

    def result(self, method: str, info: dict[str, Any] | None = None) -> PlacementResult:
        """The best placement seen, as a PlacementResult (``info``: what the method reports besides)."""
        if self.best_placement is None:
            raise MlsysoptError(f"{method} evaluated no placement")
        stopped = "timeout" if self.timed_out else "budget"
        order = self.best_order
        if self.ordered and order is None:
            order = self.simulator.order(self.best_placement)
        return PlacementResult(
            self.best_placement,
            self.best_makespan,
            method,
            len(self.history),
            list(self.history),
            stopped,
            info or {},
            self.problem.execution,
            order,
            list(self.elapsed),
        )

    def run(self, search: Callable[[], None]) -> None:
        """Call ``search()``; a :class:`TimeUp` it raises ends it quietly (the best placement so far stands)."""
        try:
            search()
        except TimeUp:
            self.timed_out = True


#: The default budget: BUDGET_PER_TASK evaluations per task, at least BUDGET_MIN, at most BUDGET_MAX.
BUDGET_PER_TASK, BUDGET_MIN, BUDGET_MAX = 10, 100, 20_000


def default_budget(graph: CompGraph) -> int:
    """The default (and the benchmark's equal) budget: 10·|V| simulator evaluations, within [100, 20,000].

    GiPH's paper gave each episode 2·|V| relocations; a search that starts from a portfolio of heuristics needs
    room beyond their evaluations, and the simulator is fast (a few µs per task and evaluation).

    Args:
        graph: The graph to place.

    Returns:
        ``10 * graph.num_nodes`` clipped to [100, 20,000].
    """
    return int(min(max(BUDGET_PER_TASK * graph.num_nodes, BUDGET_MIN), BUDGET_MAX))


@dataclass
class SearchContext:
    """What a placer's search hook works with: the validated problem, the budget, its random stream, the start.

    Args:
        problem: The validated placement problem.
        evaluate: The evaluator: call it on a placement for its makespan (one evaluation each); it keeps the best.
        rng: The method's random stream, seeded with ``seed``.
        seed: The seed, for methods with a second random stream (GiPH's torch sampling).
        init: A checked start placement (a copy the method may change), or None.
        info: The method's report, copied into the result's ``info``.

    Shapes:
        init: (num_tasks,) int64 device index per task
    """

    problem: PlacementProblem
    evaluate: Evaluator  # call it on a placement for its makespan (one evaluation each); it keeps the best
    rng: np.random.Generator  # the method's random stream, seeded with ``seed``
    seed: int  # for methods with a second random stream (GiPH's torch sampling)
    init: np.ndarray | None  # a checked start placement (a copy the method may change), or None
    info: dict[str, Any] = field(default_factory=dict)  # the method's report, copied into the result


class Placer(ABC):
    """A placement method. Implementations live one per file and share this interface.

    Subclasses set :attr:`name` and implement :meth:`search`; callers use :meth:`place` (or :meth:`solve`).

    The base class takes no arguments; each method's constructor documents its own.
    """

    name: str = "placer"

    def place(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
        timeout: float | None = None,
        execution: str = "fifo",
    ) -> PlacementResult:
        """Best placement found with at most ``budget`` simulator evaluations (default :func:`default_budget`).

        ``init`` is a start placement for methods that improve one (checked, then ignored by constructive methods);
        ``timeout`` (seconds of wall clock) stops the search earlier.

        Args:
            graph: The graph to place.
            cluster: The devices to place it on.
            budget: Most simulator evaluations (>= 1); None: :func:`default_budget`.
            seed: Seed of the method's random stream.
            init: Start placement, shape (num_tasks,) int device index per task, or None.
            timeout: Wall-clock seconds (> 0) after which the search stops with the best placement so far; None:
                no limit.
            execution: ``fifo`` (devices run ready tasks in arrival order) or ``ordered`` (each device runs a
                static schedule's order); see :mod:`mlsysopt.graph.list_schedule`.

        Returns:
            The best placement found, its makespan and the search history.

        Raises:
            ConstraintViolation: If some task can run on no device, or ``init`` breaks a hardware constraint.
            InvalidCluster: If the cluster's speeds or bandwidths are too small for the graph (times overflow).
            InvalidOption: If the problem is too big for this machine's memory.
            InvalidPlacement: If ``init`` has the wrong shape or device ids.
            MlsysoptError: If ``budget`` is below 1 or ``timeout`` is not a positive finite number.
            InvalidOption: If ``execution`` is neither ``fifo`` nor ``ordered``.
        """
        return self.solve(PlacementProblem(graph, cluster, execution), budget, seed, init, timeout)

    def solve(
        self,
        problem: PlacementProblem,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
        timeout: float | None = None,
    ) -> PlacementResult:
        """:meth:`place` on a problem that is already built (one problem serves many searches)."""
        evaluator = Evaluator(problem, budget, timeout)
        start = None if init is None else problem.check(init).copy()
        ctx = SearchContext(problem, evaluator, np.random.default_rng(seed), seed, start)
        evaluator.run(lambda: self.search(ctx))
        return evaluator.result(self.name, ctx.info)

    @abstractmethod
    def search(self, ctx: SearchContext) -> None:
        """Spend ``ctx.evaluate``'s budget on placements of ``ctx.problem``; the evaluator keeps the best one."""
