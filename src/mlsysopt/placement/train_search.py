"""The shipped policy's training: imitation of a steepest-descent teacher, then REINFORCE on the local search.

:func:`train_search` runs both stages of :class:`~mlsysopt.placement.config.TrainConfig` (``stages =
"imitation+reinforce"``) and is what :func:`mlsysopt.placement.train` calls for them:

1. the teacher's samples of ``imitation_problems`` training problems are collected on the executor (one task per
   problem) and saved next to the checkpoint (``teacher.pt``), then ``imitation_epochs`` epochs of
   :func:`~mlsysopt.placement.imitation.imitation_loss` in minibatches of :data:`BATCH` (Adam, ``imitation_lr``);
2. ``updates`` REINFORCE updates of ``episodes_per_update`` search episodes each
   (:mod:`mlsysopt.placement.finetune`, Adam, ``finetune_lr``).

Every epoch and every update is one step of the history (``stage`` says which) and is checkpointed atomically;
``resume=True`` continues after the last one (the teacher's samples are read back, not collected again). Problem
seeds: ``seed * 1_000_003 + k`` for the teacher's problems, ``+ 500_000 + ...`` for the episodes; the validation
problems the search defaults were chosen on start at ``+ 900_000`` (:data:`VALIDATION_OFFSET`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.io import RunDir, load_torch, save_torch_atomic
from mlsysopt.placement.checkpoint import IncompatibleCheckpoint, save_training_state
from mlsysopt.placement.config import TrainConfig
from mlsysopt.placement.finetune import episode_loss, search_episode
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.imitation import TeacherSample, collect, imitation_loss, training_problem
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.placement.train_result import TrainResult, discounted
from mlsysopt.runtime import Executor, ExecutorLost, make_executor
from mlsysopt.runtime.threads import torch_threads

#: Teacher samples per imitation minibatch.
BATCH = 16
#: Largest training problem (tasks).
MAX_TASKS = 200
#: Problem seeds of the validation problems (never trained on) start here, past the training seeds.
VALIDATION_OFFSET = 900_000
#: Proposals per batch in the training episodes (the search default).
PROPOSALS = 8
TEACHER_FILE = "teacher.pt"


def problem_seed(cfg: TrainConfig, k: int) -> int:
    """Seed of the ``k``-th problem of a training with ``cfg.seed``."""
    return cfg.seed * 1_000_003 + k


def train_search(
    cfg: TrainConfig,
    checkpoint: str | Path | RunDir | None = None,
    resume: bool = False,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
    executor: Executor | None = None,
    state: dict[str, Any] | None = None,
) -> TrainResult:
    """Both stages; ``state`` is the checkpoint to resume from (read by :func:`mlsysopt.placement.train`)."""
    torch.manual_seed(cfg.seed)
    policy = GiPHPolicy(PolicyConfig(hidden=cfg.hidden, kinds=cfg.kinds))
    history: list[dict[str, float]] = []
    done = 0  # steps (epochs + updates) already finished
    if state is not None:
        policy.load_state_dict(state["policy"])
        history, done = list(state["history"]), int(state["update"]) + 1
    epochs = cfg.imitation_epochs if cfg.imitation_problems > 0 else 0
    optim = torch.optim.Adam(policy.parameters(), lr=cfg.imitation_lr if done < epochs else cfg.finetune_lr)
    baseline = np.zeros(0)
    if state is not None:
        optim.load_state_dict(state["optimizer"])
        baseline = np.asarray(state.get("baseline", []), np.float64)
    cfg_dict = asdict(cfg)
    t0 = time.monotonic()
    own = executor is None
    pool = make_executor(cfg.backend, cfg.workers, cfg.address) if executor is None else executor

    def save(step: int) -> None:
        if checkpoint is None:
            return
        save_training_state(
            checkpoint, policy, optim, baseline=baseline.tolist(), history=history, update=step, train_config=cfg_dict
        )

    stopped_by = "updates"
    try:
        with torch_threads(1):
            if done < epochs:
                samples = _teacher_data(cfg, checkpoint, pool)
                builders: dict[int, Any] = {}
                for epoch in range(done, epochs):
                    stats = {
                        "update": float(epoch),
                        "stage": "imitation",
                        **_epoch(policy, optim, samples, builders, cfg, epoch),
                    }
                    history.append(stats)
                    if on_update is not None:
                        on_update(epoch, stats)
                    save(epoch)
                    if _timed_out(cfg, t0) and epoch < epochs + cfg.updates - 1:
                        return TrainResult(policy.eval(), history, "timeout")
                optim = torch.optim.Adam(policy.parameters(), lr=cfg.finetune_lr)
            for update in range(max(done, epochs) - epochs, cfg.updates):
                step = epochs + update
                seeds = [
                    problem_seed(cfg, 500_000 + update * cfg.episodes_per_update + k)
                    for k in range(cfg.episodes_per_update)
                ]
                weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
                args = [
                    (
                        policy.config.to_dict(),
                        weights,
                        cfg.distribution,
                        s,
                        cfg.search_budget_per_task,
                        MAX_TASKS,
                        PROPOSALS,
                    )
                    for s in seeds
                ]
                try:
                    episodes = pool.map(search_episode, args)
                except ExecutorLost:
                    raise
                baseline, stats = _reinforce(policy, optim, baseline, cfg, episodes)
                stats = {"update": float(step), "stage": "reinforce", **stats}
                history.append(stats)
                if on_update is not None:
                    on_update(step, stats)
                if (update + 1) % cfg.checkpoint_every == 0 or update == cfg.updates - 1 or _timed_out(cfg, t0):
                    save(step)
                if _timed_out(cfg, t0) and update < cfg.updates - 1:
                    stopped_by = "timeout"
                    break
    finally:
        if own:
            pool.close()
    return TrainResult(policy.eval(), history, stopped_by)


def _timed_out(cfg: TrainConfig, t0: float) -> bool:
    return cfg.timeout is not None and time.monotonic() - t0 >= cfg.timeout


def _teacher_path(checkpoint: str | Path | RunDir | None) -> Path | None:
    if checkpoint is None:
        return None
    if isinstance(checkpoint, RunDir):
        return checkpoint.file(TEACHER_FILE)
    return Path(checkpoint).with_name(Path(checkpoint).stem + "." + TEACHER_FILE)


def _teacher_data(cfg: TrainConfig, checkpoint: str | Path | RunDir | None, pool: Executor) -> list[Any]:
    """The teacher's samples: read back from a previous run of this training, or collected now (and saved)."""

    path = _teacher_path(checkpoint)
    if path is not None and path.exists():
        try:
            data = load_torch(path, IncompatibleCheckpoint)
        except IncompatibleCheckpoint:  # written by an older version (pickled objects): collected again below
            data = None
        if isinstance(data, dict) and data.get("problems") == cfg.imitation_problems and data.get("seed") == cfg.seed:
            return [_sample_from_plain(d) for d in data["samples"]]
    jobs = [
        (problem_seed(cfg, k), cfg.distribution, cfg.teacher_steps, MAX_TASKS) for k in range(cfg.imitation_problems)
    ]
    samples = [s for part in pool.map(collect, jobs) for s in part]
    if path is not None:  # tensors and plain data only: the weights-only loader of --resume reads it back
        plain = [_sample_to_plain(smp) for smp in samples]
        save_torch_atomic(path, {"problems": cfg.imitation_problems, "seed": cfg.seed, "samples": plain})
    return samples


