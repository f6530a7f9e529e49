"""BANANAS with the prior's initial design: the first ``prior_init`` architectures are the prior's best, then
BANANAS."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_methods import FakeSpace, constraints, fake_prior

from mlsysopt.errors import InvalidOption
from mlsysopt.nas import Evaluation, get_method, run_search


def _archs(method: str, budget: int = 20, **knobs: object) -> list[object]:
    result = run_search(get_method(method, FakeSpace(), constraints(), budget=budget, seed=4, **knobs), workers=2)
    return [ev.arch for ev in result.history]


def test_its_first_architectures_are_the_priors_best_and_without_them_it_is_bananas() -> None:
    fake_prior()
    ranked = _archs("zero_shot", budget=10)
    for k in (1, 6, 10):
        assert _archs("bananas_prior", prior_init=k)[:k] == ranked[:k]
    assert _archs("bananas_prior", prior_init=0) == _archs("bananas")  # no prior picks: plain BANANAS, same seed
    assert _archs("bananas_prior", prior_init=6)[6:10] != ranked[6:10]  # the rest of the 10 starts are uniform


def test_a_resume_inside_the_priors_picks_continues_the_same_search(tmp_path: Path) -> None:
    space, cons = FakeSpace(), constraints()
    full = run_search(get_method("bananas_prior", space, cons, budget=16, seed=1), workers=1)

    class Crash(Exception):
        pass

    def crash_at_4(ev: Evaluation, i: int) -> None:
        if i == 4:  # three of the prior's six picks evaluated
            raise Crash

    ckpt = tmp_path / "search.pt"
    with pytest.raises(Crash):
        run_search(get_method("bananas_prior", space, cons, budget=16, seed=1), checkpoint=ckpt, on_eval=crash_at_4)
    resumed = run_search(get_method("bananas_prior", space, cons, budget=16, seed=1), checkpoint=ckpt)
    assert [ev.arch for ev in resumed.history] == [ev.arch for ev in full.history]


def test_bad_prior_init_is_refused_by_name() -> None:
    with pytest.raises(InvalidOption, match="knob prior_init=11 must be at most init=10"):
        get_method("bananas_prior", FakeSpace(), constraints(), prior_init=11)
    with pytest.raises(InvalidOption, match="prior_init"):
        get_method("bananas_prior", FakeSpace(), constraints(), prior_init=-1)
    assert get_method("bananas_prior", FakeSpace(), constraints(), prior_init=3, init=3).cfg.prior_init == 3
