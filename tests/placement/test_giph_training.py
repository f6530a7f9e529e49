"""REINFORCE training: returns by hand, determinism, atomic checkpoints, resume, parallel rollouts, config checks."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.placement import check_placement
from mlsysopt.placement.checkpoint import load_checkpoint, load_policy, save_checkpoint
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.placement.training import (
    TrainConfig,
    TrainResult,
    discounted,
    replay,
    rollout,
    sample_problem,
    train,
)
from mlsysopt.runtime import ExecutorLost, SerialExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(**kw) -> TrainConfig:
    base = {
        "stages": "reinforce",  # the paper's REINFORCE stage (the shipped pipeline: test_train_search.py)
        "updates": 2,
        "episodes_per_update": 2,
        "min_tasks": 6,
        "max_tasks": 10,
        "min_devices": 3,
        "max_devices": 5,
        "hidden": 16,
    }
    base.update(kw)
    return TrainConfig(**base)


def weights(policy: GiPHPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def assert_same_weights(a: GiPHPolicy, b: GiPHPolicy) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


@pytest.fixture(scope="module")
def baseline_run() -> TrainResult:
    """The reference run every other test compares with: tiny(), two updates, no checkpoint."""
    return train(tiny())


@pytest.fixture(scope="module")
def four_single_updates() -> tuple[TrainResult, list[tuple[int, dict]]]:
    """Four updates of one episode each in one go, no checkpoint: what a stopped and resumed training must equal;
    and the ``on_update`` calls it made."""
    seen: list[tuple[int, dict]] = []
    return train(tiny(updates=4, episodes_per_update=1), on_update=lambda u, s: seen.append((u, s))), seen


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainResult, Path]:
    """tiny() checkpointed after every update into a fresh ``sub/giph.pt`` (a test that resumes it copies it)."""
    ckpt = tmp_path_factory.mktemp("giph") / "sub" / "giph.pt"
    return train(tiny(checkpoint_every=1), checkpoint=ckpt), ckpt


# ---------------------------------------------------------------------- returns
def test_discounted_by_hand() -> None:
    np.testing.assert_allclose(discounted([1.0, 2.0, 3.0], 0.5), [1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0])
    np.testing.assert_allclose(discounted([1.0, 0.0, 0.0, 4.0], 0.9), [1 + 0.9**3 * 4, 0.9**2 * 4, 0.9 * 4, 4.0])
    np.testing.assert_allclose(discounted([1.0, -1.0, 2.0], 1.0), [2.0, 1.0, 2.0])
    np.testing.assert_allclose(discounted([5.0], 0.3), [5.0])
    out = discounted([], 0.9)
    assert out.shape == (0,)


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "bad",
    [
        {"min_tasks": 12, "max_tasks": 10},
        {"min_tasks": 1},
        {"min_devices": 6, "max_devices": 5},
        {"min_devices": 0},
        {"updates": 0},
        {"episodes_per_update": 0},
        {"gamma": 0.0},
        {"gamma": 1.5},
        {"lr": 0.0},
    ],
)
def test_invalid_config_raises(bad: dict) -> None:
    cfg = tiny(**bad)
    with pytest.raises(MlsysoptError):
        cfg.validate()
    with pytest.raises(MlsysoptError):
        train(cfg)


def test_sample_problem_respects_the_ranges_and_is_seeded() -> None:
    cfg = tiny()
    sizes = set()
    for seed in range(12):
        g, c = sample_problem(cfg, seed)
        assert cfg.min_tasks <= g.num_nodes <= cfg.max_tasks
        assert cfg.min_devices <= c.num_devices <= cfg.max_devices
        c.check_feasible(g)
        sizes.add((g.num_nodes, c.num_devices))
    assert len(sizes) > 1
    (g1, c1), (g2, c2) = sample_problem(cfg, 5), sample_problem(cfg, 5)
    assert np.array_equal(g1.edge_index, g2.edge_index) and np.array_equal(c1.speed, c2.speed)


# ---------------------------------------------------------------------- rollout / replay
def test_rollout_and_replay_agree() -> None:
    cfg = tiny()
    torch.manual_seed(0)
    policy = GiPHPolicy(PolicyConfig(hidden=cfg.hidden))
    args = (policy.config.to_dict(), weights(policy), dataclasses.asdict(cfg), 11)
    traj = rollout(args)
    g, c = sample_problem(cfg, 11)
    assert len(traj.actions) == len(traj.rewards) == cfg.steps_per_task * g.num_nodes
    assert traj.seed == 11
    assert 0 < traj.best_makespan <= traj.start_makespan
    # rewards are normalized makespan decreases: they telescope to (start - final) / start
    assert sum(traj.rewards) <= 1.0
    assert rollout(args) == traj  # same seed, same episode
    builder = GpNetBuilder(g, c)
    assert all(0 <= a < builder.num_nodes for a in traj.actions)
    log_probs, entropies = replay(policy, cfg, traj)
    assert log_probs.shape == entropies.shape == (len(traj.actions),)
    assert torch.isfinite(log_probs).all() and (log_probs <= 0).all() and (entropies >= 0).all()
    assert log_probs.requires_grad


# ---------------------------------------------------------------------- train
def test_train_runs_and_reports_every_update(baseline_run: TrainResult) -> None:
    hist = baseline_run.history
    assert len(hist) == 2
    assert [h["update"] for h in hist] == [0.0, 1.0]
    for h in hist:
        assert set(h) == {"update", "loss", "entropy", "improvement"}
        assert all(isinstance(v, float) and np.isfinite(v) for v in h.values())
        assert 0.0 <= h["improvement"] < 1.0
        assert h["entropy"] > 0
    assert isinstance(baseline_run.policy, GiPHPolicy)
    assert not baseline_run.policy.training  # returned in eval mode
    assert baseline_run.policy.config.hidden == 16
    # training moved the weights away from the seeded initialization
    torch.manual_seed(0)
    init = GiPHPolicy(PolicyConfig(hidden=16))
    assert any(
        not torch.equal(a, b)
        for a, b in zip(weights(init).values(), weights(baseline_run.policy).values(), strict=True)
    )


def test_train_calls_on_update(four_single_updates: tuple[TrainResult, list[tuple[int, dict]]]) -> None:
    res, seen = four_single_updates
    assert [u for u, _ in seen] == [0, 1, 2, 3]
    assert [s for _, s in seen] == res.history


def test_train_is_deterministic(baseline_run: TrainResult) -> None:
    again = train(tiny())
    assert again.history == baseline_run.history
    assert_same_weights(again.policy, baseline_run.policy)
    other = train(tiny(seed=1))
    assert other.history != baseline_run.history


def test_checkpoint_is_written_atomically(
    checkpointed_run: tuple[TrainResult, Path], baseline_run: TrainResult
) -> None:
    res, ckpt = checkpointed_run
    assert res.history == baseline_run.history  # checkpointing does not change training
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["giph.pt"]  # no temp file left behind
    data = load_checkpoint(ckpt)
    assert data["update"] == 1
    assert data["history"] == res.history
    assert data["train_config"]["hidden"] == 16 and data["train_config"]["updates"] == 2
    assert len(data["baseline"]) == 2 * 10  # steps_per_task * max_tasks
    assert "optimizer" in data
    assert_same_weights(load_policy(ckpt), res.policy)


def test_last_update_is_checkpointed_even_off_the_period(tmp_path) -> None:
    ckpt = tmp_path / "giph.pt"
    train(tiny(updates=3, episodes_per_update=1, checkpoint_every=2), checkpoint=ckpt)
    assert load_checkpoint(ckpt)["update"] == 2


def test_resume_continues_where_the_checkpoint_left_off(
    tmp_path, checkpointed_run: tuple[TrainResult, Path], baseline_run: TrainResult
) -> None:
    first, written = checkpointed_run
    ckpt = tmp_path / "giph.pt"
    shutil.copyfile(written, ckpt)  # tiny() checkpointed after each of its two updates
    assert first.history == baseline_run.history
    resumed = train(tiny(updates=3, checkpoint_every=1), checkpoint=ckpt, resume=True)
    assert len(resumed.history) == 3
    assert resumed.history[:2] == first.history
    assert resumed.history[2]["update"] == 2.0
    assert load_checkpoint(ckpt)["update"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["giph.pt"]
    # resuming is exact: the same as three updates in one go (policy, optimizer and baseline restored)
    straight = train(tiny(updates=3))
    assert straight.history == resumed.history
    assert_same_weights(straight.policy, resumed.policy)


def test_resume_without_a_checkpoint_starts_fresh(tmp_path, baseline_run: TrainResult) -> None:
    res = train(tiny(), checkpoint=tmp_path / "none-yet.pt", resume=True)
    assert res.history == baseline_run.history
    assert (tmp_path / "none-yet.pt").is_file()


def test_no_resume_overwrites_the_checkpoint(tmp_path, baseline_run: TrainResult) -> None:
    ckpt = tmp_path / "giph.pt"
    train(tiny(updates=1, episodes_per_update=1), checkpoint=ckpt)  # another training's (shorter) history
    res = train(tiny(), checkpoint=ckpt, resume=False)
    assert res.history == baseline_run.history
    assert load_checkpoint(ckpt)["history"] == baseline_run.history


def test_resume_with_another_hidden_size_raises(tmp_path) -> None:
    ckpt = tmp_path / "giph.pt"
    train(tiny(updates=1, episodes_per_update=1), checkpoint=ckpt)
    with pytest.raises(MlsysoptError, match="hidden"):
        train(tiny(updates=2, episodes_per_update=1, hidden=8), checkpoint=ckpt, resume=True)


def test_resume_from_a_policy_only_checkpoint_is_a_clear_error(tmp_path) -> None:
    ckpt = save_checkpoint(tmp_path / "policy.pt", GiPHPolicy(PolicyConfig(hidden=16)))
    with pytest.raises(MlsysoptError):
        train(tiny(updates=1, episodes_per_update=1), checkpoint=ckpt, resume=True)


def test_resume_with_larger_max_tasks(tmp_path) -> None:
    ckpt = tmp_path / "giph.pt"
    train(tiny(updates=1, episodes_per_update=1, min_tasks=6, max_tasks=6), checkpoint=ckpt)
    try:
        res = train(tiny(updates=2, episodes_per_update=1, min_tasks=10, max_tasks=10), checkpoint=ckpt, resume=True)
    except MlsysoptError:
        return  # refusing clearly is fine too
    assert len(res.history) == 2


def test_trained_policy_places_feasibly(baseline_run: TrainResult) -> None:
    from mlsysopt.placement.giph import GiPH

    g, c = sample_problem(tiny(), 99)
    res = GiPH(baseline_run.policy).place(g, c, budget=6, seed=0)
    check_placement(g, c, res.placement)


# (serial = local pool = Ray for training, compare and adapt: tests/placement/test_placement_parallel.py)


def test_timeout_stops_after_an_update_checkpointed_and_resume_finishes_it_exactly(
    tmp_path, four_single_updates: tuple[TrainResult, list[tuple[int, dict]]]
) -> None:
    ckpt = tmp_path / "giph.pt"
    cut = train(tiny(updates=4, episodes_per_update=1, timeout=1e-6), checkpoint=ckpt)
    assert cut.stopped_by == "timeout" and len(cut.history) == 1  # one update always runs
    assert load_checkpoint(ckpt)["update"] == 0
    rest = train(tiny(updates=4, episodes_per_update=1), checkpoint=ckpt, resume=True)
    straight = four_single_updates[0]
    assert rest.stopped_by == "updates" and rest.history == straight.history
    assert_same_weights(rest.policy, straight.policy)


class LosesItsWorkers(SerialExecutor):
    """Runs the first ``good`` maps, then fails the way a lost Ray head or a dying pool does."""

    def __init__(self, good: int) -> None:
        self.good = good

    def map(self, fn, items):
        if self.good == 0:
            raise ExecutorLost("the Ray cluster at 127.0.0.1:1 is gone")
        self.good -= 1
        return super().map(fn, items)


def test_a_lost_executor_keeps_the_last_finished_update_and_resume_continues(
    tmp_path, four_single_updates: tuple[TrainResult, list[tuple[int, dict]]]
) -> None:
    ckpt = tmp_path / "giph.pt"
    cfg = tiny(updates=4, episodes_per_update=1, checkpoint_every=10)  # no periodic checkpoint before the loss
    with pytest.raises(ExecutorLost, match=r"is gone; training stopped in update 3, .*giph.pt .*--resume continues"):
        train(cfg, checkpoint=ckpt, executor=LosesItsWorkers(2))
    assert load_checkpoint(ckpt)["update"] == 1  # saved at the loss: updates 0 and 1 finished
    rest = train(cfg, checkpoint=ckpt, resume=True)
    assert rest.history == four_single_updates[0].history
    with pytest.raises(ExecutorLost, match="before any checkpoint: start it again"):
        train(cfg, checkpoint=tmp_path / "new.pt", executor=LosesItsWorkers(0))
    assert not (tmp_path / "new.pt").exists()


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"lr": float("inf")}, "lr must be a finite number"),
        ({"lr": float("nan")}, "lr must be a number"),
        ({"lr": -0.1}, "lr must be a finite number > 0"),
        ({"updates": 1.5}, "updates must be an integer"),
        ({"hidden": True}, "hidden must be an integer"),
        ({"timeout": 0.0}, "timeout must be a finite number"),
        ({"max_tasks": 10**6}, "one training episode needs an estimated"),
        ({"updates": 10**9}, "over the limit of 7 days"),
    ],
)
def test_bad_knobs_and_oversized_trainings_are_refused_before_anything_runs(bad: dict, needle: str) -> None:
    with pytest.raises(MlsysoptError, match=needle):
        tiny(**bad).validate()


def test_unknown_backend_raises() -> None:
    with pytest.raises(MlsysoptError, match="backend"):
        train(tiny(backend="mpi"))
