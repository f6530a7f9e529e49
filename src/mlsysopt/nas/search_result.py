"""What a NAS search returns: :class:`SearchResult` (the history, the best, counts, why it stopped)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.spaces.base import Evaluation

STOP_REASONS = ("budget", "timeout", "exhausted", "failures", "unreachable")  # ``SearchResult.stopped``


@dataclass
class SearchResult:
    """What a search found: the full history, the best architecture (feasible in hard mode), counts and timing.

    Args:
        method: Name of the NAS method.
        space: Name of the search space.
        history: Every evaluation, in order.
        best: The best usable evaluation (feasible in hard mode), or None.
        message: One line describing the outcome.
        failed: Number of failed evaluations.
        wall_s: Wall-clock seconds of the search.
        skipped: Infeasible candidates skipped without evaluation.
        constraints: The constraints, as :meth:`Constraints.to_dict` gives them.
        best_decoded: The best architecture decoded by the space (None without a best).
        resumed_from: Evaluations the checkpoint held when the search started.
        stopped: Why the search ended: ``"budget"``, ``"timeout"``, ``"exhausted"``, ``"failures"`` (as many
            evaluations failed as the budget) or ``"unreachable"`` (a costly limit none of the candidates checked
            meets).
    """

    method: str
    space: str
    history: list[Evaluation]
    best: Evaluation | None
    message: str
    failed: int
    wall_s: float
    skipped: int = 0
    constraints: dict[str, Any] = field(default_factory=dict)
    best_decoded: dict[str, Any] | None = None
    resumed_from: int = 0  # evaluations the checkpoint held when the search started
    stopped: str = "budget"  # why the search ended: one of STOP_REASONS

    def best_so_far(self) -> list[float]:
        """Best feasible validation performance after each evaluation (NaN until the first)."""
        cons = Constraints.from_dict(self.constraints) if self.constraints else Constraints()
        out, cur = [], float("nan")
        for ev in self.history:
            if ev.ok and math.isfinite(ev.perf) and (not cons.hard or cons.feasible(ev.resources)):
                cur = ev.perf if math.isnan(cur) else max(cur, ev.perf)
            out.append(cur)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with the full history."""
        return {
            "method": self.method,
            "space": self.space,
            "constraints": self.constraints,
            "evaluations": len(self.history),
            "failed": self.failed,
            "skipped_infeasible": self.skipped,
            "wall_s": self.wall_s,
            "message": self.message,
            "best": None if self.best is None else self.best.to_dict(),
            "best_decoded": self.best_decoded,
            "history": [ev.to_dict() for ev in self.history],
        }


__all__ = ["STOP_REASONS", "SearchResult"]
