"""The prior across models: histories from records and run folders, fitting, predicting, scoring, warm starts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.serving.history import History, histories_from_runs, history_from_run
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.prior import Prior, PriorConfig, objective_scores
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Space, Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning import tune

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPACE = Space(instances=(1, 2, 4), max_batch=(1, 4, 16), batch_timeout_ms=(0, 2), intra_threads=(1, 2, 4),
              inter_threads=(1,), max_threads=4)  # fmt: skip
TINY = PriorConfig(hidden=(32, 32), steps=300, batch=256)


def profile(a: float, c: float, model: str) -> ServiceProfile:
    return ServiceProfile(a, c, 0.8, 0.0, 0.01, 0.0, cores=4, source="synthetic", model=model, dispatch_ms=0.05)


def history(prof: ServiceProfile, rate: float, n: int = 40, seed: int = 0) -> History:
    sim = SimulatedEngine(prof, n_requests=60, seed=seed)
    res = tune(get_tuner("random", SPACE, Objective(), seed=seed), sim, [(Workload(rate), n)])
    return History.from_records([s.measurement.to_dict() for s in res.steps], {"engine": "sim"},
                                {"profile": prof.to_dict()}, source=f"{prof.model}@{rate:g}")  # fmt: skip


@pytest.fixture(scope="module")
def fitted() -> Prior:
    hs = [history(profile(a, c, f"m{k}"), r) for k, (a, c) in enumerate([(0.5, 0.3), (1.0, 1.0), (0.2, 0.1)])
          for r in (300.0, 1200.0)]  # fmt: skip
    return Prior(TINY).fit(hs)


def test_records_round_trip_and_bad_records_name_the_source() -> None:
    prof = profile(0.5, 0.3, "m")
    h = history(prof, 400.0, n=5)
    assert len(h.measurements) == 5 and h.profile == prof and h.task == "m@4"
    with pytest.raises(InvalidRunDir, match=r"store:3: measurements\[0\] is not a measurement record"):
        History.from_records([{"config": {"instances": 1}}], {"engine": "sim"}, {"profile": prof.to_dict()}, "store:3")
    with pytest.raises(InvalidRunDir, match="task.profile: missing key 'c_ms'"):
        History.from_records([], {}, {"profile": {"a_ms": 1.0}}, "run7")
    with pytest.raises(InvalidRunDir, match="no model profile"):
        History.from_records([], {"engine": "real"}, None, "run8")


def test_sim_run_folder_without_task_uses_the_profile_its_settings_name(tmp_path) -> None:
    h = history(profile(0.5, 0.3, "m"), 400.0, n=3)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "result.json").write_text(
        json.dumps({"command": "serving tune", "measurements": [m.to_dict() for m in h.measurements]}, default=str)
    )
    (tmp_path / "r" / "settings.json").write_text(json.dumps({"engine": "sim", "profile": "synthetic:4"}))
    got = history_from_run(tmp_path / "r")
    assert got.profile == ServiceProfile.synthetic(4) and len(got.measurements) == 3
    assert [x.source for x in histories_from_runs([tmp_path])] == [str(tmp_path / "r")]  # a folder of run folders


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda d: None, "no such folder"),
        (lambda d: d.mkdir(), "result.json: no such file"),
        (lambda d: (d.mkdir(), (d / "result.json").write_text('{"command": "nas search"}'),
                    (d / "settings.json").write_text("{}")), "from 'nas search', not 'serving tune'"),
        (lambda d: (d.mkdir(), (d / "result.json").write_text('{"command": "serving tune"}'),
                    (d / "settings.json").write_text("{}")), "has no key 'measurements'"),
    ],
)  # fmt: skip
def test_bad_run_folders_are_one_clear_error(tmp_path, setup, match) -> None:
    setup(tmp_path / "run")
    with pytest.raises(InvalidRunDir, match=match):
        history_from_run(tmp_path / "run")


def test_prior_learns_across_models_and_ranks_an_unseen_one(fitted: Prior) -> None:
    new = profile(0.7, 0.5, "unseen")
    w = Workload(800.0)
    truth = SimulatedEngine(new, n_requests=60)
    true_ms = np.array([truth.measure(c, w).mean_ms for c in SPACE])
    pred, p_sat = fitted.predict(new, w, SPACE.configs())
    assert pred.shape == (SPACE.size, 4) and p_sat.shape == (SPACE.size,)
    assert np.all(np.isfinite(pred)) and np.all((p_sat >= 0) & (p_sat <= 1))
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(rank(pred[:, 0]), rank(true_ms))[0, 1] > 0.5  # it knows which configurations are slow
    top = fitted.bind(new).ranked(SPACE, w, Objective(), 5)
    assert len(top) == 5 and min(true_ms[SPACE.index(c)] for c in top) < np.median(true_ms)


def test_save_load_and_errors(fitted: Prior, tmp_path) -> None:
    path = fitted.save(tmp_path / "prior.pt")
    again = Prior.load(path)
    prof, w = profile(0.5, 0.3, "x"), Workload(500.0)
    np.testing.assert_allclose(again.predict(prof, w, SPACE.configs())[0], fitted.predict(prof, w, SPACE.configs())[0])
    assert again.describe()["samples"] == fitted.describe()["samples"] == 240
    (tmp_path / "junk.pt").write_bytes(b"not torch")
    with pytest.raises(MlsysoptError, match="junk.pt"):
        Prior.load(tmp_path / "junk.pt")
    with pytest.raises(MlsysoptError, match="not been fitted"):
        Prior().predict(prof, w, SPACE.configs())
    with pytest.raises(MlsysoptError, match="at least one earlier tuning run"):
        Prior(TINY).fit([])
    with pytest.raises(MlsysoptError, match="invalid knob"):
        PriorConfig(steps=0)


def test_objective_scores_for_cost_and_throughput() -> None:
    configs = SPACE.configs()[:3]

    def predict(cfgs, w):  # p99 grows with the rate; the first configuration is 10x slower
        lat = np.array([[10.0 if i == 0 else 1.0] * 4 for i in range(len(cfgs))]) * (w.rate / 100.0)
        return lat, np.zeros(len(cfgs))

    cost = objective_scores(predict, configs, Workload(100.0), Objective("cost", slo_ms=5.0))
    assert cost[0] >= 1e6 and cost[1] == configs[1].threads
    thr = objective_scores(predict, configs, Workload(100.0), Objective("throughput", slo_ms=5.0))
    assert thr[0] >= 1e6  # misses at the starting rate
    assert math.isclose(1000.0 / thr[1], 100.0 * 2**2, rel_tol=1e-9)  # 400 req/s is the last rung with p99 <= 5


def test_warm_rrl_starts_at_the_prior_best_and_gp_enqueues_its_top(fitted: Prior) -> None:
    new = profile(0.7, 0.5, "unseen")
    bound, w = fitted.bind(new), Workload(800.0)
    top = bound.ranked(SPACE, w, Objective(), 3)
    sim = SimulatedEngine(new, n_requests=60)
    rrl = get_tuner("rrl", SPACE, Objective(), seed=0, prior=bound)
    res = tune(rrl, sim, [(w, 4)])
    assert res.steps[0].config == top[0] and rrl.warm
    # Q follows a prior-based estimate further than the paper's: its step is warm_alpha, not alpha
    assert rrl.alpha == rrl.knobs.warm_alpha != rrl.knobs.alpha
    assert get_tuner("rrl", SPACE, Objective(), alpha=0.4).alpha == 0.4
    # the value table of warm RRL before issue 34 (acquisition="boltzmann"; the default is expected improvement)
    fresh = get_tuner("rrl", SPACE, Objective(), seed=0, prior=bound, warm_alpha=0.9, acquisition="boltzmann")
    fresh.set_workload(w)
    q0, config = fresh.q.copy(), fresh.ask()
    fresh.tell(config, sim.measure(config, w))
    region = np.setdiff1d(SPACE.region(config, fresh.knobs.radius), [SPACE.index(config)])
    np.testing.assert_allclose(fresh.q[region], 0.1 * q0[region] + 0.9 * fresh.estimate(region), rtol=1e-9)
    np.testing.assert_allclose(rrl.estimator.scores(np.arange(3), w), rrl.estimate(np.arange(3)))
    gp = get_tuner("gp", SPACE, Objective(), seed=0, prior=bound, warm_trials=3)
    assert [s.config for s in tune(gp, sim, [(w, 4)]).steps[:3]] == top
    with pytest.raises(MlsysoptError, match="warm_trials=0"):
        get_tuner("tpe", SPACE, Objective(), prior=bound, warm_trials=0)
