"""Train the GiPH policy with REINFORCE on generated (graph, cluster) pairs.

Read top to bottom: :class:`TrainConfig` holds every knob; :func:`sample_problem` draws a layered DAG and a
heterogeneous cluster of varied sizes; :func:`rollout` plays one episode with the current policy (no grad, so
episodes can run in parallel through ``mlsysopt.runtime``: serial, a local process pool or Ray, with the same
result for the same seed); :func:`replay` recomputes the log-probabilities of the actions taken (deterministic:
same seed, same actions, same gpNets); :func:`train` runs the updates.

Rewards are the makespan decreases from the environment divided by the episode's start makespan (so graphs of
different scales weigh the same); returns are discounted with γ and a per-step running-mean baseline is
subtracted (REINFORCE with baseline, as in GiPH); advantages are divided by their standard deviation over the
update's episodes so that the policy-gradient term is not drowned by the entropy bonus, which keeps
exploration alive.
Checkpoints are written atomically every ``checkpoint_every`` updates, to a file or through a run folder
(:class:`~mlsysopt.io.RunDir`); ``resume=True`` continues from one. A wall-clock ``timeout`` ends the training
after the update in progress (checkpointed); when the executor is lost (the Ray head gone, workers that keep
dying) the last finished update is checkpointed and :class:`~mlsysopt.runtime.ExecutorLost` says how to resume.
:func:`training_run` prepares the run folder of ``mlsysopt placement train`` (settings.json, ``policy.pt``, the
resume check) before anything is created.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.io import RunDir
from mlsysopt.placement.checkpoint import IncompatibleCheckpoint, check_checkpoint, load_checkpoint, save_training_state
from mlsysopt.placement.config import CHECKPOINT, RESUMABLE, SYNTHETIC, TrainConfig
from mlsysopt.placement.env import PlacementEnv
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.placement.train_result import TrainResult, discounted
from mlsysopt.placement.train_search import train_search
from mlsysopt.runtime import Executor, ExecutorLost, make_executor
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.store.run import RunStore

__all__ = [
    "CHECKPOINT",
    "RESUMABLE",
    "SYNTHETIC",
    "TrainConfig",
    "TrainResult",
    "Trajectory",
    "discounted",
    "replay",
    "rollout",
    "sample_problem",
    "train",
    "training_run",
]


@dataclass
class Trajectory:
    """One episode: its problem seed, the actions taken and the normalized rewards."""

    seed: int
    actions: list[int]
    rewards: list[float]
    start_makespan: float
    best_makespan: float


def sample_problem(cfg: TrainConfig, seed: int) -> tuple[CompGraph, DeviceCluster]:
    """A layered DAG and a random cluster with sizes drawn from the config's ranges (synthetic)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(cfg.min_tasks, cfg.max_tasks + 1))
    d = int(rng.integers(cfg.min_devices, cfg.max_devices + 1))
    alpha = float(rng.choice(cfg.alphas))
    graph = layered_dag(n, alpha=alpha, p=cfg.edge_p, num_types=cfg.num_types, seed=int(rng.integers(2**31)))
    cluster = random_cluster(d, num_types=cfg.num_types, q=cfg.q, seed=int(rng.integers(2**31)))
    return graph, cluster


def _env(cfg: TrainConfig, seed: int) -> tuple[PlacementEnv, Any]:
    graph, cluster = sample_problem(cfg, seed)
    env = PlacementEnv(graph, cluster, steps_per_task=cfg.steps_per_task)
    obs, _ = env.reset(seed=seed)
    return env, obs


def rollout(args: tuple[dict[str, Any], dict[str, Any], dict[str, Any], int]) -> Trajectory:
    """Play one episode with a copy of the policy (picklable arguments, for any executor)."""
    policy_config, state, cfg_dict, seed = args
    cfg = TrainConfig(**cfg_dict)
    policy = GiPHPolicy(PolicyConfig(**policy_config))
    policy.load_state_dict(state)
    policy.eval()
    gen = torch.Generator().manual_seed(seed)
    env, obs = _env(cfg, seed)
    actions, rewards = [], []
    best = start = env.initial_makespan
    done = False
    with torch_threads(1), torch.no_grad():
        while not done:
            action = int(torch.multinomial(policy.distribution(obs).probs, 1, generator=gen).item())
            obs, reward, _, done, info = env.step(action)
            actions.append(action)
            rewards.append(reward / start)
            best = min(best, info["makespan"])
    return Trajectory(seed, actions, rewards, start, best)


