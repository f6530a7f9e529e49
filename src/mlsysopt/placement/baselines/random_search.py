"""Random search: uniformly random feasible placements, keep the best."""

from __future__ import annotations

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import random_placement
from mlsysopt.placement.base import Evaluator, PlacementResult, Placer


class RandomSearch(Placer):
    """Spend the whole budget on uniformly random feasible placements; return the best one."""

    name = "random"

    def place(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
    ) -> PlacementResult:
        """Best of ``budget`` random feasible placements (``init`` is ignored)."""
        cluster.check_feasible(graph)
        evaluator = Evaluator(graph, cluster, budget)
        rng = np.random.default_rng(seed)
        while evaluator.remaining > 0:
            evaluator(random_placement(graph, cluster, rng))
        return evaluator.result(self.name)