def _sample_to_plain(sample: Any) -> dict[str, Any]:
    """A :class:`~mlsysopt.placement.imitation.TeacherSample` as a dict of tensors (what teacher.pt keeps)."""
    arrays = {k: torch.from_numpy(np.ascontiguousarray(getattr(sample, k))) for k in ("placement", "node", "kind")}
    return {"seed": int(sample.seed), **arrays, "target": torch.from_numpy(np.ascontiguousarray(sample.target))}


def _sample_from_plain(d: dict[str, Any]) -> Any:
    """The :class:`~mlsysopt.placement.imitation.TeacherSample` of :func:`_sample_to_plain`'s dict."""

    arrays = {k: d[k].numpy() for k in ("placement", "node", "kind", "target")}
    return TeacherSample(seed=int(d["seed"]), **arrays)


def _epoch(
    policy: GiPHPolicy,
    optim: torch.optim.Optimizer,
    samples: list[Any],
    builders: dict[int, Any],
    cfg: TrainConfig,
    epoch: int,
) -> dict[str, float]:
    """One pass over the teacher's samples in shuffled minibatches; mean loss and top-1 agreement."""

    order = np.random.default_rng([cfg.seed, epoch]).permutation(len(samples))
    policy.train()
    losses, agree = [], []
    for lo in range(0, len(order), BATCH):
        optim.zero_grad()
        batch = [samples[int(i)] for i in order[lo : lo + BATCH]]
        total = torch.zeros(())
        for s in batch:
            if s.seed not in builders:
                builders[s.seed] = GpNetBuilder(training_problem(s.seed, cfg.distribution, MAX_TASKS))
            loss, top = imitation_loss(policy, builders[s.seed], s, with_top=True)
            total = total + loss / len(batch)
            losses.append(float(loss.detach()))
            agree.append(float(s.target[top] / s.target.max()))
        total.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 5.0)
        optim.step()
    policy.eval()
    return {
        "loss": float(np.mean(losses)) if losses else 0.0,
        "agreement": float(np.mean(agree)) if agree else 0.0,
        "samples": float(len(samples)),
        "improvement": float("nan"),
        "entropy": float("nan"),
    }


def _reinforce(
    policy: GiPHPolicy, optim: torch.optim.Optimizer, baseline: np.ndarray, cfg: TrainConfig, episodes: list[Any]
) -> tuple[np.ndarray, dict[str, float]]:
    """One REINFORCE step on the update's episodes; the new per-batch baseline and the step's statistics."""

    longest = max((len(e.batches) for e in episodes), default=0)
    if baseline.size < longest:
        baseline = np.concatenate([baseline, np.zeros(longest - baseline.size)])
    advantages = []
    for e in episodes:
        returns = discounted(e.rewards, cfg.gamma)
        k = returns.size
        advantages.append(returns - baseline[:k])
        baseline[:k] = cfg.baseline_momentum * baseline[:k] + (1 - cfg.baseline_momentum) * returns
    flat = np.concatenate(advantages) if advantages else np.zeros(0)
    scale = float(flat.std()) + 1e-8 if flat.size else 1.0
    steps = max(1, int(flat.size))
    policy.train()
    optim.zero_grad()
    loss_total = 0.0
    for e, adv in zip(episodes, advantages, strict=True):
        loss = episode_loss(policy, e, adv / scale, cfg.distribution, MAX_TASKS, 1.0) / steps
        if loss.requires_grad:
            loss.backward()
        loss_total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 5.0)
    optim.step()
    policy.eval()
    return baseline, {
        "loss": loss_total,
        "improvement": float(np.mean([1 - e.best_makespan / e.start_makespan for e in episodes])),
        "entropy": float("nan"),
        "batches": float(np.mean([len(e.batches) for e in episodes])),
    }
