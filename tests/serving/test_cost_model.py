"""The op-level shortlist of ``serving tune --cost-model``, and the space that searches exactly the pairs it kept."""

from __future__ import annotations

import pytest

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.cost_model import OpLevelShortlist
from mlsysopt.serving.inputs import tuning_space
from mlsysopt.serving.space import Config, Space


def shortlist(kept: tuple[tuple[int, int], ...]) -> OpLevelShortlist:
    predicted = ((1, 0, 0.117), (1, 1, 0.131), (2, 0, 0.135), (2, 1, 0.170))
    return OpLevelShortlist(run="builtin", tolerance=0.2, predicted=predicted, kept=kept, default=(2, 0))


def _pairs(space: Space) -> set[tuple[int, int]]:
    return {(c.intra_threads, c.execution_mode) for c in space}


def test_a_kept_parallel_setting_does_not_bring_the_other_parallel_settings_back() -> None:
    short = shortlist(((1, 0), (1, 1), (2, 0)))
    assert short.knobs == {"intra_threads": (1, 2), "execution_mode": (0, 1)}
    assert "kept 3 of 4 op-level settings (i1 seq, i1 par, i2 seq; predicted best i1 seq" in short.describe()
    full = tuning_space("real", 2, short.knobs)
    space = tuning_space("real", 2, short.knobs, op_levels=short.kept)
    assert _pairs(full) == {(1, 0), (1, 1), (2, 0), (2, 1)}  # the knob grid's product
    assert _pairs(space) == set(short.kept)
    assert set(space) == {c for c in full if (c.intra_threads, c.execution_mode) != (2, 1)}
    # every way a tuner moves stays inside: neighbours, the nearest configuration, the default, the middle
    for c in space:
        assert all((n.intra_threads, n.execution_mode) in short.kept for n in space.neighbors(c))
    near = space.nearest(Config(1, 4, 2.0, 2, 2, 1))  # i2 par, left out: the nearest kept configuration
    assert near in space and (near.intra_threads, near.execution_mode) in short.kept
    assert space.default(2) == full.default(2) and space.middle() in space
    assert space.coords.shape == (space.size, len(space.knobs))
    # the run folder's settings describe it, and read back the same space (--resume compares them)
    again = Space.from_dict(space.to_dict())
    assert space.to_dict()["op_levels"] == [[1, 0], [1, 1], [2, 0]] and list(again) == list(space)
    assert "op_levels" not in full.to_dict() and "op_levels=[i1 seq, i1 par, i2 seq]" in repr(space)


def test_a_pair_counts_on_its_canonical_configuration() -> None:
    space = Space(max_batch=(1,), batch_timeout_ms=(0,), intra_threads=(1, 2), inter_threads=(1, 2),
                  op_levels=[(1, 1)])  # fmt: skip
    assert {c.label() for c in space} == {"n1 b1 t0ms i1 o2 par", "n2 b1 t0ms i1 o2 par"}  # i1 o1 par is i1 seq


@pytest.mark.parametrize(
    ("op_levels", "match"),
    [
        ([], "non-empty list"),
        ("i1 seq", "non-empty list"),
        ([(1, 0, 2)], "is not an \\[intra_threads, execution_mode\\] pair"),
        ([(4, 0)], r"\[4, 0\] is not a pair of the space's values \(intra_threads \[1, 2\]"),
        ([(1, 2)], r"\[1, 2\] is not a pair"),
        ([(1.5, 0)], "op_levels: intra_threads"),
    ],
)
def test_bad_op_levels_are_one_clear_error(op_levels: object, match: str) -> None:
    with pytest.raises(InvalidSpace, match=match):
        Space(op_levels=op_levels)  # type: ignore[arg-type]


def test_op_levels_that_leave_nothing_are_refused() -> None:
    with pytest.raises(InvalidSpace, match="op_levels i1 par: no configuration of the space is left"):
        Space(inter_threads=(1,), op_levels=[(1, 1)])  # parallel with one inter-op thread is sequential
