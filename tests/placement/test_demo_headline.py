"""The placement demo's headline names who won at the equal budget, GiPH or not."""

from __future__ import annotations

import numpy as np

from mlsysopt.demo.placement import _headline
from mlsysopt.placement.base import PlacementResult


def runs(**makespans: float) -> dict[str, PlacementResult]:
    return {m: PlacementResult(np.zeros(1, np.int64), ms, m, 1) for m, ms in makespans.items()}


def test_headline_names_the_winner_when_giph_loses() -> None:
    r = runs(heft=10.0, local_search=8.0, giph=9.0)
    text = _headline(r, "local_search")
    assert "GiPH did not win" in text and "0.800 x HEFT" in text and "0.900 x HEFT" in text
    assert "local search" in text.lower()


def test_headline_says_tie_or_win() -> None:
    assert "tie for" in _headline(runs(heft=10.0, local_search=9.0, giph=9.0), "giph")
    text = _headline(runs(heft=10.0, local_search=9.5, giph=9.0), "giph")
    assert "has the shortest makespan" in text and "0.900 x HEFT" in text and "did not win" not in text
