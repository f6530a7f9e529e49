"""What simulating one placement gives: makespan, per-task start/finish/ready times and the critical path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph


@dataclass
class Schedule:
    """Result of simulating one placement.

    Args:
        makespan: Latest finish time, in seconds.
        start: Start time of every task, in seconds.
        finish: Finish time of every task, in seconds.
        ready: Time the last input of every task arrived, in seconds (0 for sources).
        placement: Device id of every task.
        critical_path: Task ids on the critical path, first to last.
        execution: ``fifo`` or ``ordered`` (see the module docstring).

    Shapes:
        start, finish, ready: (num_tasks,) float64 seconds
        placement: (num_tasks,) int64 device index per task
    """

    makespan: float
    start: np.ndarray
    finish: np.ndarray
    ready: np.ndarray
    placement: np.ndarray
    critical_path: list[int] = field(default_factory=list)
    execution: str = "fifo"

    def to_dict(self, graph: CompGraph, cluster: DeviceCluster) -> dict[str, Any]:
        """JSON-ready dict with task and device names.

        Args:
            graph: The graph that was simulated (for task names).
            cluster: The cluster it was simulated on (for device names).

        Returns:
            ``{"makespan", "execution", "critical_path": [task names], "tasks": [{"task", "device", "start",
            "finish"}], "devices": {device: [task names in the order it runs them]}}``.
        """
        tasks = [
            {
                "task": graph.names[i],
                "device": cluster.names[int(self.placement[i])],
                "start": float(self.start[i]),
                "finish": float(self.finish[i]),
            }
            for i in range(graph.num_nodes)
        ]
        by_device: dict[str, list[str]] = {}
        for i in np.lexsort((np.arange(graph.num_nodes), self.finish, self.start)):
            by_device.setdefault(cluster.names[int(self.placement[i])], []).append(graph.names[i])
        return {
            "makespan": float(self.makespan),
            "execution": self.execution,
            "critical_path": [graph.names[i] for i in self.critical_path],
            "tasks": tasks,
            "devices": by_device,
        }
