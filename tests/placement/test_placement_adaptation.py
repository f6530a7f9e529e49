"""Adaptation experiments: adapt (GiPH vs HEFT re-run vs keep), the adaptivity run, and the cluster changes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mlsysopt.errors import ConstraintViolation, InvalidCluster
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.placement import check_placement
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement import CHANGES, HEFT, GiPH, adapt, adaptivity, carry_over, change_cluster
from mlsysopt.placement.adaptation import random_change, removable_devices
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def giph() -> GiPH:
    torch.manual_seed(1)
    return GiPH(GiPHPolicy(PolicyConfig(hidden=16)))


def graph_and_cluster(seed: int = 0) -> tuple:
    return layered_dag(16, num_types=2, seed=seed), random_cluster(6, num_types=2, q=0.8, seed=seed)


def test_adapt_compares_three_re_placements(giph: GiPH) -> None:
    g, c = graph_and_cluster()
    start = HEFT().place(g, c).placement
    new = c.remove_device(int(np.bincount(start, minlength=c.num_devices).argmax()))
    res = adapt(g, c, new, start, giph, budget=12, seed=3)
    kept, orphans = carry_over(g, c, new, start)
    assert np.array_equal(res.kept, kept) and np.array_equal(res.orphans, orphans) and orphans.size > 0
    assert res.before_makespan == Simulator(g, c).makespan(start)
    assert res.keep_makespan == Simulator(g, new).makespan(kept)
    assert res.heft.makespan == HEFT().place(g, new).makespan
    direct = giph.adapt(g, c, new, start, 12, 3)
    assert res.giph.history == direct.history and np.array_equal(res.giph.placement, direct.placement)
    assert res.giph.makespan <= res.keep_makespan  # GiPH starts from the kept placement and keeps the best
    assert set(res.makespans) == {"giph_adapt", "heft_rerun", "keep"}
    d = res.to_dict(g, new)
    json.dumps(d, allow_nan=False)
    assert d["orphaned_tasks"] == [g.names[i] for i in orphans] and d["keep"]["makespan"] == res.keep_makespan
    assert res.problem.cluster is new


def test_adapt_takes_the_new_problem(giph: GiPH) -> None:
    g, c = graph_and_cluster(1)
    start = HEFT().place(g, c).placement
    new = c.add_device(3.0, [True, True], 1.0, 0.05, name="extra")
    problem = PlacementProblem(g, new)
    res = adapt(g, c, problem, start, giph, budget=8, seed=0)
    assert res.problem is problem and res.orphans.size == 0
    assert res.giph.history == adapt(g, c, new, start, giph, budget=8, seed=0).giph.history


def test_adaptivity_cycles_the_changes(giph: GiPH) -> None:
    g, c = layered_dag(16, num_types=2, seed=2), random_cluster(10, num_types=2, q=0.8, seed=2)
    seen: list[tuple[int, str, int, int]] = []
    out = adaptivity(
        giph, g, c, changes=3, seed=5, on_change=lambda k, kind, n, new, *_: seen.append((k, kind, n, new.num_devices))
    )
    assert [(k, kind, n) for k, kind, n, _ in seen] == [(k, *CHANGES[k]) for k in range(3)]
    assert [d for *_, d in seen] == [8, 4, 6]  # 10 - 2 - 4 + 2 devices
    assert out["heft_rerun"] == 1.0 and len(out["per_change"]["giph"]) == 3
    assert out["giph"] == pytest.approx(np.mean(out["per_change"]["giph"]))
    assert all(r > 0 for r in out["per_change"]["keep"])
    assert adaptivity(giph, g, c, changes=3, seed=5) == out  # deterministic


def test_change_cluster_names_new_devices_past_every_old_name() -> None:
    g, c = graph_and_cluster(3)
    new, added = change_cluster(g, c, ["dev1", "dev1", "dev4"], 2, seed=0)
    assert added == ["dev6", "dev7"]
    assert new.names == ["dev0", "dev2", "dev3", "dev5", "dev6", "dev7"]
    assert change_cluster(g, c, ["dev1", "dev4"], 2, seed=0)[0].to_dict() == new.to_dict()  # seeded
    assert change_cluster(g, c, [], 0, seed=0)[0].to_dict() == c.to_dict()
    same, none = change_cluster(g, c, ["dev5"], 0, seed=0)
    assert none == [] and same.names == ["dev0", "dev1", "dev2", "dev3", "dev4"]


def test_change_cluster_refusals() -> None:
    g, c = graph_and_cluster(3)
    with pytest.raises(InvalidCluster, match="no device named 'gpu9'"):
        change_cluster(g, c, ["gpu9"], 0, seed=0)
    with pytest.raises(InvalidCluster, match="every device"):
        change_cluster(g, c, list(c.names), 1, seed=0)
    only = DeviceCluster([1.0, 1.0, 1.0], [[1, 0], [0, 1], [1, 1]], np.ones((3, 3)), np.zeros((3, 3)))
    with pytest.raises(ConstraintViolation, match="after the change: task"):
        change_cluster(g, only, ["dev1", "dev2"], 0, seed=0)


def test_random_change_and_removable_devices() -> None:
    g, c = graph_and_cluster(4)
    rng = np.random.default_rng(0)
    bigger = random_change(c, g, "add", 2, rng, fresh=7)
    assert bigger.names[-2:] == ["new7", "new8"] and bigger.num_devices == 8
    smaller = random_change(c, g, "remove", 3, rng, fresh=0)
    assert smaller.num_devices == 3 and smaller.feasible(g).any(axis=1).all()
    placement = HEFT().place(g, c).placement
    busiest = removable_devices(g, c, placement, 2)
    assert len(busiest) == 2
    load = np.bincount(placement, weights=g.compute, minlength=c.num_devices)
    assert c.names.index(busiest[0]) == int(np.argmax(load))
    after = c
    for name in busiest:
        after = after.remove_device(name)
    check_placement(g, after, carry_over(g, c, after, placement)[0])
