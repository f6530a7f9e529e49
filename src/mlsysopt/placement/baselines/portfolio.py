"""The portfolio GiPH starts from: HEFT, all on the fastest feasible device, CPOP and the best of saga's schedulers.

Under ``ordered`` execution each member is evaluated as its own schedule (HEFT's and each saga scheduler's order,
insertion included), and a saga schedule that left tasks out is skipped as invalid.

:func:`run_portfolio` evaluates each member's placement once (one evaluation each, identical placements once) and
returns them best first: the local search starts from the first and restarts from the next when it is stuck, so
GiPH's result is never worse than the best member. saga's schedulers run within a time limit (their run-time
estimate, see :mod:`mlsysopt.placement.baselines.saga_schedulers`), also bounded by what is left of the search's
wall-clock timeout; the ones that do not fit are listed as skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Evaluator
from mlsysopt.placement.baselines.fastest_device import fastest_placement
from mlsysopt.placement.baselines.heft import heft_schedule
from mlsysopt.placement.baselines.saga_schedulers import (
    SAGA_SCHEDULERS,
    TIME_LIMIT_S,
    SagaFailed,
    SagaSkipped,
    check_runnable,
    saga_run,
)

#: The members, in the order they are evaluated. ``saga_best`` stands for every other saga scheduler.
PORTFOLIO: tuple[str, ...] = ("heft", "fastest_device", "saga_cpop", "saga_best")
#: The share of a search's wall-clock timeout the saga members may take (the rest is GiPH's).
SAGA_TIME_SHARE = 0.3
#: Estimated seconds all saga members of one portfolio may take together (a scheduler that would go over it is
#: skipped; see each scheduler's run-time estimate in ``SAGA_SCHEDULERS``).
SAGA_TOTAL_S = 10.0


@dataclass
class Portfolio:
    """The evaluated members: (name, placement, makespan) best first, each member's makespan, what was skipped."""

    starts: list[tuple[str, np.ndarray, float]] = field(default_factory=list)
    makespans: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    saga_best: str | None = None  # which saga scheduler was saga_best's

    @property
    def best(self) -> str:
        """Name of the best member."""
        return self.starts[0][0]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: each member's makespan, the best, saga_best's scheduler, the skipped ones and why."""
        return {
            "makespans": self.makespans,
            "best": self.best if self.starts else None,
            "saga_best_scheduler": self.saga_best,
            "skipped": self.skipped,
        }


def run_portfolio(
    problem: PlacementProblem,
    evaluate: Evaluator,
    seed: int = 0,
    members: tuple[str, ...] = PORTFOLIO,
    saga_time_limit: float | None = None,
    saga_total: float = SAGA_TOTAL_S,
) -> Portfolio:
    """Evaluate the portfolio's members on ``problem`` through ``evaluate`` (stops when its budget is spent).

    Args:
        saga_time_limit: estimated seconds one saga scheduler may take (default: saga_schedulers.TIME_LIMIT_S).
        saga_total: estimated seconds all saga members may take together.
    """

    out = Portfolio()
    seen: dict[bytes, float] = {}
    limit = TIME_LIMIT_S if saga_time_limit is None else saga_time_limit
    t0 = time.monotonic()
    budget_s = None if evaluate.deadline is None else SAGA_TIME_SHARE * (evaluate.deadline - t0)

    ordered = problem.execution == "ordered"

    def add(name: str, placement: np.ndarray, order: np.ndarray | None = None) -> float | None:
        # under ordered execution a member is its own schedule (map and order), evaluated as its method made it
        key = placement.tobytes() + (order.tobytes() if ordered and order is not None else b"")
        if key not in seen:
            if evaluate.remaining <= 0:
                out.skipped[name] = "the evaluation budget was used up"
                return None
            seen[key] = evaluate(placement, order)
            out.starts.append((name, placement, seen[key]))
        out.makespans[name] = seen[key]
        return seen[key]

    spent = [0.0]  # estimated seconds of the saga members run so far

    def saga(name: str) -> tuple[np.ndarray, np.ndarray | None] | None:
        left = min(limit, saga_total - spent[0])
        if budget_s is not None:
            left = min(left, budget_s - (time.monotonic() - t0))
        try:
            est = check_runnable(name, problem, max(left, 0.0))
            run = saga_run(name, problem, seed, None)
        except (SagaSkipped, SagaFailed) as exc:
            out.skipped[f"saga_{name}"] = str(exc)
            return None
        spent[0] += est
        if not run.valid:
            out.skipped[f"saga_{name}"] = f"invalid: its schedule left {run.missing} of {problem.num_tasks} tasks out"
            return None
        return run.placement, run.order

    for member in members:
        if member == "heft":
            placement, order, _ = heft_schedule(problem)
            add("heft", placement, order)
        elif member == "fastest_device":
            add("fastest_device", fastest_placement(problem))
        elif member == "saga_best":
            best = np.inf
            for name in SAGA_SCHEDULERS:
                if f"saga_{name}" in members:
                    continue
                sched = saga(name)
                ms = None if sched is None else add(f"saga_{name}", *sched)
                if ms is not None and ms < best:
                    best, out.saga_best = ms, f"saga_{name}"
            if "saga_cpop" in out.makespans and out.makespans["saga_cpop"] <= best:
                best, out.saga_best = out.makespans["saga_cpop"], "saga_cpop"
            if np.isfinite(best):
                out.makespans["saga_best"] = float(best)
        elif member.startswith("saga_"):
            sched = saga(member[5:])
            if sched is not None:
                add(member, *sched)
    out.starts.sort(key=lambda s: s[2])
    return out
