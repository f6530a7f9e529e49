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
from mlsysopt.graph.placement import check_placement, random_placement
from mlsysopt.graph.simulator import Schedule
from mlsysopt.placement.base import Evaluator, PlacementResult, Placer
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.policy import GiPHPolicy
from mlsysopt.runtime.threads import torch_threads


class GiPH(Placer):
    """The learned placement policy used as a search method (one interface with the baselines)."""

    name = "giph"

    def __init__(self, policy: GiPHPolicy, greedy: bool = False, walk: bool = False) -> None:
        self.policy = policy.eval()
        self.greedy = greedy
        self.walk = walk or greedy  # greedy proposals from a fixed best placement would repeat themselves

    @classmethod
    def load(cls, path: str | Path, greedy: bool = False, walk: bool = False) -> GiPH:
        """A GiPH placer from a training checkpoint (validated against this build's feature sizes)."""
        from mlsysopt.placement.checkpoint import load_policy

        return cls(load_policy(path), greedy=greedy, walk=walk)

    def place(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
    ) -> PlacementResult:
        """Best placement found by the policy within ``budget`` evaluations, from ``init`` or a random start."""
        cluster.check_feasible(graph)
        rng = np.random.default_rng(seed)
        start = random_placement(graph, cluster, rng) if init is None else check_placement(graph, cluster, init)
        return self._search(graph, cluster, start, budget, seed, first=None)

    def adapt(
        self,
        graph: CompGraph,
        old_cluster: DeviceCluster,
        new_cluster: DeviceCluster,
        placement: np.ndarray,
        budget: int | None = None,
        seed: int = 0,
    ) -> PlacementResult:
        """Re-place ``placement`` (on ``old_cluster``) onto ``new_cluster``, moving orphaned tasks first."""
        start, orphans = carry_over(graph, old_cluster, new_cluster, placement)
        return self._search(graph, new_cluster, start, budget, seed, first=orphans)

    def _search(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        start: np.ndarray,
        budget: int | None,
        seed: int,
        first: np.ndarray | None,
    ) -> PlacementResult:
        ev = Evaluator(graph, cluster, budget)
        builder = GpNetBuilder(graph, cluster)
        gen = torch.Generator().manual_seed(seed)
        placement = start.copy()
        schedule = ev.schedule(placement)
        pending = list(first) if first is not None else []
        with torch_threads(1):
            return self._loop(ev, builder, gen, placement, schedule, pending)

    def _loop(
        self,
        ev: Evaluator,
        builder: GpNetBuilder,
        gen: torch.Generator,
        placement: np.ndarray,
        schedule: Schedule,
        pending: list[int],
    ) -> PlacementResult:
        gp = builder.build(placement, schedule)
        rejected = torch.zeros(gp.x.shape[0], dtype=torch.bool)  # moves already tried from this placement
        while ev.remaining > 0:
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
            task, device = builder.move(action)
            forced = task in pending  # an orphan's move is always taken
            if forced:
                pending.remove(task)
            candidate = placement.copy()
            candidate[task] = device
            new_schedule = ev.schedule(candidate)
            if self.walk or forced or new_schedule.makespan < schedule.makespan:
                placement, schedule = candidate, new_schedule
                gp = builder.build(placement, schedule)
                rejected = torch.zeros_like(rejected)
            else:
                rejected[action] = True
        return ev.result(self.name)


def carry_over(
    graph: CompGraph, old: DeviceCluster, new: DeviceCluster, placement: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Map a placement onto a changed cluster by device name; orphaned tasks go to their fastest feasible device.

    Returns the new placement and the ids of the orphaned tasks (device removed, or no longer feasible).
    """
    placement = check_placement(graph, old, placement)
    mask = new.check_feasible(graph)
    index = {name: i for i, name in enumerate(new.names)}
    mapped = np.array([index.get(old.names[d], -1) for d in placement], dtype=np.int64)
    ok = mapped >= 0
    ok[ok] = mask[np.flatnonzero(ok), mapped[ok]]
    orphans = np.flatnonzero(~ok)
    fastest = np.argmax(np.where(mask, new.speed[None, :], -np.inf), axis=1)
    mapped[orphans] = fastest[orphans]
    return check_placement(graph, new, mapped), orphans
