"""Picklable units of placement work for ``mlsysopt.runtime`` executors: one search, one re-placement.

``compare`` runs every (method, seed) pair and ``adapt`` every GiPH seed as one task; executors (serial, a local
process pool, Ray) call :func:`run_search` and :func:`run_adapt` by name on their workers. A task is plain data
(the graph, the clusters, a start placement and the policy as its config and weights), so the same task gives the
same result wherever it runs: each search is a pure function of its problem, budget and seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import PlacementResult
from mlsysopt.placement.baselines.saga_schedulers import SagaFailed, SagaSkipped
from mlsysopt.placement.methods import run_method
from mlsysopt.placement.move_search import SearchConfig

if TYPE_CHECKING:
    from mlsysopt.placement.giph import GiPH


@dataclass(frozen=True)
class PolicySpec:
    """A GiPH placer as plain data: the policy's config and weights, and how it searches.

    Build one with :meth:`of`; :meth:`placer` turns it back into a :class:`~mlsysopt.placement.GiPH`.

    Args:
        config: The policy's :class:`~mlsysopt.placement.PolicyConfig` as a dict.
        state: The policy's ``state_dict`` (CPU tensors).
        greedy: (paper mode) always take the policy's top move.
        walk: (paper mode) follow every move, as training episodes do.
        paper: The paper's search instead of the portfolio local search.
        search: The local search's knobs (None: :class:`~mlsysopt.placement.SearchConfig` defaults).
        refresh: The policy scores every ``refresh``-th placement the search moves to.
    """

    config: dict[str, Any]
    state: dict[str, Any]
    greedy: bool = False
    walk: bool = False
    paper: bool = False
    search: SearchConfig | None = None
    refresh: int = 1

    @classmethod
    def of(cls, giph: GiPH) -> PolicySpec:
        """The spec of a GiPH placer (weights copied to CPU tensors)."""
        state = {k: v.detach().cpu().clone() for k, v in giph.policy.state_dict().items()}
        return cls(giph.policy.config.to_dict(), state, giph.greedy, giph.walk, giph.paper, giph.config, giph.refresh)

    def placer(self) -> GiPH:
        """The GiPH placer again."""
        # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
        from mlsysopt.placement.giph import GiPH

        # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
        from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

        policy = GiPHPolicy(PolicyConfig(**self.config))
        policy.load_state_dict(self.state)
        return GiPH(
            policy, greedy=self.greedy, walk=self.walk, paper=self.paper, config=self.search, refresh=self.refresh
        )


@dataclass(frozen=True)
class SearchTask:
    """One search of :func:`~mlsysopt.placement.methods.run_method`: method, problem, budget, seed.

    Args:
        method: A method name of :data:`~mlsysopt.placement.METHODS`.
        graph: The graph to place.
        cluster: The devices to place it on.
        budget: Most simulator evaluations.
        seed: Seed of the search.
        policy: The GiPH policy, for the methods that need one (None otherwise).
        timeout: Wall-clock seconds after which the search stops; None: no limit.
        execution: ``fifo`` or ``ordered`` (see :class:`~mlsysopt.graph.problem.PlacementProblem`).
    """

    method: str
    graph: CompGraph
    cluster: DeviceCluster
    budget: int
    seed: int
    policy: PolicySpec | None = None
    timeout: float | None = None
    execution: str = "fifo"


@dataclass(frozen=True)
class AdaptTask:
    """One GiPH re-placement after a cluster change (``GiPH.adapt``) with one seed.

    Args:
        graph: The placed graph.
        old: The cluster before the change.
        new: The cluster after the change.
        placement: The placement on ``old``, shape (num_tasks,) int device index per task.
        policy: The GiPH policy and its search settings.
        budget: Most simulator evaluations (None: the default budget).
        seed: Seed of the search.
        timeout: Wall-clock seconds after which the search stops; None: no limit.
    """

    graph: CompGraph
    old: DeviceCluster
    new: DeviceCluster
    placement: np.ndarray
    policy: PolicySpec
    budget: int | None
    seed: int
    timeout: float | None = None


def run_search(task: SearchTask) -> tuple[PlacementResult | str, float]:
    """Run one search task; its result (or why a saga scheduler could not run) and its seconds of wall clock.

    Args:
        task: The search to run.

    Returns:
        ``(result, seconds)``: the :class:`~mlsysopt.placement.PlacementResult`, or a message when a saga scheduler
        was skipped or failed; and the wall-clock seconds the task took.

    Raises:
        MlsysoptError: If the method is unknown, needs a policy that is not given, or the problem is invalid
            (see :meth:`~mlsysopt.placement.Placer.place`).
    """

    t0 = time.perf_counter()
    giph = None if task.policy is None else task.policy.placer()
    problem = PlacementProblem(task.graph, task.cluster, task.execution)
    try:
        result: PlacementResult | str = run_method(
            task.method, problem, task.budget, task.seed, giph, timeout=task.timeout
        )
    except (SagaFailed, SagaSkipped) as exc:
        result = str(exc)
    return result, time.perf_counter() - t0


def run_adapt(task: AdaptTask) -> PlacementResult:
    """Run one re-placement task (``GiPH.adapt`` of ``task.placement`` onto ``task.new``).

    Args:
        task: The re-placement to run.

    Returns:
        The best placement found on ``task.new``.

    Raises:
        InvalidPlacement: If ``task.placement`` is not a valid placement on ``task.old``.
    """
    giph = task.policy.placer()
    return giph.adapt(task.graph, task.old, task.new, task.placement, task.budget, task.seed, task.timeout)
