"""The registry of placement methods: every placer by name, and one search by name.

:data:`METHODS` lists the baselines, saga's schedulers and ``saga_best``, the plain hill climb, GiPH (the default:
portfolio start + policy-proposed local search) and the paper's GiPH from a random start, from HEFT's placement, and
as a plain walk; :func:`run_method` runs one of them on a :class:`~mlsysopt.graph.problem.PlacementProblem`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import PlacementResult
from mlsysopt.placement.baselines import get_baseline, heft_schedule
from mlsysopt.placement.baselines.saga_schedulers import SAGA_SCHEDULERS
from mlsysopt.registry import Registry

if TYPE_CHECKING:
    from mlsysopt.placement.giph import GiPH


@dataclass(frozen=True)
class Method:
    """A placement method by name: its label in tables, whether it needs a policy, whether ``compare`` runs it.

    Args:
        name: The method's name (``heft``, ``giph``, ``saga_cpop``, ...).
        label: Its name in tables and plots.
        needs_policy: Whether it needs a trained GiPH policy.
        default: Whether ``compare`` runs it when no methods are named.
        about: One line saying what it does.
    """

    name: str
    label: str
    needs_policy: bool = False
    default: bool = True
    about: str = ""


def _methods() -> list[Method]:

    saga = [Method(f"saga_{k}", f"saga {k}", about=f"saga: {spec.about}") for k, spec in SAGA_SCHEDULERS.items()]
    return [
        Method("heft", "heft", about="HEFT with insertion (one evaluation)"),
        Method("fastest_device", "fastest device", about="every task on the fastest device that runs it"),
        Method("random", "random", about="uniformly random feasible placements"),
        Method("annealing", "annealing", about="simulated annealing over single-task moves"),
        Method("eft_greedy", "eft_greedy", about="earliest-finish-time greedy over random topological orders"),
        *saga,
        Method("saga_best", "saga best", about="the best of saga's schedulers on this problem"),
        Method("local_search", "local search", about="GiPH's portfolio and local search, uniform proposals"),
        Method("giph", "GiPH", needs_policy=True, about="portfolio start + local search with the policy's proposals"),
        Method("giph_paper", "GiPH (paper)", True, about="the paper's GiPH search from a random placement"),
        Method("giph_from_heft", "GiPH (paper) from HEFT", True, about="the paper's GiPH search from HEFT's placement"),
        Method("giph_walk", "GiPH walk", True, default=False, about="GiPH following every move, as in training"),
    ]


#: Every placement method, in the order tables list them.
METHODS: Registry[Method] = Registry("method", {m.name: m for m in _methods()})
#: What ``placement place`` runs by default: GiPH's portfolio start and local search with *uniform* proposals. The
#: learned proposer (``giph``) stays a method, not the default: on the 24 validation problems it reached within 1% of
#: the final makespan in 0.67x the evaluations of uniform proposals (fifo; 0.81x ordered) but took 6.4x (2.0x) the
#: seconds and lost at 1 s of wall clock (1.006x both), so at a user's time budget it does not pay
#: (``benchmarks/results/placement_validation_anytime.json``, issue #31).
DEFAULT_METHOD = "local_search"


def get_method(name: str) -> Method:
    """The registered method ``name``; MlsysoptError listing the known names otherwise.

    Args:
        name: A key of :data:`METHODS`.

    Returns:
        The method's description.

    Raises:
        MlsysoptError: If ``name`` is not a registered method.
    """
    return METHODS.load(name)


def select_methods(names: Sequence[str] | None, have_policy: bool) -> tuple[list[str], list[str]]:
    """(methods to run, GiPH methods skipped for want of a policy); ``None`` means every default method.

    Methods named explicitly must all be runnable: one that needs a policy without one is an error.

    Args:
        names: Method names (duplicates dropped, order kept), or None for every default method.
        have_policy: Whether a GiPH policy is available.

    Returns:
        ``(to_run, skipped)``: the method names to run, and the GiPH methods left out of the defaults for want of a
        policy.

    Raises:
        MlsysoptError: If ``names`` is empty, holds an unknown name, or names a GiPH method without a policy.
    """
    if names is None:
        wanted = [m for m, spec in METHODS.items() if spec.default]
    else:
        wanted = list(dict.fromkeys(names))
        if not wanted:
            raise MlsysoptError(f"no method given (choose from: {', '.join(METHODS)})")
    needs = [m for m in wanted if get_method(m).needs_policy]
    if needs and not have_policy:
        if names is not None:
            raise MlsysoptError(f"method '{needs[0]}' needs a GiPH policy (--policy), or leave it out of the methods")
        return [m for m in wanted if m not in needs], needs
    return wanted, []


def run_method(
    method: str,
    problem: PlacementProblem,
    budget: int | None = None,
    seed: int = 0,
    giph: GiPH | None = None,
    init: np.ndarray | None = None,
    timeout: float | None = None,
) -> PlacementResult:
    """One search by name: ``giph`` the portfolio local search, ``giph_paper`` the paper's search from a random
    placement (or ``init``), ``giph_from_heft`` from HEFT's placement, ``giph_walk`` following every move.

    ``timeout`` (seconds of wall clock) ends the search before its budget is spent. saga's schedulers raise
    :class:`~mlsysopt.placement.baselines.SagaSkipped` where they would take too long.

    Args:
        method: A key of :data:`METHODS`.
        problem: The problem to solve.
        budget: Most simulator evaluations (None: the default budget).
        seed: Seed of the search.
        giph: The GiPH placer, for the methods that need a policy.
        init: Start placement for methods that improve one, shape (num_tasks,) int device index per task.
        timeout: Wall-clock seconds after which the search stops; None: no limit.

    Returns:
        The best placement found; its ``method`` is ``method``.

    Raises:
        MlsysoptError: If ``method`` is unknown or needs a policy and ``giph`` is None.
        SagaSkipped: If a saga scheduler would take too long on this problem.
        SagaFailed: If a saga scheduler fails on this problem.
    """
    spec = get_method(method)
    if not spec.needs_policy:
        return get_baseline(method).solve(problem, budget, seed, init, timeout)
    if giph is None:
        raise MlsysoptError(f"method '{method}' needs a GiPH policy (--policy)")
    if method == "giph":
        giph = giph.variant(paper=False, walk=False, greedy=False)
    elif method == "giph_walk":
        giph = giph.variant(walk=True)
    else:
        giph = giph.variant(paper=True, walk=False, greedy=False)
    if method == "giph_from_heft":
        init = heft_placement(problem)
    result = giph.solve(problem, budget, seed, init, timeout)
    result.method = method
    return result


def heft_placement(problem: PlacementProblem) -> np.ndarray:
    """HEFT's placement (no simulator evaluation).

    Args:
        problem: The problem to place.

    Returns:
        Device id of every task, shape (num_tasks,) int64.
    """

    return heft_schedule(problem)[0]


#: What "HEFT" means in each execution semantics (every ratio to HEFT says which).
HEFT_REFERENCE = {
    "fifo": "HEFT's map run FIFO (each device runs ready tasks in arrival order)",
    "ordered": "HEFT's own schedule (its map and insertion order)",
}


def heft_makespan(problem: PlacementProblem) -> float:
    """HEFT's makespan in the problem's execution semantics: the reference of every ratio to HEFT.

    Under ``ordered`` execution it is HEFT's own schedule (its planned makespan: the map run in its insertion
    order); under ``fifo`` HEFT's map runs with each device taking ready tasks in arrival order.

    Args:
        problem: The problem to place.

    Returns:
        The makespan, in the graph's time unit.
    """

    placement, order, _ = heft_schedule(problem)
    return problem.makespan(placement, order=order if problem.execution == "ordered" else None)