def replay(policy: GiPHPolicy, cfg: TrainConfig, traj: Trajectory) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (with grad) and entropies of a trajectory's actions under ``policy``."""
    env, obs = _env(cfg, traj.seed)
    log_probs, entropies = [], []
    for action in traj.actions:
        dist = policy.distribution(obs)
        log_probs.append(dist.log_prob(torch.tensor(action)))
        entropies.append(dist.entropy())
        obs, *_ = env.step(action)
    return torch.stack(log_probs), torch.stack(entropies)


def train(
    cfg: TrainConfig,
    checkpoint: str | Path | RunDir | None = None,
    resume: bool = False,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
    executor: Executor | None = None,
) -> TrainResult:
    """Run REINFORCE updates; checkpoint atomically; resume from ``checkpoint`` when asked.

    Args:
        cfg: every knob of the training (``cfg.timeout``: stop after the update in progress once it has passed).
        checkpoint: a checkpoint file, or an open :class:`RunDir` whose checkpoint is used; None: no checkpoint.
        resume: continue from the checkpoint if there is one (else start fresh).
        on_update: called with (update, statistics) after every update.
        executor: where the rollouts run (kept open for the caller); default: ``make_executor(cfg.backend,
            cfg.workers, cfg.address)``, closed at the end. Every executor gives the same result.

    Raises:
        ExecutorLost: the executor cannot go on; the last finished update is checkpointed first (when there is a
            checkpoint), and the message says whether ``--resume`` continues.
    """
    cfg.validate()
    if cfg.stages != "reinforce":  # the shipped policy's pipeline: imitation, then REINFORCE on the search
        state = _read_checkpoint(checkpoint) if resume else None
        if state is not None:
            _check_resumable(state, checkpoint, cfg)
        return train_search(cfg, checkpoint, resume, on_update, executor, state)
    t0 = time.monotonic()
    torch.manual_seed(cfg.seed)
    policy = GiPHPolicy(PolicyConfig(hidden=cfg.hidden))
    optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    baseline = np.zeros(cfg.steps_per_task * cfg.max_tasks)
    history: list[dict[str, float]] = []
    first = 0
    data = _read_checkpoint(checkpoint) if resume else None
    if data is not None:
        _check_resumable(data, checkpoint, cfg)
        policy.load_state_dict(data["policy"])
        optim.load_state_dict(data["optimizer"])
        stored = np.asarray(data["baseline"], dtype=np.float64)[: baseline.size]
        baseline[: stored.size] = stored  # a larger max_tasks extends the baseline with zeros
        history = list(data["history"])
        first = int(data["update"]) + 1
    cfg_dict = asdict(cfg)
    saved = first - 1  # the last update held by the checkpoint

    def save(update: int) -> None:
        nonlocal saved
        if checkpoint is None or update < 0 or saved == update:
            return
        save_training_state(
            checkpoint, policy, optim, baseline=baseline.tolist(), history=history, update=update, train_config=cfg_dict
        )
        saved = update

    own = executor is None
    pool = make_executor(cfg.backend, cfg.workers, cfg.address) if executor is None else executor
    stopped_by = "updates"
    try:
        with torch_threads(1):
            for update in range(first, cfg.updates):
                seeds = [
                    cfg.seed * 1_000_003 + update * cfg.episodes_per_update + k for k in range(cfg.episodes_per_update)
                ]
                state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
                try:
                    trajs = pool.map(rollout, [(policy.config.to_dict(), state, cfg_dict, s) for s in seeds])
                except ExecutorLost as exc:
                    save(update - 1)  # the state after the last finished update: exact to resume from
                    raise ExecutorLost(_lost_message(exc, update, checkpoint)) from None
                stats = _update(policy, optim, baseline, cfg, trajs)
                stats = {"update": float(update), **stats}
                history.append(stats)
                if on_update is not None:
                    on_update(update, stats)
                timed_out = cfg.timeout is not None and time.monotonic() - t0 >= cfg.timeout
                if (update + 1) % cfg.checkpoint_every == 0 or update == cfg.updates - 1 or timed_out:
                    save(update)
                if timed_out and update < cfg.updates - 1:
                    stopped_by = "timeout"
                    break
    finally:
        if own:
            pool.close()
    return TrainResult(policy.eval(), history, stopped_by)


def _check_resumable(data: dict[str, Any], checkpoint: Any, cfg: TrainConfig) -> None:
    """IncompatibleCheckpoint / MlsysoptError when ``data`` cannot continue a training with ``cfg``."""
    missing = [k for k in ("optimizer", "baseline", "history", "update") if k not in data]
    if missing:
        raise IncompatibleCheckpoint(f"{checkpoint}: holds a policy only (no {missing[0]}), so it cannot resume")
    saved = data.get("train_config", {})
    for key in ("hidden", "stages", "kinds"):
        if key in saved and saved[key] != getattr(cfg, key):
            raise MlsysoptError(f"{checkpoint}: trained with {key}={saved[key]}, not {getattr(cfg, key)}")


