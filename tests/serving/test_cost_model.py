"""The op-level shortlist of ``serving tune --cost-model``: what it keeps and what its knob grid searches besides."""

from __future__ import annotations

from mlsysopt.serving.cost_model import OpLevelShortlist


def shortlist(kept: tuple[tuple[int, int], ...]) -> OpLevelShortlist:
    predicted = ((1, 0, 0.117), (1, 1, 0.131), (2, 0, 0.135), (2, 1, 0.170))
    return OpLevelShortlist(run="builtin", tolerance=0.2, predicted=predicted, kept=kept, default=(2, 0))


def test_a_kept_parallel_setting_brings_the_others_back_and_says_so() -> None:
    short = shortlist(((1, 0), (1, 1), (2, 0)))
    assert short.knobs == {"intra_threads": (1, 2), "execution_mode": (0, 1)}
    assert short.also_searched == ((2, 1),)
    assert "the space also holds i2 par, not kept" in short.describe()
    assert short.to_dict()["also_searched"] == [{"intra_threads": 2, "execution_mode": 1}]


def test_a_shortlist_that_is_a_grid_searches_nothing_besides() -> None:
    short = shortlist(((1, 0), (2, 0)))
    assert short.knobs == {"intra_threads": (1, 2), "execution_mode": (0,)}
    assert short.also_searched == ()
    assert "also holds" not in short.describe() and short.to_dict()["also_searched"] == []
