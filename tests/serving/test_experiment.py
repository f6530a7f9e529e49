"""Resumable tuning runs (replay from a checkpoint), profile specs, heatmap values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.serving.backend import Objective
from mlsysopt.serving.experiment import (
    ReplayBackend,
    heatmap_values,
    measurement_from_dict,
    resolve_profile,
    run_tuning,
)
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import get_tuner

SPACE = Space(workers=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0, 2), intra_threads=(1, 2), inter_threads=(1,))
OBJ = Objective("latency")
W = Workload(400.0)


class CountingBackend(SimulatedEngine):
    """The simulator, counting how many measurements were really taken."""

    calls = 0

    def measure(self, config: Config, workload: Workload):
        CountingBackend.calls += 1
        return super().measure(config, workload)


def _sim() -> SimulatedEngine:
    return CountingBackend(ServiceProfile.synthetic(cores=2), n_requests=80)


def _run(tmp_path: Path, budget: int, resume: bool, settings: dict | None = None, tuner: str = "rrl"):
    return run_tuning(
        get_tuner(tuner, SPACE, OBJ, seed=3),
        _sim(),
        [(W, budget)],
        tmp_path / "checkpoint.json",
        settings or {"tuner": tuner, "seed": 3},
        resume,
    )


@pytest.mark.parametrize("tuner", ["rrl", "random"])
def test_resume_replays_then_continues_like_an_uninterrupted_run(tmp_path: Path, tuner: str) -> None:
    full, _ = run_tuning(get_tuner(tuner, SPACE, OBJ, seed=3), _sim(), [(W, 8)])
    (tmp_path / "a").mkdir()
    _run(tmp_path / "a", 5, False, tuner=tuner)  # "killed" after 5 measurements
    saved = json.loads((tmp_path / "a" / "checkpoint.json").read_text())
    assert len(saved["measurements"]) == 5
    CountingBackend.calls = 0
    resumed, replayed = _run(tmp_path / "a", 8, True, tuner=tuner)
    assert replayed == 5
    assert CountingBackend.calls == 3  # only the 3 new measurements were taken
    assert [s.config for s in resumed.steps] == [s.config for s in full.steps]
    assert resumed.best == full.best
    assert len(json.loads((tmp_path / "a" / "checkpoint.json").read_text())["measurements"]) == 8


def test_resume_twice_is_idempotent(tmp_path: Path) -> None:
    _run(tmp_path, 6, False)
    first, _ = _run(tmp_path, 6, True)
    CountingBackend.calls = 0
    second, replayed = _run(tmp_path, 6, True)
    assert replayed == 6 and CountingBackend.calls == 0
    assert [s.config for s in first.steps] == [s.config for s in second.steps]


def test_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, 3, False)
    with pytest.raises(MlsysoptError, match="other settings.*seed"):
        _run(tmp_path, 5, True, settings={"tuner": "rrl", "seed": 4})


def test_resume_without_checkpoint_or_with_garbage(tmp_path: Path) -> None:
    with pytest.raises(MlsysoptError, match="no checkpoint"):
        _run(tmp_path, 3, True)
    (tmp_path / "checkpoint.json").write_text("{not json")
    with pytest.raises(MlsysoptError, match="not a tuning checkpoint"):
        _run(tmp_path, 3, True)


def test_replay_detects_a_diverging_tuner(tmp_path: Path) -> None:
    sim = _sim()
    rec = sim.measure(SPACE.config(0), W)
    replay = ReplayBackend(sim, [rec])
    with pytest.raises(MlsysoptError, match="asked for"):
        replay.measure(SPACE.config(1), W)


def test_measurement_round_trips_through_json() -> None:
    m = _sim().measure(SPACE.config(3), W)
    back = measurement_from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m


def test_heatmap_takes_the_best_over_other_knobs() -> None:
    sim = _sim()
    ms = [sim.measure(c, W) for c in SPACE]
    values = heatmap_values(ms, OBJ)
    assert set(values) == {(w, b) for w in (1, 2) for b in (1, 4)}
    for (w, b), v in values.items():
        assert v == min(OBJ.score(m) for m in ms if (m.config.workers, m.config.max_batch) == (w, b))
    assert heatmap_values(ms, OBJ, Workload(1.0)) == {}


def test_resolve_profile_specs(tmp_path: Path) -> None:
    assert resolve_profile("synthetic").cores == 32
    assert resolve_profile("synthetic:8").cores == 8
    path = ServiceProfile.synthetic(4).save(tmp_path / "p.json")
    assert resolve_profile(str(path)).cores == 4
    with pytest.raises(InvalidSpace, match="core count"):
        resolve_profile("synthetic:many")
    with pytest.raises(InvalidSpace, match="not found"):
        resolve_profile(str(tmp_path / "missing.json"))
