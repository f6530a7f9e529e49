"""The service-time profile: shape, fit recovers known parameters, scaling, save/load and bad files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.serving.profile import ServiceProfile, ServiceSample, fit_profile, measure_samples

TRUE = ServiceProfile(a_ms=0.8, c_ms=0.5, f_intra=0.85, f_inter=0.3, intra_ms=0.05, inter_ms=0.15, cores=4)


def noisy_samples(profile: ServiceProfile, sigma: float, seed: int = 0) -> list[ServiceSample]:
    rng = np.random.default_rng(seed)
    return [
        ServiceSample(r, i, o, profile.service_ms(r, i, o) * float(rng.lognormal(0.0, sigma)))
        for i in (1, 2)
        for o in (1, 2)
        for r in (1, 2, 4, 8, 16, 32)
    ]


def test_service_time_grows_with_rows_and_shrinks_with_intra_threads() -> None:
    p = ServiceProfile.synthetic(cores=32)
    by_rows = [p.service_ms(r, 1, 1) for r in (1, 2, 4, 8, 16)]
    assert np.all(np.diff(by_rows) > 0)
    by_intra = [p.service_ms(16, i, 1) for i in (1, 2, 4, 8)]
    assert np.all(np.diff(by_intra) < 0)
    assert p.service_ms(16, 1, 2) < p.service_ms(16, 1, 1)
    assert p.service_ms(1, 1, 1) == pytest.approx(1.6)  # a + c
    with pytest.raises(InvalidSpace, match="rows"):
        p.service_ms(0, 1, 1)


def test_synthetic_profile_is_documented_and_plausible() -> None:
    p = ServiceProfile.synthetic(cores=16)
    assert (p.a_ms, p.c_ms, p.f_intra, p.f_inter, p.intra_ms, p.inter_ms) == (1.0, 0.6, 0.9, 0.3, 0.05, 0.1)
    assert (p.cores, p.source) == (16, "synthetic")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_parameters_from_noisy_samples(seed: int) -> None:
    samples = noisy_samples(TRUE, sigma=0.05, seed=seed)
    fit = fit_profile(samples, cores=4, model="toy")
    assert (fit.cores, fit.source, fit.model) == (4, "measured", "toy")
    assert fit.c_ms == pytest.approx(TRUE.c_ms, rel=0.1)
    assert fit.a_ms == pytest.approx(TRUE.a_ms, rel=0.3)
    assert fit.f_intra == pytest.approx(TRUE.f_intra, abs=0.15)
    assert fit.f_inter == pytest.approx(TRUE.f_inter, abs=0.15)
    assert fit.fit_error(samples) < 0.06
    # predictions on the measured grid are close to the truth, not just to the noisy samples
    for r, i, o in [(1, 1, 1), (32, 1, 1), (32, 2, 2), (4, 2, 1)]:
        assert fit.service_ms(r, i, o) == pytest.approx(TRUE.service_ms(r, i, o), rel=0.08)


def test_fit_is_exact_without_noise() -> None:
    samples = noisy_samples(TRUE, sigma=0.0)
    fit = fit_profile(samples, cores=4)
    assert fit.fit_error(samples) < 1e-3
    np.testing.assert_allclose(fit.params[:4], TRUE.params[:4], rtol=0.02, atol=0.01)


def test_fit_shrugs_off_a_few_disturbed_timings() -> None:
    clean = noisy_samples(TRUE, sigma=0.03)
    # three runs where a thread waited for a core another process held
    samples = [
        ServiceSample(s.rows, s.intra, s.inter, s.ms * (10.0 if k in (3, 10, 20) else 1.0)) for k, s in enumerate(clean)
    ]
    fit = fit_profile(samples, cores=4)
    assert fit.c_ms == pytest.approx(TRUE.c_ms, rel=0.1)
    assert fit.f_intra == pytest.approx(TRUE.f_intra, abs=0.1)
    assert fit.fit_error(samples) < 0.05


def test_a_knob_the_samples_never_vary_is_held_neutral() -> None:
    samples = [s for s in noisy_samples(TRUE, sigma=0.0) if s.inter == 1]
    fit = fit_profile(samples, cores=4)
    assert (fit.f_inter, fit.inter_ms) == (0.0, 0.0)
    assert fit.f_intra == pytest.approx(TRUE.f_intra, abs=0.01)


def test_fit_needs_enough_valid_samples() -> None:
    with pytest.raises(InvalidSpace, match="at least"):
        fit_profile(noisy_samples(TRUE, 0.0)[:3], cores=4)
    bad = [*noisy_samples(TRUE, 0.0)[:6], ServiceSample(1, 1, 1, -1.0)]
    with pytest.raises(InvalidSpace, match="positive"):
        fit_profile(bad, cores=4)
    with pytest.raises(InvalidSpace, match="two batch sizes"):
        fit_profile([ServiceSample(4, i, o, TRUE.service_ms(4, i, o)) for i in (1, 2, 3) for o in (1, 2)], cores=4)


class FakeModel:
    """A stand-in for ServedModel: times a batch from a known profile."""

    def __init__(self, profile: ServiceProfile) -> None:
        self.profile = profile
        self.calls: list[tuple[int, int, int, int]] = []

    def time_batch(self, rows: int, intra: int, inter: int, repeats: int = 5) -> float:
        self.calls.append((rows, intra, inter, repeats))
        return self.profile.service_ms(rows, intra, inter)


def test_measure_samples_times_the_grid_and_fits() -> None:
    model = FakeModel(TRUE)
    samples = measure_samples(model, rows=(1, 4, 16), intra=(1, 2), inter=(1, 2), repeats=3)
    assert len(samples) == len(model.calls) == 12
    assert {c[3] for c in model.calls} == {3}
    assert samples[0] == ServiceSample(1, 1, 1, TRUE.service_ms(1, 1, 1))
    assert fit_profile(samples, cores=4).fit_error(samples) < 1e-3


def test_scaled_keeps_parameters_and_marks_extrapolation() -> None:
    big = TRUE.scaled(32)
    np.testing.assert_array_equal(big.params, TRUE.params)
    assert (big.cores, big.source) == (32, "extrapolated")
    assert big.service_ms(8, 16, 1) < TRUE.service_ms(8, 2, 1)  # Amdahl beyond the measured threads
    assert TRUE.scaled(4) is TRUE
    assert ServiceProfile.synthetic(4).scaled(64).source == "synthetic"


def test_save_load_round_trip(tmp_path) -> None:
    p = ServiceProfile(0.7, 0.45, 0.8, 0.2, 0.03, 0.2, cores=2, source="measured", model="cnn")
    path = p.save(tmp_path / "sub" / "profile.json")
    assert ServiceProfile.load(path) == p
    assert not [f for f in path.parent.iterdir() if f.name.endswith(".tmp")]


def _write(tmp_path, data: object, raw: str | None = None):
    path = tmp_path / "bad.json"
    path.write_text(raw if raw is not None else json.dumps(data))
    return path


GOOD = ServiceProfile.synthetic(8).to_dict()


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({k: v for k, v in GOOD.items() if k != "c_ms"}, "c_ms"),
        ({**GOOD, "a_ms": -1.0}, "a_ms"),
        ({**GOOD, "intra_ms": "fast"}, "intra_ms"),
        ({**GOOD, "f_intra": 1.5}, "f_intra"),
        ({**GOOD, "cores": 0}, "cores"),
        ({**GOOD, "cores": 2.5}, "cores"),
        ({**GOOD, "source": "guessed"}, "source"),
        ({**GOOD, "speedup": 2}, "speedup"),
        ({**GOOD, "c_ms": 0}, "c_ms"),
    ],
)
def test_bad_parameter_is_one_clear_error(tmp_path, data: dict, key: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(InvalidSpace) as info:
        ServiceProfile.load(path)
    assert str(path) in str(info.value)
    assert key in str(info.value)


@pytest.mark.parametrize(("key", "value", "text"), [("f_inter", math.nan, "NaN"), ("inter_ms", math.inf, "Infinity")])
def test_non_finite_parameter_is_rejected(tmp_path, key: str, value: float, text: str) -> None:
    # in a file, the strict JSON reader refuses the non-standard constant itself, naming the file
    path = _write(tmp_path, None, raw=json.dumps({**GOOD, key: value}))
    with pytest.raises(InvalidSpace, match=f"not valid JSON.*{text} is not a JSON number") as info:
        ServiceProfile.load(path)
    assert str(path) in str(info.value)
    # built in Python, the parameter check names the key
    with pytest.raises(InvalidSpace, match=f"{key}.*finite"):
        ServiceProfile(**{**GOOD, key: value})
    assert math.isfinite(ServiceProfile.load(_write(tmp_path, GOOD)).f_inter)


@pytest.mark.parametrize(
    ("raw", "what"),
    [("{not json", "not valid JSON"), ("[1, 2]", "expected an object"), ("[" * 10_000 + "]" * 10_000, "deeper")],
)
def test_bad_file_is_one_clear_error(tmp_path, raw: str, what: str) -> None:
    path = _write(tmp_path, None, raw=raw)
    with pytest.raises(MlsysoptError, match=what) as info:
        ServiceProfile.load(path)
    assert str(path) in str(info.value)


def test_missing_file_names_the_file(tmp_path) -> None:
    with pytest.raises(InvalidSpace, match="no such file") as info:
        ServiceProfile.load(tmp_path / "nope.json")
    assert "nope.json" in str(info.value)


def test_calibration_splits_the_engine_costs_into_handoff_wake_and_dispatch() -> None:
    from mlsysopt.serving.backend import Measurement
    from mlsysopt.serving.profiling import calibrated
    from mlsysopt.serving.space import Config, Workload

    prof = ServiceProfile(0.5, 0.5, 0.5, 0.0, 0.0, 0.0, cores=2)  # 1 ms per single-row batch

    def window(rate: float, p50: float, timing: dict) -> Measurement:
        m = Measurement(Config(), Workload(rate), p50, p50, p50, p50, rate, None, 0.0, 0, 60, 60, 0, False, 1.0)
        m.extra = {"timing": timing}
        return m

    idle = window(20.0, 1.6, {"handoff_ms": 0.3, "wake_ms": 0.1, "run_idle_ms": 1.25, "gap_busy_ms": None})
    busy = window(700.0, 3.0, {"handoff_ms": 0.2, "wake_ms": 0.0, "run_busy_ms": 1.0, "gap_busy_ms": 0.05})
    cal, figures = calibrated(prof, idle, busy)
    assert (cal.handoff_ms, cal.dispatch_ms) == (0.3, 0.05)
    assert cal.wake_ms == pytest.approx(0.1 + 1.25 - 1.0 - 0.05)  # waking, plus what a cold run adds, less dispatch
    assert figures["predicted_idle_p50_ms"] == pytest.approx(0.3 + 1.0 + 0.05 + 0.3)
    # without timings (an older engine), everything beyond the batch's service time is dispatch, as before
    bare, _ = calibrated(prof, window(20.0, 1.6, {}), window(700.0, 3.0, {}))
    assert (bare.dispatch_ms, bare.handoff_ms, bare.wake_ms) == (pytest.approx(0.6), 0.0, 0.0)
    assert ServiceProfile.from_dict(cal.to_dict()) == cal
