"""What a GiPH training returns, and the discounted returns both training pipelines use."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsysopt.placement.policy import GiPHPolicy


@dataclass
class TrainResult:
    """The trained policy, per-update statistics, and why training ended (``"updates"`` or ``"timeout"``).

    Args:
        policy: The trained policy.
        history: One dict of statistics per policy update.
        stopped_by: ``updates`` (all updates done) or ``timeout``.
    """

    policy: GiPHPolicy
    history: list[dict[str, float]] = field(default_factory=list)
    stopped_by: str = "updates"


def discounted(rewards: list[float], gamma: float) -> np.ndarray:
    """Returns-to-go ``G_t = r_t + γ G_{t+1}``."""
    out = np.zeros(len(rewards))
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out
