"""PlacementState: the one move-evaluate-rebuild step that the environment and GiPH's search share."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.env import PlacementEnv
from mlsysopt.placement.giph import GiPH
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.placement.state import PlacementState

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def start_state() -> PlacementState:
    p = PlacementProblem(layered_dag(12, num_types=2, seed=1), random_cluster(4, num_types=2, seed=1))
    placement = p.random_placement(np.random.default_rng(0))
    return PlacementState(GpNetBuilder(p), placement, p.simulate(placement))


def test_relocate_moves_one_task_and_simulates_the_new_placement() -> None:
    state = start_state()
    before = state.placement.copy()
    action = int(np.flatnonzero(state.gpnet.action_mask.numpy())[0])
    simulated = []

    def simulate(placement: np.ndarray):
        simulated.append(placement.copy())
        return state.builder.problem.simulate(placement)

    task, new = state.relocate(action, simulate)
    expected = before.copy()
    expected[task] = state.builder.device[action]
    assert task == state.builder.task[action] and np.array_equal(new.placement, expected)
    assert len(simulated) == 1 and np.array_equal(simulated[0], expected)
    assert new.makespan == state.builder.problem.makespan(expected)
    assert np.array_equal(state.placement, before)  # the old state is unchanged
    assert np.array_equal(new.gpnet.device[new.gpnet.pivot], expected)


def test_gpnet_is_built_on_first_use_only_once() -> None:
    state = start_state()
    builds = []
    inner = state.builder.build
    state.builder.build = lambda p, s: builds.append(1) or inner(p, s)  # type: ignore[method-assign]
    assert not builds
    first = state.gpnet
    assert state.gpnet is first and len(builds) == 1


def test_env_and_giph_both_step_through_relocate(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    inner = PlacementState.relocate

    def spy(self: PlacementState, action: int, simulate):
        calls.append(action)
        return inner(self, action, simulate)

    monkeypatch.setattr(PlacementState, "relocate", spy)
    g, c = layered_dag(10, num_types=2, seed=2), random_cluster(3, num_types=2, seed=2)
    env = PlacementEnv(g, c)
    obs, _ = env.reset(seed=0)
    env.step(int(np.flatnonzero(obs.action_mask.numpy())[0]))
    assert len(calls) == 1
    torch.manual_seed(0)
    GiPH(GiPHPolicy(PolicyConfig(hidden=8)), paper=True).place(g, c, budget=6, seed=0)  # the paper's search
    assert len(calls) == 1 + 5  # one relocation per evaluation after the start placement's
