"""The one placement interface: ``Placer.place(graph, cluster, budget, seed)`` and the evaluation budget."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.simulator import Schedule, Simulator


class BudgetExhausted(MlsysoptError):
    """A placer asked the simulator for more evaluations than its budget allows."""


@dataclass
class PlacementResult:
    """What every placer returns: the best placement found and how the search got there."""

    placement: np.ndarray
    makespan: float
    method: str
    evaluations: int
    history: list[float] = field(default_factory=list)  # best makespan after each simulator evaluation

    @property
    def steps_to_best(self) -> int:
        """Evaluations used until the final best makespan was first reached."""
        if not self.history:
            return 0
        return int(np.argmax(np.asarray(self.history) <= self.makespan)) + 1

    def to_dict(self, graph: CompGraph, cluster: DeviceCluster) -> dict[str, Any]:
        """JSON-ready dict with task and device names."""
        from mlsysopt.graph.placement import placement_to_dict

        return {
            "method": self.method,
            "makespan": float(self.makespan),
            "evaluations": self.evaluations,
            "steps_to_best": self.steps_to_best,
            "history": [float(v) for v in self.history],
            "placement": placement_to_dict(graph, cluster, self.placement),
        }


class Evaluator:
    """Counts simulator evaluations against a budget and tracks the best placement seen."""

    def __init__(self, graph: CompGraph, cluster: DeviceCluster, budget: int | None) -> None:
        self.graph = graph
        self.cluster = cluster
        self.simulator = Simulator(graph, cluster)
        self.budget = default_budget(graph) if budget is None else int(budget)
        if self.budget < 1:
            raise MlsysoptError(f"budget must be >= 1 simulator evaluation, got {self.budget}")
        self.history: list[float] = []
        self.best_makespan = float("inf")
        self.best_placement: np.ndarray | None = None

    @property
    def remaining(self) -> int:
        """Evaluations left."""
        return self.budget - len(self.history)

    def __call__(self, placement: np.ndarray) -> float:
        """Makespan of ``placement`` (one evaluation); remembers it if it is the best so far."""
        self._spend()
        return self._record(placement, self.simulator.makespan(placement))

    def schedule(self, placement: np.ndarray) -> Schedule:
        """Full schedule of ``placement`` (one evaluation, for methods that read start times)."""
        self._spend()
        sched = self.simulator.run(placement)
        self._record(placement, sched.makespan)
        return sched

    def _spend(self) -> None:
        if self.remaining <= 0:
            raise BudgetExhausted(f"budget of {self.budget} simulator evaluations is used up")

    def _record(self, placement: np.ndarray, ms: float) -> float:
        if ms < self.best_makespan:
            self.best_makespan = ms
            self.best_placement = np.array(placement, dtype=np.int64)
        self.history.append(self.best_makespan)
        return ms

    def result(self, method: str) -> PlacementResult:
        """The best placement seen, as a PlacementResult."""
        if self.best_placement is None:
            raise MlsysoptError(f"{method} evaluated no placement")
        return PlacementResult(self.best_placement, self.best_makespan, method, len(self.history), list(self.history))


def default_budget(graph: CompGraph) -> int:
    """The benchmark's equal budget: 2·|V| simulator evaluations."""
    return 2 * graph.num_nodes


class Placer(ABC):
    """A placement method. Implementations live one per file and share this interface."""

    name: str = "placer"

    @abstractmethod
    def place(
        self,
        graph: CompGraph,
        cluster: DeviceCluster,
        budget: int | None = None,
        seed: int = 0,
        init: np.ndarray | None = None,
    ) -> PlacementResult:
        """Best placement found with at most ``budget`` simulator evaluations (default 2·|V|).

        ``init`` is a start placement for methods that improve one (ignored by constructive methods).
        """
