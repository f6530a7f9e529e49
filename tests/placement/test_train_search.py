"""The shipped policy's training: the distribution, the steepest-descent teacher, imitation, REINFORCE, resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement import TrainConfig, train
from mlsysopt.placement.distribution import sample_problem
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.imitation import imitation_loss, teacher_samples
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {
    "imitation_problems": 2,
    "teacher_steps": 2,
    "imitation_epochs": 1,
    "episodes_per_update": 1,
    "search_budget_per_task": 1,
    "hidden": 8,
    "distribution": "layered",
}


def test_distribution_is_deterministic_and_covers_every_kind() -> None:
    kinds = set()
    for seed in range(3):
        g, c, kind = sample_problem(seed, kind=("layered", "workflow", "dnn")[seed])
        kinds.add(kind)
        PlacementProblem(g, c)  # every task placeable
        again, c2, _ = sample_problem(seed, kind=kind)
        assert np.array_equal(again.edge_index, g.edge_index) and np.array_equal(c2.speed, c.speed)
    assert kinds == {"layered", "workflow", "dnn"}


def test_teacher_targets_the_best_move_and_imitation_learns_it() -> None:
    g, c, _ = sample_problem(4, kind="layered")
    problem = PlacementProblem(g, c)
    samples = teacher_samples(problem, 4, steps=2)
    assert samples
    for s in samples:
        assert s.target.sum() == pytest.approx(1.0) and s.node.size == s.kind.size == s.target.size
    torch.manual_seed(0)
    policy = GiPHPolicy(PolicyConfig(hidden=8, kinds=3))
    builder = GpNetBuilder(problem)
    optim = torch.optim.Adam(policy.parameters(), lr=0.01)
    first = float(imitation_loss(policy, builder, samples[0]).detach())
    for _ in range(30):
        optim.zero_grad()
        imitation_loss(policy, builder, samples[0]).backward()
        optim.step()
    assert float(imitation_loss(policy, builder, samples[0]).detach()) < first


def test_both_stages_run_and_resume_exactly(tmp_path: Path) -> None:
    straight = train(TrainConfig(**TINY, updates=2), checkpoint=tmp_path / "a.pt")
    assert [h["stage"] for h in straight.history] == ["imitation", "reinforce", "reinforce"]
    assert (tmp_path / "a.teacher.pt").is_file()
    train(TrainConfig(**TINY, updates=1), checkpoint=tmp_path / "b.pt")
    resumed = train(TrainConfig(**TINY, updates=2), checkpoint=tmp_path / "b.pt", resume=True)
    assert len(resumed.history) == 3
    for a, b in zip(straight.policy.state_dict().values(), resumed.policy.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    assert straight.policy.config.kinds == 3
