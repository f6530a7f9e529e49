"""What EPNAS's online rankers share: a search's growing ``(architecture, reward)`` data, and state = that data."""

from __future__ import annotations

from typing import Any

from mlsysopt.nas.spaces.base import Arch


class OnlineData:
    """The ``(architecture, reward)`` points seen so far and how many the model was last fit on.

    A ranker built on it is a pure function of its data, so :meth:`state_dict` is the data and
    :meth:`load_state_dict` refits (``_fit``) on exactly the points of the last fit.
    """

    def __init__(self) -> None:
        self.data: list[tuple[Arch, float]] = []
        self.fitted_n = 0  # size of the data the model was last fit on

    def add(self, arch: Arch, reward: float) -> None:
        """One more training point."""
        self.data.append((arch, reward))

    def _fit(self, n: int) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The training data and the size of the last fit."""
        return {"data": [(list(a.choices), a.blocks, r) for a, r in self.data], "fitted_n": self.fitted_n}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`: restores the data and refits on the points of the last fit."""
        self.data = [(Arch(tuple(c), b), float(r)) for c, b, r in d["data"]]
        self._fit(int(d["fitted_n"]))
