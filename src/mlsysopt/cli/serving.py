"""``mlsysopt serving ...``: profile a served model, tune its parallelism against an SLO, serve it, study tuners."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mlsysopt.cli.common import (
    AddressOpt,
    BackendOpt,
    InputShapeOpt,
    OutOpt,
    SeedOpt,
    TimeoutOpt,
    WorkersOpt,
    console,
    err_console,
    measurement_progress,
    progress_bar,
)
from mlsysopt.cli.serving_io import (
    EngineOpt,
    KnobListOpt,
    MaxOngoingOpt,
    ModelOpt,
    PortOpt,
    PriorOpt,
    ProfileOpt,
    RateListOpt,
    RequestsOpt,
    ServeAddressOpt,
    SloOpt,
    WindowOpt,
    parse_list,
    print_measurements,
    print_tuning,
)
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.limits import parse_shape
from mlsysopt.runtime import check_parallel
from mlsysopt.serving.cost_model import DEFAULT_TOLERANCE
from mlsysopt.serving.inputs import KNOB_OPTIONS, load_config
from mlsysopt.serving.jobs import ProfileJob, ServeJob
from mlsysopt.serving.measured_study import MeasuredStudyJob
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config
from mlsysopt.serving.study_job import StudyJob
from mlsysopt.serving.tuner_rule import describe_figures, describe_rule
from mlsysopt.serving.tuning_job import TuningJob
from mlsysopt.serving.warm_start import warm_start_tuning
from mlsysopt.text import plural

serving_app = typer.Typer(
    help="RRL: SLO-aware tuning of request- and op-level parallelism of a served model (mlsysopt's ONNX Runtime "
    "engine, Ray Serve, or the simulator).",
    no_args_is_help=True,
)


@serving_app.command("profile")
def serving_profile(
    out: OutOpt,
    model: ModelOpt = "zoo:cnn",
    input_shape: InputShapeOpt = None,
    rows: Annotated[str, typer.Option("--rows", help="Batch sizes to time.")] = "1,2,4,8,16,32",
    intra: Annotated[str, typer.Option("--intra", help="Intra-op thread counts to time.")] = "1,2",
    inter: Annotated[str, typer.Option("--inter", help="Inter-op thread counts to time (>1: parallel mode).")] = "1,2",
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=1000, help="Timed runs per point (median).")] = 5,
    cores: Annotated[
        int | None,
        typer.Option("--cores", min=1, max=4096, help="Also write a profile extrapolated to this many cores."),
    ] = None,
    calibrate: Annotated[
        bool,
        typer.Option("--calibrate/--no-calibrate", help="Calibrate the per-batch dispatch overhead (low-rate run)."),
    ] = True,
    seed: SeedOpt = 0,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="Whose overheads are calibrated: real (mlsysopt's ONNX Runtime engine) | rayserve (Ray Serve over "
            "HTTP, one low-rate window after the timings; its whole overhead becomes the hand-off).",
        ),
    ] = "real",
    address: ServeAddressOpt = None,
    port: PortOpt = None,
) -> None:
    """Time one batch of the model on this CPU per (rows, intra, inter); fit and calibrate the simulator's model.

    Writes RUN_DIR/profile.json (and profile_<CORES>.json with --cores), result.json and profile.png. About 10 s for
    the zoo CNN with the defaults (--engine rayserve: about 30 s more, Ray Serve starting); warns when the fit is
    degenerate or --cores extrapolates > 4x past the measured.
    """
    grid = {k: parse_list(v, f"--{k}") for k, v in (("rows", rows), ("intra", intra), ("inter", inter))}
    with err_console.status("loading the model"):
        job = ProfileJob(
            out, model, **grid, repeats=repeats, cores=cores, input_shape=parse_shape(input_shape),
            calibrate=calibrate, seed=seed, engine=engine, address=address, port=port,
        )  # fmt: skip
    with job, progress_bar() as progress:
        task = progress.add_task(f"timing {job.points} points x {repeats} runs", total=job.points)
        result = job.run(lambda _s: progress.update(task, advance=1))
    prof = result["profile"]
    console.print(
        f"fitted {prof['model']} on {plural(prof['cores'], 'core')}: median fit error "
        f"{result['fit_median_rel_error']:.1%}; engine overheads: dispatch {prof['dispatch_ms']:.3g} ms per batch, "
        f"wake-up {prof['wake_ms']:.3g} ms after idling, hand-off {prof['handoff_ms']:.3g} ms per request"
    )
    for warning in result["warnings"]:
        err_console.print(f"warning: {warning}")
    console.print(f"wrote {', '.join(str(out / f) for f in result['files'])}")


@serving_app.command("tune")
def serving_tune(
    out: OutOpt,
    rate: RateListOpt = "80",
    slo_ms: SloOpt = None,
    budget: Annotated[int, typer.Option("--budget", min=1, help="Measurements per rate (the search).")] = 30,
    timeout: TimeoutOpt = None,
    tuner: Annotated[
        str,
        typer.Option(
            "--tuner",
            help="auto | rrl | tpe | gp | random | bandit | hill_climb | exhaustive | default. auto (the default) "
            f"runs the tuner that was best on the tuning presets for the budget: {describe_rule()}; rrl:ei is RRL "
            "picking by expected improvement over the prior. Why: tunes within 5% of the optimum after 10/30/60 "
            f"measurements, {describe_figures()} (held-out figures: docs/methods.md).",
        ),
    ] = "auto",
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="latency (lowest --stat) | cost (fewest cores, p99 <= SLO) | throughput (most req/s within the SLO).",
        ),
    ] = "latency",
    stat: Annotated[str, typer.Option("--stat", help="Latency statistic to minimize: mean|p50|p95|p99.")] = "mean",
    engine: EngineOpt = "real",
    model: ModelOpt = None,
    profile: ProfileOpt = None,
    input_shape: InputShapeOpt = None,
    requests: RequestsOpt = 200,
    instances: Annotated[str | None, typer.Option("--instances", help="Comma-separated instance counts.")] = None,
    max_batch: Annotated[str | None, typer.Option("--max-batch", help="Comma-separated max batch sizes.")] = None,
    max_ongoing: MaxOngoingOpt = None,
    timeout_ms: Annotated[
        str | None,
        typer.Option("--batch-timeout-ms", help="Comma-separated batch timeouts (ms; old spelling --timeout-ms)."),
    ] = None,
    intra: KnobListOpt = None,
    inter: KnobListOpt = None,
    execution_mode: Annotated[
        str | None, typer.Option("--execution-mode", help="Comma-separated: 0 sequential, 1 parallel.")
    ] = None,
    confirm_top: Annotated[
        int | None,
        typer.Option("--confirm-top", min=1, help="Candidates re-measured at the end (default: budget/4, 1 to 3)."),
    ] = None,
    confirm_rounds: Annotated[
        int | None, typer.Option("--confirm-rounds", min=1, help="Interleaved rounds (default 3; noise adds some).")
    ] = None,
    noise_windows: Annotated[
        int | None, typer.Option("--noise-windows", min=2, help="Windows of the noise check (default: budget, 2-5).")
    ] = None,
    window_s: WindowOpt = 1.0,
    address: ServeAddressOpt = None,
    port: PortOpt = None,
    seed: SeedOpt = 0,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Continue RUN_DIR/checkpoint.json after a kill.")
    ] = False,
    prior: PriorOpt = None,
    export_anyway: Annotated[
        bool,
        typer.Option(
            "--export-anyway/--no-export-anyway",
            help="Write ort_session_options.json and config.pbtxt even when the SLO is missed.",
        ),
    ] = False,
    warm_start: Annotated[
        str | None,
        typer.Option(
            "--warm-start",
            help="STUDY or auto: a prior fitted on earlier runs' measurements from the study store (rrl, gp, tpe).",
        ),
    ] = None,
    cost_model: Annotated[
        str | None,
        typer.Option(
            "--cost-model",
            help="builtin (the shipped latency oracle), an oracle folder or a logmse cost-model RUN: keep only the "
            "op-level settings (intra-op threads, execution mode) it predicts fast, and the default's; real engine.",
        ),
    ] = None,
    cost_model_tolerance: Annotated[
        float,
        typer.Option("--cost-model-tolerance", help="Keep settings predicted within this fraction of the best."),
    ] = DEFAULT_TOLERANCE,
) -> None:
    """Measure the noise, search the (reduced) space, confirm the top candidates against the default, and report.

    A configuration prints as n2 b8 t5ms i1 o1 seq: 2 instances (sessions), max batch 8, batch timeout 5 ms,
    1 intra-op and 1 inter-op thread, sequential execution (par: parallel).

    The verdict compares the confirmed pick with the confirmed default: when their 95% intervals overlap it says
    "keep the default". Writes RUN_DIR/result.json (search-time and confirmed values, verdict per rate),
    checkpoint.json (after each measurement), steps.png, heatmap.png, confirm.png, and the recommended
    configuration as ort_session_options.json and config.pbtxt (Triton), not when the SLO is missed.
    """
    given = {"instances": instances, "max_batch": max_batch, "batch_timeout_ms": timeout_ms}
    given |= {"intra_threads": intra, "inter_threads": inter, "execution_mode": execution_mode}
    given |= {"max_ongoing": max_ongoing} if max_ongoing is not None else {}
    knobs = {k: parse_list(v, KNOB_OPTIONS[k], float if k == "batch_timeout_ms" else int) for k, v in given.items()}
    status = "checking the inputs and starting the engine" + (", fitting the prior" if prior else "")
    with err_console.status(status):
        job = TuningJob(
            out, rates=parse_list(rate, "--rate", float), budget=budget, tuner=tuner,
            objective=Objective(objective, slo_ms, stat), engine=engine, model=model, profile=profile,
            input_shape=parse_shape(input_shape), requests=requests, knobs=knobs, seed=seed, resume=resume,
            timeout=timeout, confirm_top=confirm_top, confirm_rounds=confirm_rounds, noise_windows=noise_windows,
            prior=prior, export_anyway=export_anyway, cost_model=cost_model,
            cost_model_tolerance=cost_model_tolerance, window_s=window_s, address=address, port=port,
            warm=warm_start is not None,
        )  # fmt: skip
    with job:
        if job.shortlist is not None:
            err_console.print(job.shortlist.describe())

        if note := warm_start_tuning(job, warm_start):  # earlier runs from the study store; nothing written yet
            err_console.print(note)
        err_console.print(job.describe())
        with measurement_progress(job.total) as progress:

            def on_step(s) -> None:
                progress.tick(
                    f"rate {s.workload.rate:g}: best {job.objective.describe(s.best_score)} ({s.best_config.label()})"
                )

            report = job.run(on_step, progress.tick, progress.set_total)
    print_tuning(report, out)


@serving_app.command("serve")
def serving_serve(
    out: OutOpt,
    model: ModelOpt = "zoo:cnn",
    input_shape: InputShapeOpt = None,
    rate: RateListOpt = "50",
    config: Annotated[
        Path | None, typer.Option("--config", help="Knobs from a JSON file (e.g. a tune result.json's best).")
    ] = None,
    instances: Annotated[int, typer.Option("--instances", min=1, help="Instances (sessions).")] = 1,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Largest dynamic batch.")] = 1,
    timeout_ms: Annotated[
        float, typer.Option("--batch-timeout-ms", min=0.0, help="Batch timeout (ms; old spelling --timeout-ms).")
    ] = 0.0,
    intra: Annotated[int, typer.Option("--intra", min=1, help="Intra-op threads per session.")] = 1,
    inter: Annotated[int, typer.Option("--inter", min=1, help="Inter-op threads per session.")] = 1,
    execution_mode: Annotated[
        int, typer.Option("--execution-mode", min=0, max=1, help="0 sequential, 1 parallel.")
    ] = 0,
    requests: RequestsOpt = 500,
    slo_ms: SloOpt = None,
    seed: SeedOpt = 0,
    engine: EngineOpt = "real",
    window_s: Annotated[
        float | None,
        typer.Option("--window-s", min=0.001, max=10.0, help="Seconds of arrivals per window (default: --requests)."),
    ] = None,
    address: ServeAddressOpt = None,
    port: PortOpt = None,
) -> None:
    """Serve the model with one configuration at each rate; draw latency vs throughput with the SLO, mark saturation.

    A configuration prints as n2 b8 t5ms i1 o1 seq: 2 instances (sessions), max batch 8, batch timeout 5 ms,
    1 intra-op and 1 inter-op thread, sequential execution (par: parallel).

    Writes RUN_DIR/result.json (every rate: windows, intervals, state) and curve.png.
    """
    if config is not None:
        cfg = load_config(config)
    else:
        cfg = Config(instances, max_batch, timeout_ms, intra, inter, execution_mode)
        cfg.check()
    rates = parse_list(rate, "--rate", float)
    shape = parse_shape(input_shape)
    with err_console.status("checking the inputs"):
        job = ServeJob(
            out, cfg, rates, model, input_shape=shape, requests=requests, slo_ms=slo_ms, seed=seed, engine=engine,
            window_s=window_s, address=address, port=port,
        )  # fmt: skip
    with job, progress_bar() as progress:
        task = progress.add_task(f"serving with {cfg.label()}", total=len(rates))
        rows = job.run(lambda _m: progress.update(task, advance=1))
    print_measurements(rows, job.backend.describe(), slo_ms)
    if any(m.saturated for m in rows):
        console.print("[yellow]saturated: throughput below 95% of the offered rate (requests arrive faster than this "
                      "configuration serves them)[/yellow]")  # fmt: skip
    console.print(f"wrote {out / 'result.json'}, {out / 'curve.png'}")


@serving_app.command("study")
def serving_study(
    out: OutOpt,
    tuners: Annotated[str, typer.Option("--tuners", help="Comma-separated tuners to compare.")] = "rrl,tpe,gp,random",
    seeds: Annotated[int, typer.Option("--seeds", min=1, max=1000, help="Seeds per tuner.")] = 10,
    profile: ProfileOpt = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", help="Two rates A,B: tune at A, then re-tune at B (default from the profile)."),
    ] = None,
    cap_fraction: Annotated[
        float, typer.Option("--cap", min=0.001, max=1.0, help="Measurement cap per run, fraction of the space.")
    ] = 0.2,
    requests: RequestsOpt = 400,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    seed: SeedOpt = 0,
    prior: PriorOpt = None,
    engine: EngineOpt = "sim",
    model: ModelOpt = None,
    slo_ms: SloOpt = None,
    instances: Annotated[str | None, typer.Option("--instances", help="Measured engines: instance counts.")] = None,
    max_batch: Annotated[str | None, typer.Option("--max-batch", help="Measured engines: max batch sizes.")] = None,
    intra: KnobListOpt = None,
    window_s: WindowOpt = 1.0,
    port: PortOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Measured engines: continue the tables after a kill.")
    ] = False,
) -> None:
    """Tuners x seeds: measurements to within 5% of the exhaustive optimum, and after a rate change. On the simulated
    engine the exhaustive tables and the runs go through --backend local|ray with --workers parallel tasks; a tuner
    named NAME_warm (rrl_warm, gp_warm, tpe_warm) is warm-started from --prior. With --engine real|rayserve and
    --model, every configuration of the grid (narrowed by --instances/--max-batch/--intra) is measured here at both
    --rate A,B (checkpointed, --resume), then the tuners replay the measured tables (--address: the Ray cluster).

    Writes RUN_DIR/result.json and study.png. About a minute for the defaults on 2 cores.
    """
    names = parse_list(tuners, "--tuners", str)
    rates = parse_list(rate, "--rate", float)
    if engine != "sim":
        _measured_study(
            out, names, engine, model, rates, seeds, slo_ms, {"instances": instances, "max_batch": max_batch,
            "intra_threads": intra}, requests, window_s, cap_fraction, seed, resume, address, port,
        )  # fmt: skip
        return
    measured_only = (model, slo_ms, instances, max_batch, intra, port)
    if resume or any(v is not None for v in measured_only):
        raise InvalidOption(
            "--model, --slo-ms, --resume, --port and the knob lists (--instances, --max-batch, --intra) are for a "
            "measured study (--engine real|rayserve)"
        )
    check_parallel(workers, backend, address)
    job = StudyJob(
        out, tuners=names, seeds=seeds, profile=profile, rates=rates, cap_fraction=cap_fraction, requests=requests,
        workers=workers, backend=backend, address=address, seed=seed, prior=prior,
    )  # fmt: skip
    with err_console.status(f"{job.describe()}"):
        result = job.run()
    _print_study(result, names, f"simulated study: {result['space_size']:,} configurations, {seeds} seeds")
    console.print(f"wrote {out / 'result.json'}, {out / 'study.png'}")


def _measured_study(out: Path, names: list[str], engine: str, model: str | None, rates: list[float], *args) -> None:
    """``serving study --engine real|rayserve``: measured tables, then the tuners replayed on them."""
    seeds, slo_ms, given, requests, window_s, cap_fraction, seed, resume, address, port = args
    if model is None:
        raise InvalidOption(f"--engine {engine} needs --model (an .onnx file, zoo:NAME or file.py:factory)")
    knobs = {k: parse_list(v, KNOB_OPTIONS[k], int) for k, v in given.items()}
    with err_console.status("checking the inputs and starting the engine"):
        job = MeasuredStudyJob(
            out, names, engine, model, rates, seeds=seeds, slo_ms=slo_ms, knobs=knobs, requests=requests,
            window_s=window_s, cap_fraction=cap_fraction, seed=seed, resume=resume, address=address, port=port,
        )  # fmt: skip
    with job:
        err_console.print(job.describe())
        with measurement_progress(job.measurements) as progress:
            result = job.run(progress.tick)
    title = f"measured study ({engine}): {result['space_size']:,} configurations, {len(job.seeds)} seeds"
    _print_study(result, names, title)
    console.print(f"wrote {out / 'result.json'}, {out / 'study.png'}")


def _print_study(result: dict, names: list[str], title: str) -> None:

    table = Table(title=title, title_justify="left")
    for col in ("tuner", "median measurements to 5%", "after the rate change", "reached"):
        table.add_column(col, justify="left" if col == "tuner" else "right")
    for name in names:
        table.add_row(
            name, f"{result['evals_to_5pct'][name]:g}", f"{result['shift'][name]:g}", f"{result['reached'][name]:.0%}"
        )
    console.print(table)
