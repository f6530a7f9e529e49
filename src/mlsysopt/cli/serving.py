"""``mlsysopt serving ...``: profile a served model, tune its parallelism against an SLO, serve it under load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlsysopt.cli.common import SeedOpt, console, err_console, parse_shape, progress_bar
from mlsysopt.cli.serving_io import (
    InputShapeOpt,
    KnobOpt,
    ModelOpt,
    OutOpt,
    ProfileOpt,
    RequestsOpt,
    SloOpt,
    parse_list,
    print_measurements,
    print_tuning,
)

serving_app = typer.Typer(
    help="RRL: SLO-aware tuning of request- and op-level parallelism of a served model (ONNX Runtime).",
    no_args_is_help=True,
)


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
    from mlsysopt.serving.jobs import ProfileJob

    grid = {k: parse_list(v, f"--{k}") for k, v in (("rows", rows), ("intra", intra), ("inter", inter))}
    with err_console.status("loading the model"):
        job = ProfileJob(out, model, **grid, repeats=repeats, cores=cores, input_shape=parse_shape(input_shape))
    with job, err_console.status(f"timing {job.points} points x {repeats} runs"):
        result = job.run()
    prof = result["profile"]
    console.print(
        f"fitted {prof['model']} on {prof['cores']} cores: median fit error {result['fit_median_rel_error']:.1%}"
    )
    console.print(f"wrote {', '.join(str(out / f) for f in result['files'])}")


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
    from mlsysopt.serving.inputs import KNOB_OPTIONS
    from mlsysopt.serving.jobs import TuningJob
    from mlsysopt.serving.objective import Objective

    given = {"workers": workers, "max_batch": max_batch, "batch_timeout_ms": timeout_ms}
    given |= {"intra_threads": intra, "inter_threads": inter}
    knobs = {k: parse_list(v, KNOB_OPTIONS[k], float if k == "batch_timeout_ms" else int) for k, v in given.items()}
    with err_console.status("starting the backend"):
        job = TuningJob(
            out, rates=parse_list(rate, "--rate", float), budget=budget, tuner=tuner,
            objective=Objective(objective, slo_ms, stat), backend=backend, model=model, profile=profile,
            input_shape=parse_shape(input_shape), requests=requests, knobs=knobs, seed=seed, resume=resume,
        )  # fmt: skip
    with job:
        err_console.print(job.describe())
        with progress_bar() as progress:
            task = progress.add_task("tuning", total=job.total)

            def on_step(s) -> None:
                what = f"rate {s.workload.rate:g}: best {s.best_score:.4g} ({s.best_config.label()})"
                progress.update(task, completed=s.index + 1, description=what)

            result = job.run(on_step)
    print_tuning(result, out, job.space.size)


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
    from mlsysopt.serving.inputs import load_config
    from mlsysopt.serving.jobs import ServeJob
    from mlsysopt.serving.space import Config

    cfg = load_config(config) if config is not None else Config(workers, max_batch, timeout_ms, intra, inter)
    rates = parse_list(rate, "--rate", float)
    shape = parse_shape(input_shape)
    job = ServeJob(out, cfg, rates, model, input_shape=shape, requests=requests, slo_ms=slo_ms, seed=seed)
    with job, progress_bar() as progress:
        task = progress.add_task(f"serving with {cfg.label()}", total=len(rates))
        rows = job.run(lambda _m: progress.update(task, advance=1))
    print_measurements(rows, job.backend.describe())
    if any(m.saturated for m in rows):
        console.print("[yellow]saturated: requests arrive faster than this configuration serves them[/yellow]")
    console.print(f"wrote {out / 'result.json'}")
