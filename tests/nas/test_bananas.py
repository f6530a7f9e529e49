"""BANANAS' refit interval (``refit_every``, NASLib's k): how often the ensemble is trained, and a resume that
continues with the model the interrupted search had."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_methods import FakeSpace, constraints

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import Evaluation, get_method, run_search
from mlsysopt.nas.predictor import Predictor


def _fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of points of every ensemble training, in order."""
    sizes: list[int] = []
    fit = Predictor.fit

    def counted(self: Predictor, X, y):  # type: ignore[no-untyped-def]
        sizes.append(len(y))
        return fit(self, X, y)

    monkeypatch.setattr(Predictor, "fit", counted)
    return sizes


@pytest.mark.parametrize(("every", "expected"), [(1, list(range(10, 30))), (5, [10, 15, 20, 25]), (10, [10, 20])])
def test_the_ensemble_is_trained_once_every_k_new_evaluations(
    every: int, expected: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _fits(monkeypatch)
    result = run_search(get_method("bananas", FakeSpace(), constraints(), budget=30, seed=1, refit_every=every))
    assert len(result.history) == 30
    assert sizes == expected  # 10 random starts, then a training once k new points arrived


def test_a_resume_between_two_trainings_continues_with_the_interrupted_model(tmp_path: Path) -> None:
    space, cons = FakeSpace(), constraints()
    full = run_search(get_method("bananas", space, cons, budget=24, seed=3, refit_every=4), workers=1)

    class Crash(Exception):
        pass

    def crash_at_16(ev: Evaluation, i: int) -> None:
        if i == 16:  # checkpointed with 15 points, the model last trained on 14: a resume must not train on 15
            raise Crash

    ckpt = tmp_path / "search.pt"
    with pytest.raises(Crash):
        run_search(get_method("bananas", space, cons, budget=24, seed=3, refit_every=4), checkpoint=ckpt,
                   on_eval=crash_at_16)  # fmt: skip
    resumed = run_search(get_method("bananas", space, cons, budget=24, seed=3, refit_every=4), checkpoint=ckpt)
    assert [ev.arch for ev in resumed.history] == [ev.arch for ev in full.history]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "ten"])
def test_a_bad_refit_interval_is_refused_by_name(bad: object) -> None:
    with pytest.raises(MlsysoptError, match="refit_every"):
        get_method("bananas", FakeSpace(), constraints(), budget=10, refit_every=bad)
