"""Cost-model training checkpoints: one file per run, written atomically, checked against the model on load."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from mlsysopt.errors import InvalidCheckpoint
from mlsysopt.io import load_torch, save_torch_atomic

if TYPE_CHECKING:
    from mlsysopt.costmodel.train import Trainer

KIND = "mlsysopt-costmodel"
VERSION = 1
#: File name of the checkpoint inside a run directory.
CHECKPOINT_NAME = "checkpoint.pt"
#: Training options that change what the saved state means (segment ids in the table, the algorithm).
_STATE_OPTIONS = ("mode", "segment_size", "segmenter", "prune_hops")


def checkpoint_path(path: str | Path) -> Path:
    """``path`` itself if it names a file, else ``path/checkpoint.pt``."""
    path = Path(path)
    return path / CHECKPOINT_NAME if path.is_dir() or not path.suffix else path


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (tensors, dicts, lists, numbers, strings) to ``path`` via a temp file and a rename."""
    return save_torch_atomic(path, {"kind": KIND, "version": VERSION, **state})


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, or raise InvalidCheckpoint saying why not."""
    path = Path(path)
    data = load_torch(path, InvalidCheckpoint)
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise InvalidCheckpoint(f"{path}: not a cost-model checkpoint")
    if data.get("version") != VERSION:
        raise InvalidCheckpoint(f"{path}: checkpoint version {data.get('version')}, this build reads {VERSION}")
    for key in ("model_config", "train_config", "model"):
        if not isinstance(data.get(key), dict):
            raise InvalidCheckpoint(f"{path}: has no '{key}' dict")
    return data


def check_compatible(
    path: str | Path, data: dict[str, Any], model_config: dict[str, Any], train_config: dict[str, Any] | None = None
) -> None:
    """Raise InvalidCheckpoint naming every model field (and state-defining training option) that differs."""
    saved = data["model_config"]
    diffs = [f"{k}={saved.get(k)!r} (now {v!r})" for k, v in model_config.items() if saved.get(k) != v]
    if train_config is not None:
        old = data["train_config"]
        diffs += [
            f"{k}={old.get(k)!r} (now {train_config[k]!r})" for k in _STATE_OPTIONS if old.get(k) != train_config[k]
        ]
    if diffs:
        raise InvalidCheckpoint(
            f"{path}: written by an incompatible model: {', '.join(diffs)}; "
            "use the same options or start a new run directory"
        )


def trainer_state(trainer: Trainer) -> dict[str, Any]:
    """Everything needed to continue ``trainer`` exactly: weights, optimizers, table, epoch, history, RNG states."""
    return {
        "model_config": trainer.mc.to_dict(),
        "train_config": trainer.tc.to_dict(),
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "ft_optimizer": None if trainer.ft_optimizer is None else trainer.ft_optimizer.state_dict(),
        "table": trainer.table.state_dict(),
        "ft_configs": {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in trainer.ft_configs.items()},
        "epoch": trainer.epoch,
        "stats_ready": trainer.stats_ready,
        "history": trainer.history,
        "numpy_rng": trainer.rng.bit_generator.state,
        "torch_rng": torch.get_rng_state(),
    }


def restore_trainer(trainer: Trainer, path: str | Path, data: dict[str, Any] | None = None) -> None:
    """Load a checkpoint into ``trainer`` after checking it was written by a compatible model and mode."""
    data = load_checkpoint(path) if data is None else data
    check_compatible(path, data, trainer.mc.to_dict(), trainer.tc.to_dict())
    try:
        trainer.model.load_state_dict(data["model"])
        trainer.optimizer.load_state_dict(data["optimizer"])
        if data.get("ft_optimizer") is not None:
            trainer.freeze_backbone()
            assert trainer.ft_optimizer is not None
            trainer.ft_optimizer.load_state_dict(data["ft_optimizer"])
        trainer.table.load_state_dict(data["table"])
        trainer.ft_configs = {k: v.numpy() for k, v in data["ft_configs"].items()}
        trainer.epoch, trainer.stats_ready = int(data["epoch"]), bool(data["stats_ready"])
        trainer.history = list(data["history"])
        trainer.rng.bit_generator.state = data["numpy_rng"]
        torch.set_rng_state(data["torch_rng"])
    except (KeyError, AttributeError, RuntimeError, ValueError, TypeError) as exc:
        raise InvalidCheckpoint(f"{path}: cannot resume from it ({type(exc).__name__}: {exc})") from None
