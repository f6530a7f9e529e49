"""Training losses of the cost model: ranking (pairwise hinge, ListMLE), regression (per-graph MSE; log-runtime MSE,
absolute), classification (CE).

Ranking losses take one graph's predictions ``pred (C,)`` and true runtimes ``target (C,)`` for C configurations;
a LOWER prediction means a FASTER configuration, as for the runtimes themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mlsysopt.errors import InvalidOption

#: A loss: (predictions, targets) -> scalar tensor.
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: Loss names accepted by :func:`get_loss`, by task kind.
RANKING_LOSSES: tuple[str, ...] = ("hinge", "listmle", "mse", "logmse")
#: Losses on an absolute target: scores comparable across graphs (a latency oracle needs one).
ABSOLUTE_LOSSES: tuple[str, ...] = ("logmse",)
CLASSIFICATION_LOSSES: tuple[str, ...] = ("ce",)


def pairwise_hinge(pred: torch.Tensor, target: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """Mean over pairs with ``target[i] < target[j]`` of ``max(0, margin - (pred[j] - pred[i]))``; 0 without pairs."""
    pred, target = pred.reshape(-1), target.reshape(-1).to(pred.dtype)
    faster = target[:, None] < target[None, :]  # faster[i, j]: config i is faster than config j
    if not bool(faster.any()):
        return pred.sum() * 0.0
    gap = pred[None, :] - pred[:, None]  # gap[i, j] = pred[j] - pred[i], should exceed the margin
    return torch.clamp(margin - gap, min=0.0)[faster].mean()


def list_mle(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """ListMLE: negative Plackett-Luce log-likelihood of the true fastest-first order, scores = -pred, per item."""
    pred, target = pred.reshape(-1), target.reshape(-1)
    order = torch.argsort(target, stable=True)
    scores = -pred[order]
    # log P(order) = sum_i s_i - logsumexp(s_i..s_C); the suffix logsumexp is a reversed cumulative logsumexp.
    suffix = torch.logcumsumexp(scores.flip(0), dim=0).flip(0)
    return (suffix - scores).mean()


def mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """MSE against the runtimes z-scored within the graph's configs (graphs of different scales weigh alike)."""
    pred, target = pred.reshape(-1), target.reshape(-1).to(pred.dtype)
    z = (target - target.mean()) / (target.std(unbiased=False) + 1e-12) if target.numel() > 1 else target * 0.0
    return F.mse_loss(pred, z)


def log_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """MSE against the z-scored log runtime (the trainer passes ``(log runtime - mean) / std`` of the training set):
    an absolute target, so scores compare across graphs and convert back to runtimes."""
    return F.mse_loss(pred.reshape(-1), target.reshape(-1).to(pred.dtype))


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of class logits ``(B, classes)`` against integer labels ``(B,)``."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "hinge": pairwise_hinge,
    "listmle": list_mle,
    "mse": mse,
    "logmse": log_mse,
    "ce": cross_entropy,
}


def get_loss(name: str, task: str | None = None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss called ``name``; with ``task`` also check it fits (ranking losses for layout/tile, ce for malnet).

    Args:
        name: ``"hinge"``, ``"listmle"``, ``"mse"``, ``"logmse"`` or ``"ce"``.
        task: If given, check the loss fits it (ranking losses for layout/tile, ``ce`` for malnet).

    Returns:
        Callable[[torch.Tensor, torch.Tensor], torch.Tensor]: ``loss(pred, target)``, a scalar tensor.

    Raises:
        InvalidOption: For an unknown loss or one that does not fit ``task``.
    """
    if name not in _LOSSES:
        raise InvalidOption(f"unknown loss '{name}' (choose from: {', '.join(_LOSSES)})")
    if task is not None:
        allowed = CLASSIFICATION_LOSSES if task == "malnet" else RANKING_LOSSES
        if name not in allowed:
            raise InvalidOption(f"loss '{name}' does not fit task '{task}' (use one of: {', '.join(allowed)})")
    return _LOSSES[name]
