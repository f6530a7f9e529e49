"""Cost-model checkpoint files: one per run, written atomically, checked against the model on load.

This module knows the file format only (a tagged dict of tensors and plain values); what goes into it is the
trainer's business (:meth:`mlsysopt.costmodel.trainer.Trainer.state_dict`), so the trainer imports this module
and never the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidCheckpoint
from mlsysopt.io import load_torch, save_torch_atomic

KIND = "mlsysopt-costmodel"
VERSION = 1
#: File name of the checkpoint inside a run directory.
CHECKPOINT_NAME = "checkpoint.pt"
#: Training options that change what the saved state means (segment ids in the table, the algorithm).
STATE_OPTIONS = ("mode", "segment_size", "segmenter", "prune_hops")


def checkpoint_path(path: str | Path) -> Path:
    """``path`` itself if it names a file, else ``path/checkpoint.pt``."""
    path = Path(path)
    return path / CHECKPOINT_NAME if path.is_dir() or not path.suffix else path


def tagged(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the kind and version header every cost-model checkpoint carries."""
    return {"kind": KIND, "version": VERSION, **state}


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` (tensors, dicts, lists, numbers, strings) to ``path`` via a temp file and a rename."""
    return save_torch_atomic(path, tagged(state))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, or raise InvalidCheckpoint saying why not.

    Args:
        path: The checkpoint file.

    Returns:
        dict[str, Any]: The checkpoint, with ``model_config``, ``train_config`` and ``model`` dicts.

    Raises:
        InvalidCheckpoint: If the file is unreadable, not a cost-model checkpoint, or of another version.
    """
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
            f"{k}={old.get(k)!r} (now {train_config[k]!r})" for k in STATE_OPTIONS if old.get(k) != train_config[k]
        ]
    if diffs:
        raise InvalidCheckpoint(
            f"{path}: written by an incompatible model: {', '.join(diffs)}; "
            "use the same options or start a new run directory"
        )
