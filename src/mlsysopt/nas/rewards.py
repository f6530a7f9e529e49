"""How a NAS method turns an evaluation into a reward, and what infeasible or failed candidates get."""

from __future__ import annotations

import math
from typing import Any

from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.spaces.base import Arch, Evaluation


class Rewards:
    """Mixin of :class:`~mlsysopt.nas.searcher.Searcher`: usable evaluations, constrained rewards, the penalty.

    Reads ``self.constraints``, ``self.resources(arch)`` (:class:`~mlsysopt.nas.candidates.Candidates`) and keeps
    ``self.worst``, the lowest reward seen.
    """

    constraints: Constraints
    worst: float | None
    resources: Any

    def usable(self, ev: Evaluation) -> bool:
        """Evaluated, finite, and (in hard mode) feasible on its measured resources: a real data point."""
        if not ev.ok or not math.isfinite(ev.perf):
            return False
        return not self.constraints.hard or self.constraints.feasible({**self.resources(ev.arch), **ev.resources})

    def reward(self, ev: Evaluation) -> float:
        """``Constraints.reward`` of a usable evaluation; failed or infeasible ones get :meth:`penalty`."""
        if not self.usable(ev):
            return self.penalty()
        r = self.constraints.reward(ev.perf, {**self.resources(ev.arch), **ev.resources})
        self.worst = r if self.worst is None else min(self.worst, r)
        return r

    def penalty(self) -> float:
        """Reward for infeasible or failed candidates: the worst reward so far (at first, the constraints' penalty)."""
        return self.constraints.penalty if self.worst is None else self.worst

    def best_evaluated(self, data: list[tuple[Arch, float]], k: int) -> list[Arch]:
        """The ``k`` architectures of ``data`` (``(arch, reward)`` pairs) with the highest reward, best first."""
        order = sorted(range(len(data)), key=lambda i: (-data[i][1], i))
        return [data[i][0] for i in order[:k]]
