"""GiPH at inference: policy-guided search from a start placement, and re-placement after cluster changes.

``GiPH(policy).place(graph, cluster, budget, seed, init)`` runs the trained policy for ``budget`` simulator
evaluations (the start placement's included), sampling one relocation per step, and keeps the best placement
seen. By default the policy proposes each move from the best placement so far; a move that does not lower the
makespan is evaluated, dropped, and not proposed again from that placement (policy-guided local search).
``walk=True`` follows every move instead, as the training episodes do (GiPH's plain rollout); the benchmark
reports both. ``adapt`` re-places after devices were added or removed, with the same policy (no retraining):
tasks whose device disappeared are parked on their fastest feasible device, and the policy's first moves are
restricted to them, so they are moved first; the rest of the budget is free search.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import check_placement
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Evaluator, PlacementResult, Placer, SearchContext
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.policy import GiPHPolicy
from mlsysopt.placement.state import PlacementState
from mlsysopt.runtime.threads import torch_threads


class GiPH(Placer):
    """The learned placement policy used as a search method (one interface with the baselines)."""

    name = "giph"

    def __init__(self, policy: GiPHPolicy, greedy: bool = False, walk: bool = False) -> None:
        self.policy = policy.eval()
        self.greedy = greedy
        self.walk = walk or greedy  # greedy proposals from a fixed best placement would repeat themselves

    @classmethod
    def load(cls, path: str | Path = "pretrained", greedy: bool = False, walk: bool = False) -> GiPH:
        """A GiPH placer from a training checkpoint, or ``"pretrained"``: the policy shipped with mlsysopt."""
        from mlsysopt.placement.checkpoint import load_policy

        return cls(load_policy(path), greedy=greedy, walk=walk)

    def search(self, ctx: SearchContext) -> None:
        """Policy-guided search from ``init`` (or a random feasible placement) within the budget."""
        start = ctx.problem.random_placement(ctx.rng) if ctx.init is None else ctx.init
        self._improve(ctx.problem, ctx.evaluate, start, ctx.seed, first=None)

    def adapt(
        self,
        graph: CompGraph,
        old_cluster: DeviceCluster,
        new_cluster: DeviceCluster | PlacementProblem,
        placement: np.ndarray,
        budget: int | None = None,
        seed: int = 0,
        timeout: float | None = None,
    ) -> PlacementResult:
        """Re-place ``placement`` (on ``old_cluster``) onto ``new_cluster``, moving orphaned tasks first.

        ``new_cluster`` may be given as its PlacementProblem (one problem for several re-placements);
        ``timeout`` (seconds of wall clock) stops the search before the budget is spent.
        """
        problem = PlacementProblem.of(graph, new_cluster)
        start, orphans = carry_over(graph, old_cluster, problem, placement)
        evaluator = Evaluator(problem, budget, timeout)
        evaluator.run(lambda: self._improve(problem, evaluator, start, seed, first=orphans))
        return evaluator.result(self.name)

    def _improve(
        self, problem: PlacementProblem, ev: Evaluator, start: np.ndarray, seed: int, first: np.ndarray | None
    ) -> None:
        placement = start.copy()
        state = PlacementState(GpNetBuilder(problem), placement, ev.schedule(placement))
        gen = torch.Generator().manual_seed(seed)
        pending = [] if first is None else list(first)
        with torch_threads(1):
            self._loop(ev, gen, state, pending)

    def _loop(self, ev: Evaluator, gen: torch.Generator, state: PlacementState, pending: list[int]) -> None:
        rejected = torch.zeros(state.builder.num_nodes, dtype=torch.bool)  # moves already tried from this placement
        while ev.remaining > 0:
            gp = state.gpnet
            restrict = None
            if pending:
                restrict = torch.as_tensor(np.isin(gp.task, pending)) & gp.action_mask
                if not bool(restrict.any()):
                    pending, restrict = [], None
            if restrict is None and not self.walk and bool((gp.action_mask & ~rejected).any()):
                restrict = ~rejected
            with torch.no_grad():
                dist = self.policy.distribution(gp, restrict)
                action = (
                    int(dist.probs.argmax())
                    if self.greedy
                    else int(torch.multinomial(dist.probs, 1, generator=gen).item())
                )
            task, candidate = state.relocate(action, ev.schedule)
            forced = task in pending  # an orphan's move is always taken
            if forced:
                pending.remove(task)
            if self.walk or forced or candidate.makespan < state.makespan:
                state = candidate
                rejected = torch.zeros_like(rejected)
            else:
                rejected[action] = True


def carry_over(
    graph: CompGraph, old: DeviceCluster, new: DeviceCluster | PlacementProblem, placement: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Map a placement onto a changed cluster by device name; orphaned tasks go to their fastest feasible device.

    ``new`` is the changed cluster, or its PlacementProblem (whose feasibility mask is then reused).
    Returns the new placement and the ids of the orphaned tasks (device removed, or no longer feasible).
    """
    placement = check_placement(graph, old, placement)
    problem = PlacementProblem.of(graph, new)
    new, mask = problem.cluster, problem.mask
    index = {name: i for i, name in enumerate(new.names)}
    mapped = np.array([index.get(old.names[d], -1) for d in placement], dtype=np.int64)
    ok = mapped >= 0
    ok[ok] = mask[np.flatnonzero(ok), mapped[ok]]
    orphans = np.flatnonzero(~ok)
    fastest = np.argmax(np.where(mask, new.speed[None, :], -np.inf), axis=1)
    mapped[orphans] = fastest[orphans]
    return problem.check(mapped), orphans
