"""Train the GiPH policy with REINFORCE on generated (graph, cluster) pairs.

Read top to bottom: :class:`TrainConfig` holds every knob; :func:`sample_problem` draws a layered DAG and a
heterogeneous cluster of varied sizes; :func:`rollout` plays one episode with the current policy (no grad, so
episodes can run in parallel through ``mlsysopt.runtime``); :func:`replay` recomputes the log-probabilities of
the actions taken (deterministic: same seed, same actions, same gpNets); :func:`train` runs the updates.

Rewards are the makespan decreases from the environment divided by the episode's start makespan (so graphs of
different scales weigh the same); returns are discounted with γ and a per-step running-mean baseline is
subtracted (REINFORCE with baseline, as in GiPH); advantages are divided by their standard deviation over the
update's episodes so that the policy-gradient term is not drowned by the entropy bonus, which keeps
exploration alive.
Checkpoints are written atomically every ``checkpoint_every`` updates, to a file or through a run folder
(:class:`~mlsysopt.io.RunDir`); ``resume=True`` continues from one. :func:`training_run` prepares the run folder
of ``mlsysopt placement train`` (settings.json, ``policy.pt``, the resume check) before anything is created.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.io import RunDir, save_torch_atomic
from mlsysopt.placement.checkpoint import IncompatibleCheckpoint, check_checkpoint, checkpoint_state, load_checkpoint
from mlsysopt.placement.env import PlacementEnv
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.runtime import BACKENDS, make_executor
from mlsysopt.runtime.threads import torch_threads

#: The checkpoint file of a training run folder, and the settings ``--resume`` may change.
CHECKPOINT = "policy.pt"
RESUMABLE = ("updates", "workers", "backend")
#: What the training data is, for every output that reports on a training.
SYNTHETIC = "synthetic training data (layered DAGs + random clusters)"


@dataclass
class TrainConfig:
    """Every knob of GiPH training (defaults follow the GiPH reference where it has one)."""

    updates: int = 50
    episodes_per_update: int = 4
    min_tasks: int = 10
    max_tasks: int = 50
    min_devices: int = 10
    max_devices: int = 20
    alphas: tuple[float, ...] = (0.2, 0.3, 0.5)
    edge_p: float = 0.2
    num_types: int = 5
    q: float = 0.5
    steps_per_task: int = 2
    gamma: float = 0.97
    lr: float = 0.01
    entropy: float = 0.01
    baseline_momentum: float = 0.9
    hidden: int = 32
    seed: int = 0
    workers: int = 1
    backend: str = "local"
    checkpoint_every: int = 5

    def validate(self) -> None:
        """Raise MlsysoptError on a knob outside its range."""
        if self.updates < 1 or self.episodes_per_update < 1:
            raise MlsysoptError("updates and episodes_per_update must be >= 1")
        if not 2 <= self.min_tasks <= self.max_tasks or not 1 <= self.min_devices <= self.max_devices:
            raise MlsysoptError("need 2 <= min_tasks <= max_tasks and 1 <= min_devices <= max_devices")
        if not 0 < self.gamma <= 1 or self.lr <= 0:
            raise MlsysoptError("need 0 < gamma <= 1 and lr > 0")
        if self.backend not in BACKENDS:
            raise MlsysoptError(f"unknown backend '{self.backend}' (choose from: {', '.join(BACKENDS)})")
        if self.backend == "ray":
            import importlib.util

            if importlib.util.find_spec("ray") is None:
                raise MlsysoptError("backend 'ray' needs Ray: pip install 'mlsysopt[ray]' (or use backend local)")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from saved settings (unknown keys are ignored; JSON lists become tuples)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "alphas" in values:
            values["alphas"] = tuple(values["alphas"])
        return cls(**values)


@dataclass
class Trajectory:
    """One episode: its problem seed, the actions taken and the normalized rewards."""

    seed: int
    actions: list[int]
    rewards: list[float]
    start_makespan: float
    best_makespan: float


@dataclass
class TrainResult:
    """The trained policy and per-update statistics."""

    policy: GiPHPolicy
    history: list[dict[str, float]] = field(default_factory=list)


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


def discounted(rewards: list[float], gamma: float) -> np.ndarray:
    """Returns-to-go ``G_t = r_t + γ G_{t+1}``."""
    out = np.zeros(len(rewards))
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def train(
    cfg: TrainConfig,
    checkpoint: str | Path | RunDir | None = None,
    resume: bool = False,
    on_update: Callable[[int, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Run REINFORCE updates; checkpoint atomically; resume from ``checkpoint`` when asked.

    Args:
        cfg: every knob of the training.
        checkpoint: a checkpoint file, or an open :class:`RunDir` whose checkpoint is used; None: no checkpoint.
        resume: continue from the checkpoint if there is one (else start fresh).
        on_update: called with (update, statistics) after every update.
    """
    cfg.validate()
    torch.manual_seed(cfg.seed)
    policy = GiPHPolicy(PolicyConfig(hidden=cfg.hidden))
    optim = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    baseline = np.zeros(cfg.steps_per_task * cfg.max_tasks)
    history: list[dict[str, float]] = []
    first = 0
    data = _read_checkpoint(checkpoint) if resume else None
    if data is not None:
        missing = [k for k in ("optimizer", "baseline", "history", "update") if k not in data]
        if missing:
            raise IncompatibleCheckpoint(f"{checkpoint}: holds a policy only (no {missing[0]}), so it cannot resume")
        if data.get("train_config", {}).get("hidden", cfg.hidden) != cfg.hidden:
            raise MlsysoptError(f"{checkpoint}: trained with hidden={data['train_config']['hidden']}, not {cfg.hidden}")
        policy.load_state_dict(data["policy"])
        optim.load_state_dict(data["optimizer"])
        stored = np.asarray(data["baseline"], dtype=np.float64)[: baseline.size]
        baseline[: stored.size] = stored  # a larger max_tasks extends the baseline with zeros
        history = list(data["history"])
        first = int(data["update"]) + 1
    cfg_dict = asdict(cfg)
    with make_executor(cfg.backend, cfg.workers) as executor, torch_threads(1):
        for update in range(first, cfg.updates):
            seeds = [
                cfg.seed * 1_000_003 + update * cfg.episodes_per_update + k for k in range(cfg.episodes_per_update)
            ]
            state = {k: v.detach().clone() for k, v in policy.state_dict().items()}
            trajs = executor.map(rollout, [(policy.config.to_dict(), state, cfg_dict, s) for s in seeds])
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
            stats = {
                "update": float(update),
                "loss": loss_total,
                "entropy": ent_total,
                "improvement": float(np.mean([1 - t.best_makespan / t.start_makespan for t in trajs])),
            }
            history.append(stats)
            if on_update is not None:
                on_update(update, stats)
            last = update == cfg.updates - 1
            if checkpoint is not None and ((update + 1) % cfg.checkpoint_every == 0 or last):
                state = checkpoint_state(
                    policy,
                    optimizer=optim.state_dict(),
                    baseline=baseline.tolist(),
                    history=history,
                    update=update,
                    train_config=cfg_dict,
                )
                if isinstance(checkpoint, RunDir):
                    checkpoint.save_checkpoint(state)
                else:
                    save_torch_atomic(checkpoint, state)
    return TrainResult(policy.eval(), history)


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
    """
    saved: dict[str, Any] = {}
    first = 0
    if resume:
        probe = RunDir(out, options, resume=True, resumable=RESUMABLE, checkpoint=CHECKPOINT).check()
        saved = probe.previous_settings or {}
        data = load_checkpoint(probe.checkpoint)
        if "update" not in data or "optimizer" not in data:
            raise IncompatibleCheckpoint(f"--resume: {probe.checkpoint} holds a policy but no training state")
        first = int(data["update"]) + 1
    cfg = TrainConfig.from_dict({**saved, **options})
    cfg.validate()
    run = RunDir(out, asdict(cfg), resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT).check()
    return run, cfg, first
