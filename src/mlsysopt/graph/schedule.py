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
        return {
            "makespan": float(self.makespan),
            "execution": self.execution,
            "critical_path": [graph.names[i] for i in self.critical_path],
            "tasks": tasks,
            "devices": {cluster.names[d]: [graph.names[i] for i in ids] for d, ids in self.device_orders().items()},
        }

    def device_orders(self) -> dict[int, list[int]]:
        """Each used device's task ids in the order it runs them (by start, then finish, then id).

        Returns:
            ``{device id: [task ids]}``, devices in id order.
        """
        out: dict[int, list[int]] = {}
        for i in np.lexsort((np.arange(self.start.size), self.finish, self.start)).tolist():
            out.setdefault(int(self.placement[i]), []).append(i)
        return dict(sorted(out.items()))

    def to_file(self, graph: CompGraph, cluster: DeviceCluster) -> dict[str, Any]:
        """``schedule.json``: each device's tasks in the order it runs them, with start and finish times.

        A workflow manager or a script follows it as a static schedule: on each device, start a task when its
        inputs have arrived and the task before it there has finished (times in seconds are the simulator's
        prediction); ``graph simulate --placement`` reads it back.

        Args:
            graph: The graph that was simulated (for task names).
            cluster: The cluster it was simulated on (for device names).

        Returns:
            ``execution``, ``makespan``, ``units``, ``how_to_run``, ``devices`` {device: [{task, start, finish}]}.
        """
        devices = {
            cluster.names[d]: [
                {"task": graph.names[i], "start": float(self.start[i]), "finish": float(self.finish[i])} for i in ids
            ]
            for d, ids in self.device_orders().items()
        }
        return {
            "execution": self.execution,
            "makespan": float(self.makespan),
            "units": {"start": "s", "finish": "s", "makespan": "s"},
            "how_to_run": "on each device, run its tasks in this order; start a task when its inputs have arrived "
            "and the task before it on that device has finished",
            "devices": devices,
        }
