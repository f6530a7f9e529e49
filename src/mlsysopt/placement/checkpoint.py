"""Policy checkpoints: written atomically, validated on load against this build's gpNet feature sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir, load_torch, save_torch_atomic
from mlsysopt.placement.gpnet import EDGE_DIM, NODE_DIM
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

#: The policy shipped with mlsysopt: imitation of the steepest-descent teacher on 300 problems of the mixed
#: training distribution, then 60 REINFORCE updates on the local search (the command is in the README and in
#: the checkpoint's ``trained_by``). ``--policy pretrained`` selects it on the CLI.
PRETRAINED = Path(__file__).parent / "pretrained" / "giph.pt"


def policy_path(policy: str | Path) -> Path:
    """``"pretrained"`` means the policy shipped with mlsysopt (:data:`PRETRAINED`); anything else is a path."""
    return PRETRAINED if str(policy) == "pretrained" else Path(policy)


class IncompatibleCheckpoint(MlsysoptError):
    """A checkpoint that this build cannot use (other feature sizes, not a GiPH checkpoint, unreadable)."""


def checkpoint_state(policy: GiPHPolicy, **extra: Any) -> dict[str, Any]:
    """The checkpoint dict of ``policy`` (and any training state in ``extra``)."""
    return {"kind": "giph-policy", "config": policy.config.to_dict(), "policy": policy.state_dict(), **extra}


def save_training_state(target: RunDir | str | Path, policy: GiPHPolicy, optimizer: Any, **extra: Any) -> None:
    """Write a training checkpoint (policy, optimizer state, ``extra``) into a run folder or a file, atomically."""
    data = checkpoint_state(policy, optimizer=optimizer.state_dict(), **extra)
    if isinstance(target, RunDir):
        target.save_checkpoint(data)
    else:
        save_torch_atomic(target, data)


def save_checkpoint(path: str | Path, policy: GiPHPolicy, **extra: Any) -> Path:
    """Write the policy (and any training state in ``extra``) to ``path`` atomically.

    Args:
        path: The checkpoint file (``.pt``); missing parent folders are created.
        policy: The policy to save (its config and weights).
        **extra: Further entries of the checkpoint dict (tensors and plain data only).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        WriteFailed: If the file cannot be written.
    """
    return save_torch_atomic(path, checkpoint_state(policy, **extra))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint dict (``"pretrained"``: the shipped one), or raise IncompatibleCheckpoint saying why.

    Args:
        path: A checkpoint file, or ``"pretrained"``.

    Returns:
        The checkpoint dict: ``kind``, ``config``, ``policy`` (state dict) and any training state.

    Raises:
        IncompatibleCheckpoint: If the file is missing, unreadable, not a GiPH checkpoint, or made for other gpNet
            feature sizes.
    """
    path = policy_path(path)
    return check_checkpoint(load_torch(path, IncompatibleCheckpoint), path)


def check_checkpoint(data: Any, path: str | Path) -> dict[str, Any]:
    """``data`` (read from ``path``) if it is a GiPH checkpoint this build can use; IncompatibleCheckpoint if not."""
    if not isinstance(data, dict) or data.get("kind") != "giph-policy":
        raise IncompatibleCheckpoint(f"{path}: not a GiPH policy checkpoint")
    cfg = data.get("config") or {}
    if not isinstance(cfg, dict):
        raise IncompatibleCheckpoint(f"{path}: its 'config' is not a dict")
    if cfg.get("node_dim") != NODE_DIM or cfg.get("edge_dim") != EDGE_DIM:
        raise IncompatibleCheckpoint(
            f"{path}: trained with {cfg.get('node_dim')} node / {cfg.get('edge_dim')} edge features, "
            f"this build's gpNet has {NODE_DIM} / {EDGE_DIM}: retrain with 'mlsysopt placement train'"
        )
    if not isinstance(data.get("policy"), dict):
        raise IncompatibleCheckpoint(f"{path}: has no 'policy' state dict")
    return data


def load_policy(path: str | Path) -> GiPHPolicy:
    """The policy stored in a checkpoint (``"pretrained"``: the policy shipped with mlsysopt).

    Args:
        path: A checkpoint file, or ``"pretrained"``.

    Returns:
        The policy, in eval mode, on the CPU.

    Raises:
        IncompatibleCheckpoint: If the checkpoint cannot be read, or its config or weights do not fit this build.
    """
    path = policy_path(path)
    data = load_checkpoint(path)
    try:
        policy = GiPHPolicy(PolicyConfig(**data["config"]))
    except (TypeError, ValueError) as exc:
        raise IncompatibleCheckpoint(f"{path}: policy config {data['config']} is not this build's ({exc})") from None
    try:
        policy.load_state_dict(data["policy"])
    except RuntimeError as exc:
        raise IncompatibleCheckpoint(f"{path}: weights do not fit the policy ({exc})") from None
    return policy.eval()
