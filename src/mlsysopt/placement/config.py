"""Every knob of GiPH training (:class:`TrainConfig`), validated, with its size limits; no torch imported here.

The command line reads the defaults shown by ``--help`` from here, and :mod:`mlsysopt.placement.training` trains
with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Integral
from typing import Any

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.placement.limits import check_training
from mlsysopt.runtime import BACKENDS, check_backend

#: The checkpoint file of a training run folder, and the settings ``--resume`` may change.
CHECKPOINT = "policy.pt"
RESUMABLE = ("updates", "workers", "backend", "address", "timeout")
#: What the training data is, for every output that reports on a training.
SYNTHETIC = "synthetic training data (layered DAGs + random clusters)"
MIXED = (
    "layered DAGs (synthetic), WfChef workflow recipes (fitted to real traces) and traced DNNs, on preset-like "
    "(real device figures) and random clusters"
)
#: The training pipelines: the shipped policy's (imitation of a steepest-descent teacher, then REINFORCE on the
#: local search) and the paper's (REINFORCE on relocation walks from scratch).
STAGES = ("imitation+reinforce", "reinforce")
DISTRIBUTIONS = ("mixed", "layered")


@dataclass
class TrainConfig:
    """Every knob of GiPH training (the paper's stage follows the GiPH reference where it has one).

    ``stages="imitation+reinforce"`` (default): the policy first imitates a steepest-descent teacher on
    ``imitation_problems`` problems of ``distribution`` (``teacher_steps`` moves each from two starts, every
    critical-path move evaluated and scored), for ``imitation_epochs`` epochs; then ``updates`` REINFORCE updates of
    ``episodes_per_update`` local-search episodes (``search_budget_per_task`` evaluations per task, rewards = the
    makespan decrease of each batch of proposals) fine-tune it at ``finetune_lr``. ``stages="reinforce"`` is the
    paper's training: REINFORCE on relocation walks from random placements, from scratch, at ``lr``, on GiPH's
    layered DAGs (``min_tasks``..``max_tasks`` tasks, ``min_devices``..``max_devices`` devices) whatever the
    ``distribution``. :meth:`validate` checks every knob.

    Args:
        stages: ``imitation+reinforce`` (the shipped policy's pipeline) or ``reinforce`` (the paper's).
        distribution: Training problems: ``mixed`` or ``layered``.
        imitation_problems: Problems the teacher is imitated on (>= 0).
        teacher_steps: Teacher moves per start (>= 0).
        imitation_epochs: Epochs over the imitation data (>= 0).
        imitation_lr: Learning rate of imitation (> 0).
        finetune_lr: Learning rate of the REINFORCE fine-tuning on the local search (> 0).
        search_budget_per_task: Simulator evaluations per task of a fine-tuning episode (>= 1).
        kinds: Scores per gpNet node: 1 (relocation only) or 3 (relocate, swap, chain).
        updates: REINFORCE updates (>= 0; >= 1 for ``reinforce``).
        episodes_per_update: Episodes per update (>= 1).
        min_tasks: Fewest tasks of a generated graph (>= 2).
        max_tasks: Most tasks of a generated graph (>= ``min_tasks``).
        min_devices: Fewest devices of a generated cluster (>= 1).
        max_devices: Most devices of a generated cluster (>= ``min_devices``).
        alphas: Shape parameters (> 0) of the layered DAGs, drawn from.
        edge_p: Edge probability of the layered DAGs, in [0, 1].
        num_types: Hardware types of generated problems (>= 1).
        q: Probability in (0, 1] that a device supports a type.
        steps_per_task: Relocations per task of a paper episode (>= 1).
        gamma: Discount factor, in (0, 1].
        lr: Learning rate of the paper's REINFORCE (> 0).
        entropy: Weight of the entropy bonus (>= 0).
        baseline_momentum: Momentum of the moving-average reward baseline, in [0, 1).
        hidden: Hidden size of the policy (>= 1).
        seed: Seed of the problems and the policy's initialization.
        workers: Parallel workers for episodes (>= 1).
        backend: ``local`` or ``ray``.
        address: Ray cluster (None: a private instance, ``auto`` or ``HOST:PORT``); only with ``ray``.
        timeout: Wall-clock seconds of one training call (> 0); None: no limit.
        checkpoint_every: Updates between checkpoints (>= 1).
    """

    stages: str = "imitation+reinforce"
    distribution: str = "mixed"
    imitation_problems: int = 120
    teacher_steps: int = 8
    imitation_epochs: int = 6
    imitation_lr: float = 3e-3
    finetune_lr: float = 1e-3
    search_budget_per_task: int = 4
    kinds: int = 3
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
    address: str | None = None  # with backend ray: None (a private instance), "auto" or HOST:PORT
    timeout: float | None = None  # wall-clock seconds of one train() call; None: no limit
    checkpoint_every: int = 1

    def validate(self) -> None:
        """Raise MlsysoptError on a knob outside its range or of the wrong type, or a size over its limit."""
        ints = ("updates", "episodes_per_update", "min_tasks", "max_tasks", "min_devices", "max_devices")
        ints += ("num_types", "steps_per_task", "hidden", "seed", "workers", "checkpoint_every")
        ints += ("imitation_problems", "teacher_steps", "imitation_epochs", "search_budget_per_task", "kinds")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral):
                raise InvalidOption(f"{name} must be an integer, got {value!r}")
        keys = ("gamma", "lr", "entropy", "baseline_momentum", "edge_p", "q", "imitation_lr", "finetune_lr")
        numbers = {k: getattr(self, k) for k in keys}
        numbers.update({f"alphas[{i}]": a for i, a in enumerate(self.alphas)}, timeout=self.timeout or 1.0)
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise InvalidOption(f"{name} must be a number, got {value!r}")
        if self.stages not in STAGES:
            raise InvalidOption(f"unknown stages '{self.stages}' (choose from: {', '.join(STAGES)})")
        if self.distribution not in DISTRIBUTIONS:
            raise InvalidOption(f"unknown distribution '{self.distribution}' (choose from: {', '.join(DISTRIBUTIONS)})")
        if min(self.imitation_problems, self.teacher_steps, self.imitation_epochs) < 0:
            raise InvalidOption("imitation_problems, teacher_steps and imitation_epochs must be >= 0")
        if self.search_budget_per_task < 1 or self.kinds not in (1, 3):
            raise InvalidOption("need search_budget_per_task >= 1 and kinds 1 or 3")
        for name in ("imitation_lr", "finetune_lr"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise InvalidOption(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        if self.updates < 0 or self.episodes_per_update < 1:
            raise MlsysoptError("need updates >= 0 and episodes_per_update >= 1")
        if self.stages == "reinforce" and self.updates < 1:
            raise MlsysoptError("updates must be >= 1 for the paper's REINFORCE training")
        if not 2 <= self.min_tasks <= self.max_tasks or not 1 <= self.min_devices <= self.max_devices:
            raise MlsysoptError("need 2 <= min_tasks <= max_tasks and 1 <= min_devices <= max_devices")
        if min(self.num_types, self.steps_per_task, self.hidden, self.workers, self.checkpoint_every) < 1:
            raise MlsysoptError("num_types, steps_per_task, hidden, workers and checkpoint_every must be >= 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InvalidOption(f"lr must be a finite number > 0, got {self.lr}")
        if not 0 < self.gamma <= 1:
            raise InvalidOption(f"need 0 < gamma <= 1, got {self.gamma}")
        if not (math.isfinite(self.entropy) and self.entropy >= 0) or not 0 <= self.baseline_momentum < 1:
            raise InvalidOption("need a finite entropy >= 0 and 0 <= baseline_momentum < 1")
        if not (0 <= self.edge_p <= 1 and 0 < self.q <= 1 and self.alphas and all(a > 0 for a in self.alphas)):
            raise InvalidOption("need 0 <= edge_p <= 1, 0 < q <= 1 and alphas > 0")
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise InvalidOption(f"timeout must be a finite number of seconds > 0, got {self.timeout}")
        if self.backend not in BACKENDS:
            raise MlsysoptError(f"unknown backend '{self.backend}' (choose from: {', '.join(BACKENDS)})")
        check_backend(self.backend, self.address)
        check_training(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from saved settings (unknown keys are ignored; JSON lists become tuples)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "alphas" in values:
            values["alphas"] = tuple(values["alphas"])
        return cls(**values)
