"""The placement MDP with the gymnasium API: observe gpNet, relocate one task, get the makespan decrease.

An episode starts from a random feasible placement (or ``options["placement"]``) of a (graph, cluster) pair
and lasts ``steps_per_task · |V|`` relocations (2·|V| as in GiPH). The observation is the current
:class:`~mlsysopt.placement.gpnet.GpNet`; an action is the id of a gpNet node (task, device) — move that
task to that device; the reward is the previous makespan minus the new one (simulator time units).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule
from mlsysopt.placement.gpnet import EDGE_DIM, NODE_DIM, GpNet, GpNetBuilder
from mlsysopt.placement.state import PlacementState

ProblemSampler = Callable[[np.random.Generator], tuple[CompGraph, DeviceCluster]]


class PlacementEnv(gym.Env):
    """Relocate one task per step; reward = makespan decrease. Give a fixed problem or a sampler.

    Args:
        graph: The fixed graph (with ``cluster``), or None when ``sampler`` is given.
        cluster: The fixed cluster (with ``graph``), or None when ``sampler`` is given.
        sampler: ``sampler(rng) -> (graph, cluster)``, drawing a new problem at every :meth:`reset`.
        steps_per_task: Episode length in relocations per task (an episode lasts ``steps_per_task * num_tasks``).

    Raises:
        MlsysoptError: If neither a (graph, cluster) pair nor a sampler is given.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(
        self,
        graph: CompGraph | None = None,
        cluster: DeviceCluster | None = None,
        sampler: ProblemSampler | None = None,
        steps_per_task: int = 2,
    ) -> None:
        if sampler is None and (graph is None or cluster is None):
            raise MlsysoptError("PlacementEnv needs a graph and a cluster, or a problem sampler")
        self._fixed = (graph, cluster)
        self._sampler = sampler
        self.steps_per_task = steps_per_task
        # Observations are GpNet objects; the space below documents their feature sizes.
        self.observation_space = gym.spaces.Graph(
            node_space=gym.spaces.Box(-1.0, 1.0, (NODE_DIM,)), edge_space=gym.spaces.Box(-1.0, 1.0, (EDGE_DIM,))
        )
        self.action_space = gym.spaces.Discrete(1)
        self.graph: CompGraph | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[GpNet, dict]:
        """New episode: (graph, cluster) from ``options``, the sampler or the fixed pair; a start placement."""
        super().reset(seed=seed)
        options = options or {}
        if "graph" in options:
            self.graph, self.cluster = options["graph"], options["cluster"]
        elif self._sampler is not None:
            self.graph, self.cluster = self._sampler(self.np_random)
        else:
            self.graph, self.cluster = self._fixed
        self.problem = PlacementProblem(self.graph, self.cluster)
        self.builder = GpNetBuilder(self.problem)
        start = options.get("placement")
        placement = self.problem.random_placement(self.np_random) if start is None else self.problem.check(start).copy()
        self.state = PlacementState(self.builder, placement, self.problem.simulate(placement))
        self.initial_makespan = self.state.makespan
        self.steps = 0
        self.max_steps = self.steps_per_task * self.graph.num_nodes
        obs = self._observe()
        return obs, {"makespan": self.state.makespan, "placement": placement.copy()}

    def step(self, action: int) -> tuple[GpNet, float, bool, bool, dict]:
        """Move the task of gpNet node ``action`` to its device; reward = previous − new makespan."""
        if self.graph is None:
            raise MlsysoptError("call reset() before step()")
        if not 0 <= int(action) < self.action_space.n or not bool(self.state.gpnet.action_mask[int(action)]):
            raise MlsysoptError(f"action {action} is not an allowed gpNet node")
        before = self.state.makespan
        task, self.state = self.state.relocate(int(action), self.problem.simulate)
        self.steps += 1
        reward = before - self.state.makespan
        obs = self._observe()
        info = {"makespan": self.state.makespan, "placement": self.state.placement.copy(), "task": task}
        return obs, float(reward), False, self.steps >= self.max_steps, info

    def _observe(self) -> GpNet:
        obs = self.state.gpnet
        self.action_space = gym.spaces.Discrete(int(obs.x.shape[0]))
        return obs

    @property
    def placement(self) -> np.ndarray:
        """The current placement."""
        return self.state.placement

    @property
    def schedule(self) -> Schedule:
        """Schedule of the current placement."""
        return self.state.schedule

    @property
    def current_schedule(self) -> Schedule:
        """Schedule of the current placement."""
        return self.schedule