def _update(
    policy: GiPHPolicy, optim: torch.optim.Optimizer, baseline: np.ndarray, cfg: TrainConfig, trajs: list[Trajectory]
) -> dict[str, float]:
    """One REINFORCE step on an update's trajectories (updates ``baseline`` in place); its statistics."""
    policy.train()
    optim.zero_grad()
    advantages = []
    for traj in trajs:
        returns = discounted(traj.rewards, cfg.gamma)
        steps = len(returns)
        advantages.append(returns - baseline[:steps])
        baseline[:steps] = cfg.baseline_momentum * baseline[:steps] + (1 - cfg.baseline_momentum) * returns
    # Unit-scale advantages: raw makespan decreases are tiny next to the entropy bonus otherwise.
    scale = float(np.concatenate(advantages).std()) + 1e-8
    total_steps = sum(len(a) for a in advantages)
    loss_total, ent_total = 0.0, 0.0
    for traj, adv in zip(trajs, advantages, strict=True):
        log_probs, entropies = replay(policy, cfg, traj)
        weight = torch.as_tensor(adv / scale, dtype=torch.float32)
        loss = (-(log_probs * weight).sum() - cfg.entropy * entropies.sum()) / total_steps
        loss.backward()
        loss_total += float(loss.detach())
        ent_total += float(entropies.detach().mean()) / len(trajs)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 5.0)
    optim.step()
    return {
        "loss": loss_total,
        "entropy": ent_total,
        "improvement": float(np.mean([1 - t.best_makespan / t.start_makespan for t in trajs])),
    }


def _lost_message(exc: ExecutorLost, update: int, checkpoint: str | Path | RunDir | None) -> str:
    where = checkpoint.checkpoint if isinstance(checkpoint, RunDir) else checkpoint
    if checkpoint is None:
        return f"{exc}; training stopped in update {update + 1} (no checkpoint was asked for)"
    if update == 0 and not Path(str(where)).exists():
        return f"{exc}; training stopped in its first update, before any checkpoint: start it again"
    return f"{exc}; training stopped in update {update + 1}, {where} holds the updates before it: --resume continues"


def _read_checkpoint(checkpoint: str | Path | RunDir | None) -> dict[str, Any] | None:
    """The checkpoint to resume from, or None when there is none yet."""
    if isinstance(checkpoint, RunDir):
        if not checkpoint.has_checkpoint:
            return None
        return check_checkpoint(checkpoint.load_checkpoint(IncompatibleCheckpoint), checkpoint.checkpoint)
    if checkpoint is None or not Path(checkpoint).exists():
        return None
    return load_checkpoint(checkpoint)


def training_run(out: str | Path, options: dict[str, Any], resume: bool) -> tuple[RunDir, TrainConfig, int]:
    """The (unopened, checked) run folder of a training, its config and the first update to run.

    ``options`` are the settings given (TrainConfig fields). On ``resume`` the others come from the run's
    ``settings.json``; only :data:`RESUMABLE` ones may differ (the error names every other one that does), and
    the checkpoint must hold a training state. Nothing is created: enter ``with run:`` to start.

    Args:
        out: The run folder.
        options: The settings given, by :class:`TrainConfig` field name.
        resume: Continue the training in ``out`` (from its checkpoint) instead of starting a new one.

    Returns:
        ``(run, config, first_update)``: the checked run folder, the validated config and the index of the first
        update to run (0 for a new training).

    Raises:
        InvalidRunDir: If the folder cannot be used (e.g. ``resume`` without a run there, or changed settings).
        IncompatibleCheckpoint: If the checkpoint cannot be read or holds no training state.
        MlsysoptError: If a setting is out of range (see :meth:`TrainConfig.validate`) or the study store is unusable.
    """
    saved: dict[str, Any] = {}
    first = 0
    if resume:
        probe = RunDir(out, options, resume=True, resumable=RESUMABLE, checkpoint=CHECKPOINT, sink=RunStore).check()
        saved = probe.previous_settings or {}
        data = load_checkpoint(probe.checkpoint)
        if "update" not in data or "optimizer" not in data:
            raise IncompatibleCheckpoint(f"--resume: {probe.checkpoint} holds a policy but no training state")
        first = int(data["update"]) + 1
    cfg = TrainConfig.from_dict({**saved, **options})
    cfg.validate()
    run = RunDir(out, asdict(cfg), resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT, sink=RunStore).check()
    return run, cfg, first
