"""GiPH training rollouts, compare seeds and adapt seeds on the serial, local-pool and Ray executors: one answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement import GiPH, TrainConfig, adapt, compare, removable_devices, train
from mlsysopt.placement.experiment import heft_placement
from mlsysopt.placement.training import sample_problem
from mlsysopt.runtime import LocalExecutor, RayExecutor

#: only the Ray half is in the Ray group (tests/conftest.py): the serial and local-pool one runs beside it
pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = TrainConfig(
    stages="reinforce", updates=2, episodes_per_update=2, min_tasks=6, max_tasks=10, min_devices=3, max_devices=5,
    hidden=16,
)  # fmt: skip
METHODS = ["random", "annealing", "giph", "giph_from_heft"]


def summary(results: dict) -> dict:
    """What must agree between executors: every run's makespan, history and placement (not the timings)."""
    return {m: [(r.makespan, r.history, r.placement.tolist()) for r in runs] for m, runs in results.items()}


@pytest.fixture(scope="module")
def reference(one_torch_thread: None) -> dict:
    """The serial answers: training, compare and adapt in this process (module-scoped: the local-pool test and the
    Ray test each check against it; under ``--dist loadgroup`` they run on different workers, so only the Ray group
    waits for the Ray one)."""
    trained = train(TINY)
    giph = GiPH(trained.policy)
    graph, cluster = sample_problem(TINY, 77)
    problem = PlacementProblem(graph, cluster)
    cmp = compare(problem, methods=METHODS, seeds=[0, 1, 2], budget=12, giph=giph)
    start = heft_placement(problem)
    (gone,) = removable_devices(graph, cluster, start, 1)
    smaller = cluster.remove_device(gone)
    ada = adapt(graph, cluster, smaller, start, giph, budget=10, seeds=[0, 1, 2])
    assert len({r.makespan for runs in cmp.runs.values() for r in runs}) > 1  # the searches differ
    assert ada.giph.makespan == min(r.makespan for r in ada.giph_runs)
    assert ada.to_dict(graph, smaller)["giph_seeds"]["seeds"] == [0, 1, 2]
    return {"trained": trained, "giph": giph, "graph": graph, "cluster": cluster, "problem": problem, "cmp": cmp,
            "start": start, "smaller": smaller, "ada": ada}  # fmt: skip


def _same_answers(ref: dict, executor: LocalExecutor | RayExecutor) -> None:
    """Training, compare and adapt on ``executor`` give the serial answers of ``ref``."""
    graph, cluster, smaller, start, giph = ref["graph"], ref["cluster"], ref["smaller"], ref["start"], ref["giph"]
    with executor:
        trained = train(TINY, executor=executor)
        assert trained.history == ref["trained"].history, executor.backend
        for key, value in ref["trained"].policy.state_dict().items():
            assert torch.equal(trained.policy.state_dict()[key], value), (executor.backend, key)
        again = compare(ref["problem"], methods=METHODS, seeds=[0, 1, 2], budget=12, giph=giph, executor=executor)
        assert summary(again.runs) == summary(ref["cmp"].runs), executor.backend
        assert again.to_dict()["results"].keys() == ref["cmp"].to_dict()["results"].keys()
        moved = adapt(graph, cluster, smaller, start, giph, budget=10, seeds=[0, 1, 2], executor=executor)
        assert [r.makespan for r in moved.giph_runs] == [r.makespan for r in ref["ada"].giph_runs], executor.backend
        assert np.array_equal(moved.giph.placement, ref["ada"].giph.placement)
        assert moved.makespans == ref["ada"].makespans


def test_serial_and_local_pool_give_identical_results(reference: dict) -> None:
    _same_answers(reference, LocalExecutor(2))


@pytest.mark.xdist_group("ray")
def test_serial_and_ray_give_identical_results(reference: dict, ray_cluster) -> None:
    _same_answers(reference, RayExecutor(ray_cluster.address, 2))
