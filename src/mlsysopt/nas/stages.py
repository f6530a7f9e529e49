"""Progressive stages shared by EPNAS and PNAS: one stage per block count, each with a share of the budget.

The paper gives no budget split, so :func:`stage_budgets` gives stage ``s`` (0-based) a share proportional to
``s + 1`` (``"linear"``): later stages hold larger spaces and produce the architecture that is returned.
``"equal"`` and ``"last"`` (everything in the final stage) are the alternatives. :class:`Stages` tracks the stage
being searched; a stage whose fresh candidates run out hands its leftover budget to the next.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError

SPLITS = ("auto", "linear", "equal", "last")


def check_split(split: str) -> None:
    """Raise MlsysoptError unless ``split`` is one of :data:`SPLITS`."""
    if split not in SPLITS:
        raise MlsysoptError(f"unknown stage_split '{split}' (choose from: {', '.join(SPLITS)})")


def resolve_split(space: Any, split: str) -> str:
    """``"auto"``: ``"last"`` where a space's largest architectures contain its smaller ones (``nested_blocks``, e.g.
    NAS-Bench-Graph, where fewer blocks are ``skip`` nodes), so earlier stages would only search a subset of the last;
    ``"linear"`` (progressive growth) everywhere else. Any other split is returned as given."""
    check_split(split)
    if split != "auto":
        return split
    return "last" if getattr(space, "nested_blocks", False) else "linear"


def stage_budgets(budget: int, n_stages: int, split: str = "linear") -> list[int]:
    """Evaluations per stage, summing to ``budget`` (rounding leftovers go to the last stage; ``"auto"``: linear).

    Args:
        budget: Total evaluations.
        n_stages: Number of stages, >= 1.
        split: ``"linear"`` (share proportional to ``s + 1``), ``"equal"``, ``"last"`` or ``"auto"`` (= linear).

    Returns:
        list[int]: Evaluations per stage, summing to ``budget``.

    Raises:
        MlsysoptError: For an unknown ``split``.
    """
    check_split(split)
    split = "linear" if split == "auto" else split
    weights = {"linear": [s + 1 for s in range(n_stages)], "equal": [1] * n_stages, "last": [0] * (n_stages - 1) + [1]}
    w = np.asarray(weights[split], dtype=float)
    out = [int(x) for x in np.floor(budget * w / w.sum())]
    out[-1] += budget - sum(out)
    return out


class Stages:
    """The stage being searched; a stage whose fresh candidates run out hands its leftover budget to the next.

    Args:
        blocks: Block count of each stage, in order.
        quota: Evaluation budget of each stage (same length as ``blocks``).
    """

    def __init__(self, blocks: list[int], quota: list[int]) -> None:
        self.blocks_list, self.quota = list(blocks), list(quota)
        self.index = self.used = 0
        self._skip_empty()

    @classmethod
    def for_space(cls, space: Any, budget: int, split: str = "linear") -> Stages:
        """One stage per block count of ``space`` (``min_blocks`` .. ``max_blocks``), ``budget`` split by ``split``."""
        blocks = list(range(space.min_blocks, space.max_blocks + 1))
        return cls(blocks, stage_budgets(budget, len(blocks), resolve_split(space, split)))

    @property
    def blocks(self) -> int:
        """Block count of the current stage."""
        return self.blocks_list[self.index]

    @property
    def last(self) -> bool:
        """Whether this is the final stage (it never ends)."""
        return self.index == len(self.quota) - 1

    def advance(self) -> bool:
        """Move to the next stage, carrying over the unused budget; False at the last stage."""
        if self.last:
            return False
        self.quota[self.index + 1] += max(self.quota[self.index] - self.used, 0)
        self.quota[self.index] = self.used
        self.index, self.used = self.index + 1, 0
        return True

    def consume(self, k: int) -> None:
        """Count ``k`` proposals against the current stage; move on when its budget is spent."""
        self.used += k
        self._skip_empty()

    def _skip_empty(self) -> None:
        while not self.last and self.used >= self.quota[self.index]:
            self.index, self.used = self.index + 1, self.used - self.quota[self.index]

    def state_dict(self) -> dict[str, Any]:
        """Index, proposals used in the stage, and the (carried-over) quotas."""
        return {"index": self.index, "used": self.used, "quota": list(self.quota)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.index, self.used, self.quota = int(d["index"]), int(d["used"]), list(d["quota"])
