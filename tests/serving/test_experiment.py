"""Resumable tuning runs (replay from the run folder's JSON checkpoint), heatmap values, step points, profiles."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.io import RunDir
from mlsysopt.serving.backend import Measurement
from mlsysopt.serving.experiment import (
    TUNING_CHECKPOINT,
    ReplayBackend,
    heatmap_values,
    run_tuning,
    step_points,
)
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.profiling import check_profile_grid
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning import tune
from mlsysopt.store.run import RunStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPACE = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0, 2), intra_threads=(1, 2), inter_threads=(1,))
OBJ = Objective("latency")
W = Workload(400.0)


class CountingBackend(SimulatedEngine):
    """The simulator, counting how many measurements were really taken."""

    calls = 0

    def measure(self, config: Config, workload: Workload, window: int = 0):
        CountingBackend.calls += 1
        return super().measure(config, workload)


def _sim() -> SimulatedEngine:
    return CountingBackend(ServiceProfile.synthetic(cores=2), n_requests=80)


def _run(out: Path, budget: int, resume: bool, settings: dict | None = None, tuner: str = "rrl"):
    run = RunDir(
        out, settings or {"tuner": tuner, "seed": 3}, resume=resume, checkpoint=TUNING_CHECKPOINT, sink=RunStore
    ).check()
    with run:
        return run_tuning(get_tuner(tuner, SPACE, OBJ, seed=3), _sim(), [(W, budget)], run)


@pytest.mark.parametrize("tuner", ["rrl", "random"])
def test_resume_replays_then_continues_like_an_uninterrupted_run(tmp_path: Path, tuner: str) -> None:
    full, _ = run_tuning(get_tuner(tuner, SPACE, OBJ, seed=3), _sim(), [(W, 8)])
    _run(tmp_path / "a", 5, False, tuner=tuner)  # "killed" after 5 measurements
    saved = json.loads((tmp_path / "a" / TUNING_CHECKPOINT).read_text())
    assert len(saved["measurements"]) == 5
    assert json.loads((tmp_path / "a" / "settings.json").read_text()) == {"tuner": tuner, "seed": 3}
    CountingBackend.calls = 0
    resumed, replayed = _run(tmp_path / "a", 8, True, tuner=tuner)
    assert replayed == 5
    assert CountingBackend.calls == 3  # only the 3 new measurements were taken
    assert [s.config for s in resumed.steps] == [s.config for s in full.steps]
    assert resumed.best == full.best
    assert len(json.loads((tmp_path / "a" / TUNING_CHECKPOINT).read_text())["measurements"]) == 8


def test_resume_twice_is_idempotent(tmp_path: Path) -> None:
    _run(tmp_path, 6, False)
    first, _ = _run(tmp_path, 6, True)
    CountingBackend.calls = 0
    second, replayed = _run(tmp_path, 6, True)
    assert replayed == 6 and CountingBackend.calls == 0
    assert [s.config for s in first.steps] == [s.config for s in second.steps]


def test_resume_with_other_settings_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, 3, False)
    with pytest.raises(MlsysoptError, match="other settings.*seed 3 \\(now 4\\)"):
        _run(tmp_path, 5, True, settings={"tuner": "rrl", "seed": 4})


def test_a_finished_run_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    _run(tmp_path, 3, False)
    with pytest.raises(InvalidRunDir, match="exists: pass --resume"):
        _run(tmp_path, 3, False)


def test_resume_without_checkpoint_or_with_garbage(tmp_path: Path) -> None:
    with pytest.raises(MlsysoptError, match="no checkpoint"):
        _run(tmp_path, 3, True)
    _run(tmp_path, 3, False)
    (tmp_path / TUNING_CHECKPOINT).write_text("{not json")
    with pytest.raises(InvalidRunDir, match="not valid JSON"):
        _run(tmp_path, 3, True)
    (tmp_path / TUNING_CHECKPOINT).write_text('{"measurements": [{"config": {}}]}')
    with pytest.raises(InvalidRunDir, match="not a tuning checkpoint"):
        _run(tmp_path, 3, True)
    (tmp_path / TUNING_CHECKPOINT).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidRunDir, match="deeper"):
        _run(tmp_path, 3, True)


def test_replay_detects_a_diverging_tuner(tmp_path: Path) -> None:
    sim = _sim()
    rec = sim.measure(SPACE.config(0), W)
    replay = ReplayBackend(sim, [rec])
    with pytest.raises(MlsysoptError, match="asked for"):
        replay.measure(SPACE.config(1), W)


def test_measurement_round_trips_through_strict_json(tmp_path: Path) -> None:
    m = _sim().measure(SPACE.config(3), W)
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    # a window in which nothing finished has infinite latencies: written as null, read back as inf
    empty = Measurement(SPACE.config(0), W, *[math.inf] * 4, 0.0, 1.0, 9.0, 256, 80, 0, 80, True, 30.0)
    run = RunDir(tmp_path / "r", checkpoint=TUNING_CHECKPOINT, sink=RunStore)
    with run:
        run.save_checkpoint({"measurements": [empty.to_dict()]})
    assert '"mean_ms": null' in (tmp_path / "r" / TUNING_CHECKPOINT).read_text()
    back = Measurement.from_dict(json.loads((tmp_path / "r" / TUNING_CHECKPOINT).read_text())["measurements"][0])
    assert back == empty and math.isinf(OBJ.score(back))


def test_heatmap_takes_the_best_over_other_knobs() -> None:
    sim = _sim()
    ms = [sim.measure(c, W) for c in SPACE]
    values = heatmap_values(ms, OBJ)
    assert set(values) == {(w, b) for w in (1, 2) for b in (1, 4)}
    for (w, b), v in values.items():
        assert v == min(OBJ.score(m) for m in ms if (m.config.instances, m.config.max_batch) == (w, b))
    assert heatmap_values(ms, OBJ, Workload(1.0)) == {}


def test_step_points_mark_the_workload_changes() -> None:
    res = tune(get_tuner("random", SPACE, OBJ, seed=1), _sim(), [(W, 3), (Workload(800.0), 2)])
    points = step_points(res.steps)
    assert [p["shift"] for p in points] == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert [p["value"] for p in points] == [s.score for s in res.steps]
    assert [p["best"] for p in points] == [s.best_score for s in res.steps]


def test_profile_grid_checks() -> None:
    assert check_profile_grid([1, 2, 4], [1, 2], [1], 2) == 6
    with pytest.raises(MlsysoptError, match="at least 6 points"):
        check_profile_grid([1, 4], [1], [1], 2)
    with pytest.raises(MlsysoptError, match="3 threads exceeds the 2"):
        check_profile_grid([1, 2, 4], [1, 3], [1], 2)
