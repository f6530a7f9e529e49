"""The placement MDP: gymnasium API, rewards checked against the simulator, truncation, start placements."""

from __future__ import annotations

import numpy as np
import pytest

from mlsysopt.errors import ConstraintViolation, InvalidPlacement, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import chain, diamond, homogeneous_cluster, layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import check_placement
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement.env import PlacementEnv
from mlsysopt.placement.gpnet import GpNet

# make_graph_and_cluster(**PROBLEM): 10 tasks of 3 hardware types, 4 devices
PROBLEM = {"n": 10, "d": 4, "seed": 4, "types": 3, "alpha": 0.3}


def allowed(obs: GpNet) -> np.ndarray:
    return np.flatnonzero(obs.action_mask.numpy())


def test_reset_returns_obs_and_info(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    env = PlacementEnv(g, c)
    out = env.reset(seed=1)
    assert isinstance(out, tuple) and len(out) == 2
    obs, info = out
    assert isinstance(obs, GpNet)
    assert obs.num_tasks == g.num_nodes and obs.num_devices == c.num_devices
    check_placement(g, c, info["placement"])
    sim = Simulator(g, c)
    assert info["makespan"] == sim.makespan(info["placement"])
    assert env.initial_makespan == info["makespan"] == env.current_schedule.makespan
    assert env.action_space.n == obs.num_nodes
    assert env.max_steps == 2 * g.num_nodes
    # the observation is the placement's gpNet: pivots are exactly (t, placement[t])
    assert np.array_equal(obs.device[obs.pivot], info["placement"])
    # info hands out a copy
    info["placement"][:] = -1
    assert (env.placement >= 0).all()


def test_reset_is_seeded(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    env = PlacementEnv(g, c)
    a = env.reset(seed=3)[1]["placement"]
    b = env.reset(seed=3)[1]["placement"]
    assert np.array_equal(a, b)
    others = [env.reset(seed=s)[1]["placement"] for s in range(4, 12)]
    assert any(not np.array_equal(a, o) for o in others)


def test_step_reward_is_makespan_decrease(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    env = PlacementEnv(g, c)
    sim = Simulator(g, c)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    prev = info["makespan"]
    total = 0.0
    rewards = []
    for _ in range(8):
        action = int(rng.choice(allowed(obs)))
        task, device = int(obs.task[action]), int(obs.device[action])
        before = env.placement.copy()
        out = env.step(action)
        assert isinstance(out, tuple) and len(out) == 5
        obs, reward, terminated, truncated, info = out
        assert isinstance(obs, GpNet) and isinstance(reward, float)
        assert terminated is False and truncated is False
        # exactly one task moved, to the chosen device
        expected = before.copy()
        expected[task] = device
        assert np.array_equal(info["placement"], expected) and info["task"] == task
        new = sim.makespan(info["placement"])
        assert info["makespan"] == new
        assert reward == pytest.approx(prev - new, rel=0, abs=1e-12)
        total += reward
        rewards.append(reward)
        prev = new
    assert total == pytest.approx(env.initial_makespan - prev)
    assert any(r != 0 for r in rewards)  # the moves did change the makespan (the check is not vacuous)


def test_truncates_after_exactly_two_steps_per_task() -> None:
    g, c = diamond(), homogeneous_cluster(3, delay=0.2)
    env = PlacementEnv(g, c)
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(1)
    flags = []
    for _ in range(2 * g.num_nodes):
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(allowed(obs))))
        assert terminated is False
        flags.append(truncated)
    assert flags == [False] * (2 * g.num_nodes - 1) + [True]


def test_steps_per_task_sets_the_horizon() -> None:
    g, c = chain(3), homogeneous_cluster(2)
    env = PlacementEnv(g, c, steps_per_task=1)
    obs, _ = env.reset(seed=0)
    flags = []
    for _ in range(3):
        obs, _, _, truncated, _ = env.step(int(allowed(obs)[0]))
        flags.append(truncated)
    assert flags == [False, False, True]
    # reset starts a fresh horizon
    obs, _ = env.reset(seed=0)
    assert env.step(int(allowed(obs)[0]))[3] is False


def test_start_placement_from_options(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    feas = c.feasible(g)
    start = np.array([np.flatnonzero(row)[-1] for row in feas])
    env = PlacementEnv(g, c)
    obs, info = env.reset(seed=5, options={"placement": start})
    assert np.array_equal(info["placement"], start)
    assert info["makespan"] == Simulator(g, c).makespan(start)
    assert np.array_equal(obs.device[obs.pivot], start)
    # the env works on its own copy
    env.step(int(allowed(obs)[0]))
    assert np.array_equal(start, [np.flatnonzero(row)[-1] for row in feas])
    # a list works too
    _, info = env.reset(options={"placement": start.tolist()})
    assert np.array_equal(info["placement"], start)


def test_bad_start_placement_raises(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    env = PlacementEnv(g, c)
    with pytest.raises(InvalidPlacement):
        env.reset(options={"placement": [0] * (g.num_nodes - 1)})
    feas = c.feasible(g)
    bad = np.array([np.flatnonzero(row)[0] for row in feas])
    t = int(np.flatnonzero(~feas.all(axis=1))[0])  # a task some device cannot run
    bad[t] = int(np.flatnonzero(~feas[t])[0])
    with pytest.raises(ConstraintViolation):
        env.reset(options={"placement": bad})


def test_graph_and_cluster_from_options(make_graph_and_cluster) -> None:
    env = PlacementEnv(*make_graph_and_cluster(**PROBLEM))
    g, c = chain(5), homogeneous_cluster(2)
    obs, info = env.reset(seed=0, options={"graph": g, "cluster": c})
    assert env.graph is g and obs.num_tasks == 5 and obs.num_devices == 2
    assert env.max_steps == 10
    assert info["makespan"] == Simulator(g, c).makespan(info["placement"])


def test_masked_and_out_of_range_actions_raise(make_graph_and_cluster) -> None:
    g, c = make_graph_and_cluster(**PROBLEM)
    env = PlacementEnv(g, c)
    obs, _ = env.reset(seed=2)
    placement = env.placement.copy()
    pivot = int(np.flatnonzero(obs.pivot)[0])
    assert not bool(obs.action_mask[pivot])
    for action in (pivot, -1, obs.num_nodes, obs.num_nodes + 5):
        with pytest.raises(MlsysoptError):
            env.step(action)
    # rejected actions change nothing and do not count as steps
    assert np.array_equal(env.placement, placement) and env.steps == 0


def test_step_before_reset_raises(make_graph_and_cluster) -> None:
    env = PlacementEnv(*make_graph_and_cluster(**PROBLEM))
    with pytest.raises(MlsysoptError, match="reset"):
        env.step(0)


def test_needs_a_problem_or_a_sampler() -> None:
    with pytest.raises(MlsysoptError):
        PlacementEnv()
    with pytest.raises(MlsysoptError):
        PlacementEnv(graph=chain(3))


def test_sampler_mode_draws_problems_from_the_env_rng() -> None:
    calls: list[int] = []

    def sampler(rng: np.random.Generator) -> tuple[CompGraph, DeviceCluster]:
        assert isinstance(rng, np.random.Generator)
        n = int(rng.integers(4, 12))
        calls.append(n)
        return layered_dag(n, num_types=2, seed=int(rng.integers(1000))), random_cluster(3, num_types=2, seed=n)

    env = PlacementEnv(sampler=sampler)
    obs, info = env.reset(seed=7)
    first = (env.graph.num_nodes, info["placement"].copy())
    assert obs.num_tasks == env.graph.num_nodes == calls[-1]
    assert env.max_steps == 2 * env.graph.num_nodes
    assert info["makespan"] == Simulator(env.graph, env.cluster).makespan(info["placement"])
    obs, _, _, _, info = env.step(int(allowed(obs)[0]))
    assert info["makespan"] == Simulator(env.graph, env.cluster).makespan(info["placement"])
    # a new problem on every reset, reproducible by seed
    sizes = {env.reset()[0].num_tasks for _ in range(6)}
    assert len(sizes) > 1 and len(calls) == 7
    _, info = env.reset(seed=7)
    assert env.graph.num_nodes == first[0] and np.array_equal(info["placement"], first[1])
