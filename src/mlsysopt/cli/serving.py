"""``mlsysopt serving ...``: profile a served model, tune its parallelism against an SLO, serve it under load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from mlsysopt.cli.common import SeedOpt, _check_run_dir, _parse_shape, console, err_console, progress_bar
from mlsysopt.cli.serving_io import (
    InputShapeOpt,
    KnobOpt,
    ModelOpt,
    OutOpt,
    ProfileOpt,
    RequestsOpt,
    SloOpt,
    build_space,
    config_from_file,
    machine_threads,
    make_backend,
    parse_list,
    print_measurements,
    print_tuning,
)
from mlsysopt.errors import MlsysoptError

serving_app = typer.Typer(
    help="RRL: SLO-aware tuning of request- and op-level parallelism of a served model (ONNX Runtime).",
    no_args_is_help=True,
)


# ---------------------------------------------------------------------------- profile
@serving_app.command("profile")
def serving_profile(
    out: OutOpt,
    model: ModelOpt = "zoo:cnn",
    input_shape: InputShapeOpt = None,
    rows: Annotated[str, typer.Option("--rows", help="Batch sizes to time.")] = "1,2,4,8,16,32",
    intra: Annotated[str, typer.Option("--intra", help="Intra-op thread counts to time.")] = "1,2",
    inter: Annotated[str, typer.Option("--inter", help="Inter-op thread counts to time.")] = "1,2",
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs per point (median).")] = 5,
    cores: Annotated[
        int | None, typer.Option("--cores", min=1, help="Also write an extrapolated profile for this many cores.")
    ] = None,
) -> None:
    """Time one batch of the model on this CPU per (rows, intra, inter); fit the simulator's service-time model.

    Writes RUN_DIR/profile.json (and profile_<CORES>.json with --cores), result.json and profile.png.
    """
    _check_run_dir(out)
    if model is None:
        raise MlsysoptError("serving profile needs --model (an .onnx file or zoo:cnn)")
    from mlsysopt.io import write_json_atomic
    from mlsysopt.serving.experiment import resolve_model
    from mlsysopt.serving.profile import fit_profile, measure_samples

    out.mkdir(parents=True, exist_ok=True)
    rows_l, intra_l, inter_l = (parse_list(v, o) for v, o in ((rows, "--rows"), (intra, "--intra"), (inter, "--inter")))
    limit = machine_threads()
    for n in (*intra_l, *inter_l):
        if n > limit:
            raise MlsysoptError(f"{n} threads exceeds the {limit} this machine allows (--intra/--inter)")
    points = len(rows_l) * len(intra_l) * len(inter_l)
    if points < 6:
        raise MlsysoptError(f"a service profile needs at least 6 points (--rows x --intra x --inter), got {points}")
    with err_console.status("loading the model"):
        served = resolve_model(model, out, _parse_shape(input_shape))
    served.check_batch(max(rows_l))
    with err_console.status(f"timing {points} points x {repeats} runs"):
        samples = measure_samples(served, rows=rows_l, intra=intra_l, inter=inter_l, repeats=repeats)
    prof = fit_profile(samples, cores=limit, model=served.path.name)
    prof.save(out / "profile.json")
    files = ["profile.json"]
    if cores is not None:
        prof.scaled(cores).save(out / f"profile_{cores}.json")
        files.append(f"profile_{cores}.json")
    _plot_profile(prof, samples, out / "profile.png")
    result = {
        "command": "serving profile",
        "model": str(served.path),
        "samples": [s.__dict__ for s in samples],
        "profile": prof.to_dict(),
        "fit_median_rel_error": prof.fit_error(samples),
        "files": [*files, "profile.png"],
    }
    write_json_atomic(out / "result.json", result)
    console.print(f"fitted {prof.model} on {limit} cores: median fit error {result['fit_median_rel_error']:.1%}")
    console.print(f"wrote {', '.join(str(out / f) for f in result['files'])}")


def _plot_profile(prof, samples, path: Path) -> None:
    from mlsysopt.report.figures import new_figure, save_figure

    fig = new_figure(7.0, 4.0)
    ax = fig.add_subplot()
    pairs = sorted({(s.intra, s.inter) for s in samples})
    for k, (i, o) in enumerate(pairs):
        pts = sorted((s.rows, s.ms) for s in samples if (s.intra, s.inter) == (i, o))
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o", color=f"C{k}", label=f"measured intra {i} inter {o}")
        ax.plot(xs, [prof.service_ms(x, i, o) for x in xs], "-", color=f"C{k}", alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows per batch")
    ax.set_ylabel("service time (ms)")
    ax.grid(linewidth=0.3, alpha=0.6)
    ax.legend(fontsize=8)
    ax.set_title("one batch through ONNX Runtime: measured (dots) and fitted model (lines)", fontsize=9)
    save_figure(fig, path)


# ---------------------------------------------------------------------------- tune
@serving_app.command("tune")
def serving_tune(
    out: OutOpt,
    rate: Annotated[str, typer.Option("--rate", help="Requests/s; a list (80,120) re-tunes after each change.")] = "80",
    slo_ms: SloOpt = None,
    budget: Annotated[int, typer.Option("--budget", min=1, help="Measurements per rate.")] = 30,
    tuner: Annotated[
        str, typer.Option("--tuner", help="rrl | tpe | gp | random | bandit | hill_climb | exhaustive | default.")
    ] = "rrl",
    objective: Annotated[
        str, typer.Option("--objective", help="latency (lowest --stat) | cost (fewest cores with p99 <= SLO).")
    ] = "latency",
    stat: Annotated[str, typer.Option("--stat", help="Latency statistic to minimize: mean|p50|p95|p99.")] = "mean",
    backend: Annotated[str, typer.Option("--backend", help="real (ONNX Runtime here) | sim (SimPy model).")] = "real",
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    input_shape: InputShapeOpt = None,
    requests: RequestsOpt = 200,
    workers: KnobOpt = None,
    max_batch: Annotated[str | None, typer.Option("--max-batch", help="Comma-separated max batch sizes.")] = None,
    timeout_ms: Annotated[str | None, typer.Option("--timeout-ms", help="Comma-separated batch timeouts.")] = None,
    intra: Annotated[str | None, typer.Option("--intra", help="Comma-separated intra-op threads.")] = None,
    inter: Annotated[str | None, typer.Option("--inter", help="Comma-separated inter-op threads.")] = None,
    seed: SeedOpt = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue RUN_DIR/checkpoint.json after a kill.")] = False,
) -> None:
    """Search the configuration space for the lowest latency (or cost under the SLO); every measurement is kept.

    Writes RUN_DIR/result.json (every measurement), checkpoint.json (after each one), steps.png and heatmap.png.
    """
    _check_run_dir(out)
    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.serving import plot_heatmap, plot_steps
    from mlsysopt.serving.backend import Objective
    from mlsysopt.serving.experiment import heatmap_values, load_checkpoint, run_tuning
    from mlsysopt.serving.space import Space, Workload
    from mlsysopt.serving.tuners import get_tuner

    rates = parse_list(rate, "--rate", float)
    workloads = [Workload(r) for r in rates]
    obj = Objective(objective, slo_ms, stat)
    ckpt = out / "checkpoint.json"
    if not resume and ckpt.exists():
        raise MlsysoptError(f"{ckpt} exists: pass --resume to continue it, or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    with err_console.status("starting the backend"):
        engine, describe = make_backend(backend, model, profile, input_shape, out, requests, slo_ms, seed)
    with engine:
        max_batch_default = (1, 2, 4, 8, 16) if backend == "real" else (1, 2, 4, 8, 16, 32, 64)
        knobs = {"workers": workers, "max_batch": max_batch, "batch_timeout_ms": timeout_ms}
        knobs |= {"intra_threads": intra, "inter_threads": inter}
        space = build_space(Space.for_machine(engine.cores, max_batch_default), knobs)
        search = get_tuner(tuner, space, obj, seed=seed)
        settings = {
            "tuner": tuner,
            "rates": rates,
            # one rate: --resume may extend the budget; several: the schedule itself depends on it
            "budget": budget if len(rates) > 1 else None,
            "objective": obj.to_dict(),
            "space": space.to_dict(),
            "backend": backend,
            "model": model,
            "profile": profile,
            "requests": requests,
            "seed": seed,
        }
        if resume:  # refuse a missing or mismatched checkpoint before anything is printed
            if not ckpt.is_file():
                raise MlsysoptError(f"--resume: no checkpoint at {ckpt} (run without --resume first)")
            load_checkpoint(ckpt, settings)
        err_console.print(f"{describe}; {space.size} configurations; tuner {tuner}")
        t0 = time.perf_counter()
        with progress_bar() as progress:
            task = progress.add_task("tuning", total=budget * len(workloads))

            def on_step(s) -> None:
                progress.update(
                    task,
                    completed=s.index + 1,
                    description=f"rate {s.workload.rate:g}: best {s.best_score:.4g} ({s.best_config.label()})",
                )

            result, replayed = run_tuning(
                search, engine, [(w, budget) for w in workloads], ckpt, settings, resume, on_step
            )
    seconds = time.perf_counter() - t0
    runs = {tuner: [_step_point(s, i, result.steps) for i, s in enumerate(result.steps)]}
    ylabel = f"{stat} latency (ms)" if objective == "latency" else "cost (cores; >1000 = SLO missed)"
    plot_steps(runs, out / "steps.png", slo_ms=slo_ms, ylabel=ylabel, title=f"{tuner} on {backend} backend")
    measured = [s.measurement for s in result.steps]
    last = workloads[-1]
    best = result.best
    plot_heatmap(
        heatmap_values(measured, obj, last),
        space.values["workers"],
        space.values["max_batch"],
        out / "heatmap.png",
        measured=[(m.config.workers, m.config.max_batch) for m in measured if m.workload == last],
        best=(best.workers, best.max_batch) if best else None,
        title=f"measured at {last.rate:g} req/s: best {ylabel} per (workers, max batch)",
        unit="ms" if objective == "latency" else "cores",
    )
    write_json_atomic(
        out / "result.json",
        {
            "command": "serving tune",
            "backend": describe,
            "settings": settings,
            "seconds": seconds,
            "replayed_from_checkpoint": replayed,
            "best": best.to_dict() if best else None,
            "best_measurement": result.best_measurement.to_dict() if result.best_measurement else None,
            "slo_met": result.slo_met,
            "message": result.message,
            "measurements": [s.measurement.to_dict() for s in result.steps],
            "plots": ["steps.png", "heatmap.png"],
        },
    )
    print_tuning(result, out, space.size)


def _step_point(step, i: int, steps) -> dict[str, float]:
    shift = i > 0 and steps[i - 1].workload != step.workload
    return {"value": step.score, "best": step.best_score, "shift": float(shift)}


# ---------------------------------------------------------------------------- serve
@serving_app.command("serve")
def serving_serve(
    out: OutOpt,
    model: ModelOpt = "zoo:cnn",
    input_shape: InputShapeOpt = None,
    rate: Annotated[str, typer.Option("--rate", help="Requests/s; a list measures each in turn.")] = "50",
    config: Annotated[
        Path | None, typer.Option("--config", help="Knobs from a JSON file (e.g. a tune result.json's best).")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker sessions.")] = 1,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Largest dynamic batch.")] = 1,
    timeout_ms: Annotated[float, typer.Option("--timeout-ms", min=0.0, help="Batch timeout (ms).")] = 0.0,
    intra: Annotated[int, typer.Option("--intra", min=1, help="Intra-op threads per session.")] = 1,
    inter: Annotated[int, typer.Option("--inter", min=1, help="Inter-op threads per session.")] = 1,
    requests: RequestsOpt = 500,
    slo_ms: SloOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Serve the model with one configuration under Poisson load at each rate; report latency and saturation."""
    _check_run_dir(out)
    from mlsysopt.io import write_json_atomic
    from mlsysopt.serving.space import Config, Workload

    if config is not None:
        cfg = Config.from_dict(config_from_file(config), where=f"--config {config}")
    else:
        cfg = Config(workers, max_batch, timeout_ms, intra, inter)
    rates = parse_list(rate, "--rate", float)
    out.mkdir(parents=True, exist_ok=True)
    engine, describe = make_backend("real", model, None, input_shape, out, requests, slo_ms, seed)
    rows = []
    with engine, progress_bar() as progress:
        task = progress.add_task(f"serving with {cfg.label()}", total=len(rates))
        for r in rates:
            rows.append(engine.measure(cfg, Workload(r)))
            progress.update(task, advance=1)
    print_measurements(rows, describe)
    if any(m.saturated for m in rows):
        console.print("[yellow]saturated: requests arrive faster than this configuration serves them[/yellow]")
    write_json_atomic(
        out / "result.json",
        {"command": "serving serve", "backend": describe, "measurements": [m.to_dict() for m in rows]},
    )
    console.print(f"wrote {out / 'result.json'}")
