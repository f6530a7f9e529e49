"""TrainConfig: every knob of cost-model training (GNN modes full | gst | gst+e | gst+ef | gst+efd, and trees)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch

from mlsysopt.costmodel.limits import check_epochs
from mlsysopt.errors import InvalidOption

MODES: tuple[str, ...] = ("full", "gst", "gst+e", "gst+ef", "gst+efd")
#: The non-GNN baselines: gradient-boosted trees on flattened configuration features (trees.py, boosting.py):
#: scikit-learn's regressor, LightGBM lambdarank, XGBoost rank:pairwise.
TREES = "trees"
TREE_MODES: tuple[str, ...] = (TREES, "lightgbm", "xgboost")
ALL_MODES: tuple[str, ...] = (*MODES, *TREE_MODES)
HISTORY_KEYS: tuple[str, ...] = ("signature", "config")
SED_POLICIES: tuple[str, ...] = ("uniform", "age")
REFRESH: tuple[str, ...] = ("varying", "stalest", "none")
SAMPLES: tuple[str, ...] = ("varying", "uniform")
AUTO = "auto"
#: The step-memory budget (MB) ``k="auto"`` fills when no ``memory_budget_mb`` is given.
DEFAULT_BUDGET_MB = 256.0
#: Boosting rounds a tree mode trains when no ``rounds`` is given (validation then picks 50, 100, 200 or all of them).
DEFAULT_ROUNDS = 400
#: Most boosting rounds of a tree mode (``--rounds``).
MAX_ROUNDS = 10_000
#: The reference's segment size: ``segment_size="auto"`` uses it, or the whole graph when that is smaller.
AUTO_SEGMENT_CAP = 1000


@dataclass
class TrainConfig:
    """Every knob of cost-model training; ``validate`` raises InvalidOption on one out of range.

    Args:
        mode: ``"full"``, ``"gst"``, ``"gst+e"``, ``"gst+ef"``, ``"gst+efd"`` (GNN) or ``"trees"``, ``"lightgbm"``,
            ``"xgboost"`` (tree baselines).
        segment_size: Nodes per segment, >= 1 (``"auto"``: 1000, or the largest training graph when smaller).
        segmenter: ``"auto"``, ``"contiguous"`` or ``"metis"`` (auto: contiguous for layout/tile, metis for MalNet).
        k: Segments sampled for gradients per step, >= 1 (``"auto"``: as many as the memory budget holds).
        memory_budget_mb: Step-memory budget in MB that ``k="auto"`` fills, > 0 (None: 256 MB).
        sed_p: Stale-embedding dropout probability, in [0, 1).
        sed_policy: ``"uniform"`` (drop with ``sed_p``) or ``"age"`` (``sed_p * min(1, age / sed_tau)``).
        sed_tau: Age scale in epochs of the ``age`` policy, >= 0.
        history_key: History rows keyed by segment ``"signature"`` (shared across configs) or by ``"config"``.
        refresh: No-grad recompute of stale segments: ``"varying"``, ``"stalest"`` or ``"none"``.
        refresh_segments: Segments refreshed per step with ``refresh="stalest"``, >= 0.
        sample: Segments that get gradients: ``"varying"`` (where the step's configs differ) or ``"uniform"``.
        epochs: Training epochs, >= 1.
        lr: Adam learning rate, > 0.
        weight_decay: Weight decay, >= 0.
        loss: Loss name (``hinge``, ``listmle``, ``mse``, ``logmse``, ``ce``) or ``"auto"`` (hinge / ce).
        configs_per_graph: Configurations per graph per step, >= 2.
        graphs_per_step: Graphs per optimizer step, >= 1.
        finetune_epochs: Epochs of the fine-tuning (F) phase, >= 0.
        finetune_lr: Learning rate of the F phase, > 0 (None: ``lr``).
        finetune_configs: Configurations per graph in the F phase, >= 2.
        eval_chunk: Configurations scored at once at evaluation, >= 1.
        validate_every: Validate every this many epochs, >= 1.
        valid_configs: Most configurations per graph scored at validation, >= 0 (0: all).
        cache_mb: Memory in MB for graphs kept between epochs, >= 0.
        grad_clip: Largest gradient norm, > 0 (None: no clipping).
        seed: Seed, >= 0.
        rounds: Most boosting rounds of a tree mode, 1 to 10,000 (None: 400); validation picks how many are used.
            Only for the tree modes.
        device: Torch device, e.g. ``"cpu"`` or ``"cuda"``.
        prune_hops: Keep configurable nodes plus this many hops, >= 0 (``"auto"``: layout with a ranking loss keeps
            L hops; None: no pruning).
        keep_best: Evaluate and predict with the weights of the best validation epoch.
        measure_memory: Measure tensor memory every N-th step, >= 0 (0: never).
        cache_dir: Folder caching segmentations (None: no disk cache).

    Raises:
        InvalidOption: From :meth:`validate`, for an option out of range or an unavailable device.
    """

    mode: str = "gst+efd"
    segment_size: int | str = AUTO  # auto: 1000 nodes, or the largest (pruned) training graph when smaller
    segmenter: str = "auto"  # contiguous for layout/tile, metis for malnet (as in the reference)
    k: int | str = AUTO  # auto: as many sampled segments as the memory budget holds (probed on a configurable one)
    memory_budget_mb: float | None = None  # step-memory budget for k (auto: DEFAULT_BUDGET_MB)
    sed_p: float = 0.5
    sed_policy: str = "uniform"  # uniform: drop with p | age: p * min(1, age / sed_tau epochs)
    sed_tau: float = 4.0
    history_key: str = "signature"  # rows shared by configurations that agree on a segment | "config" (reference)
    refresh: str = "varying"  # no-grad recompute of stale segments: varying | stalest | none (the reference)
    refresh_segments: int = 8  # how many, for refresh="stalest"
    sample: str = "varying"  # segments that get gradients: varying (where the step's configs differ) | uniform
    epochs: int = 10
    lr: float = 1e-3
    weight_decay: float = 0.0
    loss: str = "auto"  # hinge for ranking, ce for malnet
    configs_per_graph: int = 32
    graphs_per_step: int = 1
    finetune_epochs: int = 10
    finetune_lr: float | None = None
    finetune_configs: int = 256
    eval_chunk: int = 256
    validate_every: int = 1
    valid_configs: int = 128  # validation scores at most this many configurations per graph (fixed); 0: all
    cache_mb: float = 1024.0  # graphs kept in memory between epochs (records and their plans), most recent first
    grad_clip: float | None = 1.0
    seed: int = 0
    rounds: int | None = None  # tree modes: most boosting rounds (None: DEFAULT_ROUNDS); not for the GNN modes
    device: str = "cpu"
    prune_hops: int | str | None = AUTO  # auto: layout graphs with a ranking loss keep configurable nodes + L hops
    keep_best: bool = True  # evaluate the test split (and predict) with the weights of the best validation epoch
    measure_memory: int = 16  # measure the tensor memory of every N-th step of an epoch (from its first); 0: never
    cache_dir: str | None = None

    def validate(self) -> None:
        """Raise InvalidOption naming the first bad option."""
        if self.mode not in ALL_MODES:
            raise InvalidOption(f"unknown mode '{self.mode}' (choose from: {', '.join(ALL_MODES)})")
        for name, allowed in (
            ("history_key", HISTORY_KEYS),
            ("sed_policy", SED_POLICIES),
            ("refresh", REFRESH),
            ("sample", SAMPLES),
        ):
            if getattr(self, name) not in allowed:
                raise InvalidOption(f"unknown {name.replace('_', ' ')} '{getattr(self, name)}' "
                                    f"(choose from: {', '.join(allowed)})")  # fmt: skip
        if self.segmenter not in ("auto", "contiguous", "metis"):
            raise InvalidOption(f"unknown segmenter '{self.segmenter}' (choose from: auto, contiguous, metis)")
        ints = {"epochs": 1, "finetune_epochs": 0, "configs_per_graph": 2}
        ints |= {name: 1 for name in ("segment_size", "k") if getattr(self, name) != AUTO}
        ints |= {"graphs_per_step": 1, "finetune_configs": 2, "eval_chunk": 1, "seed": 0, "refresh_segments": 0}
        ints |= {"validate_every": 1, "measure_memory": 0, "valid_configs": 0}
        for name, low in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise InvalidOption(f"{name.replace('_', ' ')} must be an integer >= {low}, got {value!r}")
        check_epochs(self.epochs, self.finetune_epochs, self.validate_every)
        self._check_rounds()
        if not 0.0 <= self.sed_p < 1.0:
            raise InvalidOption(f"SED probability must be in [0, 1), got {self.sed_p}")
        for name in ("sed_tau", "cache_mb") + (("memory_budget_mb",) if self.memory_budget_mb is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise InvalidOption(f"{name.replace('_', ' ')} must be a finite number >= 0, got {value!r}")
        if self.memory_budget_mb is not None and self.memory_budget_mb <= 0:
            raise InvalidOption(f"memory budget must be > 0 MB, got {self.memory_budget_mb}")
        if not self.lr > 0 or (self.finetune_lr is not None and not self.finetune_lr > 0) or self.weight_decay < 0:
            raise InvalidOption("learning rates must be > 0 and weight decay >= 0")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise InvalidOption(f"grad clip must be > 0 or None, got {self.grad_clip}")
        if self.prune_hops not in (None, AUTO) and (isinstance(self.prune_hops, (bool, str)) or self.prune_hops < 0):
            raise InvalidOption(f"prune hops must be an integer >= 0, auto or None, got {self.prune_hops!r}")
        if not isinstance(self.keep_best, bool):
            raise InvalidOption(f"keep best must be true or false, got {self.keep_best!r}")
        check_device(self.device)

    def _check_rounds(self) -> None:
        if self.rounds is None:
            return
        if self.mode not in TREE_MODES:
            raise InvalidOption(f"--rounds is for the tree modes ({', '.join(TREE_MODES)}): --mode {self.mode} "
                                "trains a GNN for --epochs")  # fmt: skip
        r = self.rounds
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 1 <= r <= MAX_ROUNDS:
            raise InvalidOption(f"--rounds {r!r}: must be an integer between 1 and {MAX_ROUNDS:,} (boosting rounds)")

    @property
    def boosting_rounds(self) -> int:
        """The most boosting rounds a tree mode trains (``rounds``, or :data:`DEFAULT_ROUNDS`)."""
        return DEFAULT_ROUNDS if self.rounds is None else int(self.rounds)

    @property
    def finetunes(self) -> bool:
        """True for the modes with the F phase."""
        return self.mode in ("gst+ef", "gst+efd")

    @property
    def uses_table(self) -> bool:
        """True for the modes that read stale units from the history table (E)."""
        return self.mode in ("gst+e", "gst+ef", "gst+efd")

    @property
    def budget_mb(self) -> float:
        """The step-memory budget k is chosen from."""
        return DEFAULT_BUDGET_MB if self.memory_budget_mb is None else float(self.memory_budget_mb)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Rebuild from :meth:`to_dict` output, ignoring keys this build does not know."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def check_device(device: str) -> None:
    """InvalidOption unless ``device`` is ``cpu``, ``cuda`` or ``cuda:N`` and available here."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise InvalidOption(f"--device '{device}': choose cpu or cuda (cuda:N); mlsysopt trains on CPUs and CUDA GPUs")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidOption(f"device '{device}' requested but CUDA is not available")
