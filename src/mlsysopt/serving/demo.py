"""The serving section of ``mlsysopt demo``: profile a real model, tune it live with RRL, study tuners in simulation.

Registered in :data:`mlsysopt.demo.BUILDERS` as ``"mlsysopt.serving.demo:demo_section"``. About a minute: the
zoo ResNet served by ONNX Runtime on this machine (real measurements), then RRL vs random search on a SimPy model
of the engine with this machine's profile extrapolated to 32 cores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsysopt.report.html import Section
from mlsysopt.text import plural

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext

REAL_BUDGET = 12
SIM_BUDGET = 60
SIM_CORES = 32


def demo_section(ctx: DemoContext) -> list[Section]:
    """Profile the zoo ResNet, tune its serving configuration live with RRL, then compare tuners on the simulator."""
    from mlsysopt.runtime.threads import torch_threads

    with torch_threads(1):
        return [_real(ctx), _simulated(ctx)]


def _real(ctx: DemoContext) -> Section:
    from mlsysopt.serving.confirmation import confirm
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.experiment import measure_profile, plot_tuning
    from mlsysopt.serving.inputs import machine_threads, resolve_model
    from mlsysopt.serving.objective import Objective
    from mlsysopt.serving.space import Space, Workload
    from mlsysopt.serving.tuners import get_tuner
    from mlsysopt.serving.tuning import tune

    out, cores = ctx.out / "serving", machine_threads()
    out.mkdir(parents=True, exist_ok=True)
    ctx.step("serving: exporting the zoo ResNet to ONNX and timing batches")
    model, _ = resolve_model("zoo:resnet", out, largest=16)
    profile, _ = measure_profile(model, (1, 4, 16), (1, 2), (1,), repeats=3, cores=cores, name=model.path.name)
    profile.save(out / "profile.json")
    rate = _demo_rate(profile)
    slo = 20.0 * profile.service_ms(1, 1, 1) + 10.0
    objective = Objective("latency", slo_ms=slo)
    space = Space.for_machine(cores, max_batch=(1, 4, 16))
    workload = Workload(rate)
    ctx.step(f"serving: RRL tunes the real engine at {rate:.0f} req/s ({REAL_BUDGET} measurements)")
    with Engine(model, n_requests=150, max_seconds=4.0, slo_ms=slo, max_threads=cores, seed=ctx.seed) as engine:
        default = engine.measure(space.default(engine.cores), workload)
        result = tune(get_tuner("rrl", space, objective, seed=ctx.seed), engine, [(workload, REAL_BUDGET)])
        top = result.per_rate[-1].ranked(objective)[:1]
        ctx.step("serving: confirming RRL's pick against the default, interleaved (2 rounds)")
        confirmed = confirm(engine, top, space.default(engine.cores), workload, objective, rounds=2)
    plot_tuning(
        result, space, out / "real_steps.png", out / "real_heatmap.png", name="rrl", title="RRL, real",
        ylabel="mean latency (ms)", slo_ms=slo,
    )  # fmt: skip
    measured = [s.measurement for s in result.steps]
    bm = result.best_measurement
    ctx.results["serving_real"] = {
        "data": "real measurements: ONNX Runtime on this machine",
        "rate": rate,
        "slo_ms": slo,
        "space_size": space.size,
        "profile": profile.to_dict(),
        "default": default.to_dict(),
        "best": bm.to_dict() if bm else None,
        "measurements": [m.to_dict() for m in measured],
        "message": result.message,
        "confirmation": confirmed.to_dict(objective),
        "headline": {
            "ORT default, mean latency": f"{default.mean_ms:.2f} ms",
            "RRL's pick, mean latency": "-" if bm is None else f"{bm.mean_ms:.2f} ms ({len(measured)} measured)",
            "confirmed pick (median, interleaved)": f"{confirmed.pick.value:.2f} ms ({confirmed.pick.config.label()})",
        },
    }
    rows = [
        ["ONNX Runtime default", default.config.label(), default.mean_ms, default.p99_ms, default.saturated],
    ]
    if bm is not None:
        rows.append(["RRL best (search)", bm.config.label(), bm.mean_ms, bm.p99_ms, bm.saturated])
    for c in confirmed.candidates:
        name = "confirmed pick" if c is confirmed.pick else ("confirmed default" if c.is_default else "confirmed")
        rows.append([name, c.config.label(), c.value, c.measurement.p99_ms, c.measurement.saturated])
    text = (
        f"The zoo ResNet exported to ONNX and served by ONNX Runtime on this machine ({plural(cores, 'core')}): "
        "a shared "
        f"request queue, dynamic batching and worker sessions, under open-loop Poisson load at {rate:.0f} "
        f"requests/s. RRL measured {len(measured)} of the {space.size} configurations; latency is real, "
        f"measured here. SLO (p99): {slo:.1f} ms. {result.message} Then its pick and the default were re-measured "
        f"interleaved (2 rounds); the pick is the best confirmed median."
    )
    return Section(
        heading="Serving: RRL tunes a real ONNX Runtime engine",
        text=text,
        table=rows,
        columns=["configuration", "knobs", "mean ms (confirmed: median)", "p99 ms", "saturated"],
        images=["serving/real_steps.png", "serving/real_heatmap.png"],  # relative to the run directory
        captions=["measured latency per step and best so far", "best measured latency per (instances, max batch)"],
        anchor="serving",
    )


def _simulated(ctx: DemoContext) -> Section:
    from mlsysopt.report.serving import plot_steps
    from mlsysopt.serving.experiment import step_points
    from mlsysopt.serving.objective import Objective
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.simulator import SimulatedEngine
    from mlsysopt.serving.space import Space, Workload
    from mlsysopt.serving.tuners import get_tuner
    from mlsysopt.serving.tuning import tune

    out = ctx.out / "serving"
    profile = ServiceProfile.load(out / "profile.json").scaled(SIM_CORES)
    space = Space.for_machine(SIM_CORES, max_batch=(1, 2, 4, 8, 16, 32, 64))
    rate = 0.5 * SIM_CORES * 1000.0 / profile.service_ms(1, 1, 1)
    objective = Objective("latency")
    sim = SimulatedEngine(profile, n_requests=300, seed=ctx.seed)
    runs: dict[str, list[dict[str, float]]] = {}
    final: dict[str, Any] = {}
    for name in ("rrl", "random", "tpe"):
        ctx.step(f"serving: {name} on the simulated {SIM_CORES}-core machine ({SIM_BUDGET} measurements)")
        res = tune(get_tuner(name, space, objective, seed=ctx.seed), sim, [(Workload(rate), SIM_BUDGET)])
        runs[name] = step_points(res.steps, objective)
        final[name] = {"best_ms": res.steps[-1].best_score, "best": res.best.to_dict() if res.best else None}
    plot_steps(runs, out / "sim_steps.png", ylabel="mean latency (ms)", title=f"tuners, simulated {SIM_CORES} cores")
    ctx.results["serving_sim"] = {
        "data": f"SimPy model; this machine's profile extrapolated to {SIM_CORES} cores (not measured there)",
        "rate": rate,
        "space_size": space.size,
        "tuners": final,
        "headline": {f"{n} best (simulated)": f"{f['best_ms']:.2f} ms" for n, f in final.items()},
    }
    rows = [[n, f["best_ms"], space.size] for n, f in final.items()]
    text = (
        f"The same engine modelled in SimPy with the profile just measured, extrapolated to {SIM_CORES} cores "
        f"by Amdahl's law (an extrapolation, not a measurement): {space.size} configurations, {rate:.0f} req/s, "
        f"{SIM_BUDGET} measurements per tuner."
    )
    return Section(
        heading=f"Serving: tuners on a simulated {SIM_CORES}-core machine",
        text=text,
        table=rows,
        columns=["tuner", f"best mean latency after {SIM_BUDGET} (ms)", "space size"],
        images=["serving/sim_steps.png"],
        captions=["best mean latency so far per tuner"],
    )


def _demo_rate(profile: Any) -> float:
    """A rate that keeps one single-threaded session about 60% busy: batching and threads then matter."""
    return round(0.6 * 1000.0 / profile.service_ms(1, 1, 1), -1) or 10.0
