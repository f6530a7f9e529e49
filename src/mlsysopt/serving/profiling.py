"""The measured service profile of a served model: its timing grid, the fit, and the engine's own overheads.

``mlsysopt serving profile`` (through :class:`mlsysopt.serving.jobs.ProfileJob`), the tuner's cost model, the demo
and the benchmarks call these: :func:`measure_profile` times ``session.run`` per (rows, intra, inter) and fits
:class:`~mlsysopt.serving.profile.ServiceProfile`; :func:`calibrate_dispatch` (mlsysopt's own engine, from its
inner timings) or :func:`calibrate_outside` (a serving system seen over HTTP, e.g. Ray Serve) calibrate the costs
around it that the simulator charges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.limits import MIN_WINDOW_REQUESTS
from mlsysopt.serving.profile import fit_profile, measure_samples
from mlsysopt.serving.space import Config, Workload

if TYPE_CHECKING:
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample, TimesBatches

MIN_PROFILE_POINTS = 6


def check_profile_grid(rows: Sequence[int], intra: Sequence[int], inter: Sequence[int], max_threads: int) -> int:
    """Refuse a grid with too few points or more threads than the machine allows; returns the number of points."""
    for option, values in (("--rows", rows), ("--intra", intra), ("--inter", inter)):
        bad = [n for n in values if n < 1]
        if bad:
            raise MlsysoptError(f"{option} lists {bad[0]}: every value must be >= 1")
    for n in (*intra, *inter):
        if n > max_threads:
            raise MlsysoptError(f"{n} threads exceeds the {max_threads} this machine allows (--intra/--inter)")
    points = len(rows) * len(intra) * len(inter)
    if points < MIN_PROFILE_POINTS:
        raise MlsysoptError(
            f"a service profile needs at least {MIN_PROFILE_POINTS} points (--rows x --intra x --inter), got {points}"
        )
    return points


def measure_profile(
    model: TimesBatches,
    rows: Sequence[int],
    intra: Sequence[int],
    inter: Sequence[int],
    repeats: int,
    cores: int,
    name: str = "",
    on_sample: Callable[[ServiceSample], None] | None = None,
) -> tuple[ServiceProfile, list[ServiceSample]]:
    """Time one batch per (rows, intra, inter) on this machine, fit the service-time model, keep the timings table.

    Args:
        model: Anything with ``time_batch(rows, intra, inter, repeats)`` returning ms.
        rows: Batch sizes (rows) to time.
        intra: Intra-op thread counts to time.
        inter: Inter-op thread counts to time.
        repeats: Runs per point (median kept).
        cores: Cores of this machine, recorded in the profile.
        name: Model name recorded in the profile.
        on_sample: Called with each sample as it is timed (None: not called).

    Returns:
        tuple[ServiceProfile, list[ServiceSample]]: The fitted profile with its timings table, and the samples.

    Raises:
        InvalidSpace: If the samples cannot be fitted (fewer than six, or a single batch size).
    """

    samples = measure_samples(model, rows=rows, intra=intra, inter=inter, repeats=repeats, on_sample=on_sample)
    return fit_profile(samples, cores=cores, model=name).with_table(samples), samples


def calibrate_dispatch(
    model: ServedModel,
    profile: ServiceProfile,
    seed: int = 0,
    requests: int = 60,
    utilization: float = 0.05,
    busy: float = 0.8,
) -> tuple[ServiceProfile, dict[str, Any]]:
    """The engine's own costs, from two short engine runs of one single-threaded instance without batching:

    * at ``utilization`` almost no request waits for another: every batch starts on an idle worker, so the run
      shows the **hand-off** (scheduled arrival -> in the server's queue: the load generator, its pipe, the
      receiving thread; latency only) and the **wake-up** (queued -> the session's run starts, on a sleeping worker);
    * at ``busy`` load most batches start back to back: the gap between one run's end and the next one's start on
      the same worker is the **dispatch** overhead every batch occupies its worker with.

    The simulator charges dispatch to every batch, the wake-up (plus what a cold run adds over the timed one) to a
    batch whose worker sat idle, and the hand-off to every request's latency (:mod:`mlsysopt.serving.simulator`).
    Returns the calibrated profile and the runs' figures.

    Args:
        model: The served model (run on the real engine).
        profile: Its service profile; ``service_ms(1, 1, 1)`` sets the two rates.
        seed: Seed of the arrival schedules.
        requests: Requests per run.
        utilization: Target utilization of the idle run, in (0, 1).
        busy: Target utilization of the loaded run, in (0, 1).

    Returns:
        tuple[ServiceProfile, dict[str, Any]]: The profile with ``dispatch_ms``, ``handoff_ms`` and ``wake_ms``
        set, and the figures of both runs.
    """
    # deferred: imports onnxruntime
    from mlsysopt.serving.engine import Engine

    one = profile.service_ms(1, 1, 1)
    low = max(utilization * 1000.0 / one, 2.0 * MIN_WINDOW_REQUESTS / 10.0)
    high = max(busy * 1000.0 / (one + profile.dispatch_ms), low)
    cfg = Config(1, 1, 0.0, 1, 1, 0)
    with Engine(model, n_requests=requests, max_seconds=max(10.0, 2.0 * requests / low), seed=seed) as engine:
        idle = engine.measure(cfg, Workload(low))
        loaded = engine.measure(cfg, Workload(high), window=1)
    return calibrated(profile, idle, loaded)


def calibrate_outside(
    profile: ServiceProfile, backend: Backend, rate: float = 10.0, engine: str = "rayserve"
) -> tuple[ServiceProfile, dict[str, Any]]:
    """The overhead of a serving system measured from outside (Ray Serve over HTTP), from one low-rate window.

    A client sees only each request's latency, not the server's inner timings, so the whole gap between the idle
    p50 and the timed ``session.run`` of one row (HTTP, Ray Serve's proxy and router, the replica's queue) becomes
    the **hand-off**: latency every request pays without occupying the replica (the proxy is its own process).
    ``dispatch_ms`` and ``wake_ms`` are set to 0. One single-threaded replica without batching serves the window.

    Args:
        profile: The model's service profile (timed here).
        backend: A started measured backend (e.g. :class:`~mlsysopt.serving.rayserve.RayServeEngine`).
        rate: Arrival rate of the window, req/s (low: no request waits for another).
        engine: The backend's name, recorded in the figures.

    Returns:
        tuple[ServiceProfile, dict[str, Any]]: The profile with ``handoff_ms`` set, and the window's figures.
    """
    one = profile.service_ms(1, 1, 1)
    idle = backend.measure(Config(1, 1, 0.0, 1, 1, 0), Workload(rate))
    handoff = max(0.0, idle.p50_ms - one)
    figures = {
        "engine": engine, "rate": rate, "p50_ms": idle.p50_ms, "p99_ms": idle.p99_ms, "service_ms": one,
        "requests": idle.completed, "dispatch_ms": 0.0, "handoff_ms": handoff, "wake_ms": 0.0,
        "predicted_idle_p50_ms": handoff + one,
        "note": "seen from outside: the whole overhead over session.run is hand-off (latency, not replica time)",
    }  # fmt: skip
    return replace(profile, dispatch_ms=0.0, handoff_ms=handoff, wake_ms=0.0), figures


def calibrated(profile: ServiceProfile, idle: Measurement, loaded: Measurement) -> tuple[ServiceProfile, dict]:
    """The profile's dispatch, hand-off and wake-up from an idle and a loaded engine run (see calibrate_dispatch)."""
    one = profile.service_ms(1, 1, 1)
    ti, tl = idle.extra.get("timing", {}), loaded.extra.get("timing", {})

    def get(t: dict, key: str, fallback: float) -> float:
        v = t.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else fallback

    handoff = max(0.0, get(ti, "handoff_ms", 0.0))
    dispatch = max(0.0, get(tl, "gap_busy_ms", max(0.0, idle.p50_ms - one)))
    run_idle = get(ti, "run_idle_ms", one)
    wake = max(0.0, get(ti, "wake_ms", 0.0) + run_idle - one - dispatch)
    figures = {
        "rate": idle.workload.rate, "p50_ms": idle.p50_ms, "service_ms": one, "requests": idle.completed,
        "busy_rate": loaded.workload.rate, "busy_p50_ms": loaded.p50_ms, "busy_requests": loaded.completed,
        "idle_timing": ti, "busy_timing": tl,
        "dispatch_ms": dispatch, "handoff_ms": handoff, "wake_ms": wake,
        "predicted_idle_p50_ms": handoff + one + dispatch + wake,
    }  # fmt: skip
    return replace(profile, dispatch_ms=dispatch, handoff_ms=handoff, wake_ms=wake), figures
