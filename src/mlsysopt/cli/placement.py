"""``mlsysopt placement ...``: train GiPH, place a graph, compare methods, adapt to cluster changes."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

import mlsysopt.cli.placement_io as pio
from mlsysopt.cli.common import (
    AddressOpt,
    BackendOpt,
    InputShapeOpt,
    NumTasksOpt,
    OutOpt,
    SeedOpt,
    SourceArg,
    TimeoutOpt,
    WorkersOpt,
    err_console,
    progress_bar,
)
from mlsysopt.placement.config import MIXED, TrainConfig
from mlsysopt.placement.jobs import (
    AdaptRequest,
    CompareRequest,
    PlaceRequest,
    prepare_adapt,
    prepare_compare,
    prepare_place,
)
from mlsysopt.placement.problem_spec import ProblemSpec, check_timeout
from mlsysopt.runtime import check_parallel, make_executor

placement_app = typer.Typer(
    help="GiPH: learned task-graph placement on heterogeneous devices; baselines; adaptation to cluster changes.",
    no_args_is_help=True,
)
D = TrainConfig()  # the defaults --help shows
RUNTIME = ("workers", "backend", "address", "timeout")  # options of this invocation, never taken from a saved run
KNOBS = (
    "updates",
    "episodes_per_update",
    "min_tasks",
    "max_tasks",
    "min_devices",
    "max_devices",
    "lr",
    "hidden",
    "seed",
    "stages",
    "distribution",
    "imitation_problems",
    "teacher_steps",
    "imitation_epochs",
    "finetune_lr",
)


@placement_app.command("train")
def placement_train(
    ctx: typer.Context,
    out: OutOpt,
    updates: Annotated[int, pio.int_opt("--updates", "Policy updates.")] = D.updates,
    episodes_per_update: Annotated[int, pio.int_opt("--episodes-per-update", "Episodes each.")] = D.episodes_per_update,
    min_tasks: Annotated[int, pio.int_opt("--min-tasks", "Fewest tasks per training graph.", 2)] = D.min_tasks,
    max_tasks: Annotated[int, pio.int_opt("--max-tasks", "Most tasks per training graph.", 2)] = D.max_tasks,
    min_devices: Annotated[int, pio.int_opt("--min-devices", "Fewest devices per cluster.")] = D.min_devices,
    max_devices: Annotated[int, pio.int_opt("--max-devices", "Most devices per cluster.")] = D.max_devices,
    lr: Annotated[float, pio.float_opt("--lr", "Adam learning rate (the paper's REINFORCE).")] = D.lr,
    hidden: Annotated[int, pio.int_opt("--hidden", "Policy width (hidden units).")] = D.hidden,
    stages: Annotated[
        str, typer.Option("--stages", help="imitation+reinforce (the shipped policy's) | reinforce (the paper's).")
    ] = D.stages,
    distribution: Annotated[
        str, typer.Option("--distribution", help="mixed (layered, workflows, DNNs in real units) | layered.")
    ] = D.distribution,
    imitation_problems: Annotated[
        int, pio.int_opt("--imitation-problems", "Problems the steepest-descent teacher walks.", 0)
    ] = D.imitation_problems,
    teacher_steps: Annotated[int, pio.int_opt("--teacher-steps", "Teacher moves per start.")] = D.teacher_steps,
    imitation_epochs: Annotated[int, pio.int_opt("--imitation-epochs", "Epochs over the teacher's samples.", 0)] = (
        D.imitation_epochs
    ),
    finetune_lr: Annotated[float, pio.float_opt("--finetune-lr", "Adam learning rate of REINFORCE fine-tuning.")] = (
        D.finetune_lr
    ),
    seed: SeedOpt = D.seed,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    timeout: TimeoutOpt = None,
    resume: pio.ResumeOpt = False,
) -> None:
    """Train the GiPH policy: imitation of a steepest-descent teacher, then REINFORCE on the local search.

    The default --distribution mixed draws layered DAGs (synthetic), WfChef workflow recipes (fitted to real traces)
    and traced DNNs, on preset-like and random clusters. --stages reinforce is the paper's training (REINFORCE on
    relocation walks from scratch; --distribution layered for its synthetic layered DAGs only).
    Writes RUN_DIR/policy.pt (checkpointed atomically after every epoch and update), teacher.pt (the teacher's
    samples), result.json and training.png. Episodes run on --workers processes (or Ray tasks); every backend
    gives the same policy for the same seed.

    With --resume the saved settings are kept; --updates, --workers, --backend, --address, --timeout may change.
    """
    values = dict(locals())
    check_timeout(timeout)
    check_parallel(workers, backend, address)
    given = {k: values[k] for k in RUNTIME}  # the others only when typed: --resume keeps the saved ones
    sources = {k: getattr(ctx.get_parameter_source(k), "name", "DEFAULT") for k in KNOBS}
    given.update({k: values[k] for k, how in sources.items() if how not in ("DEFAULT", "DEFAULT_MAP")})
    # deferred: mlsysopt.placement.training imports pandas, pyarrow, torch, torch_geometric
    from mlsysopt.placement.training import SYNTHETIC, train, training_run

    # deferred: mlsysopt.report.search imports matplotlib
    from mlsysopt.report.search import plot_training

    run, cfg, first = training_run(out, given, resume)
    paper = cfg.stages == "reinforce"
    data = MIXED if cfg.distribution == "mixed" and not paper else SYNTHETIC  # the paper's stage: layered DAGs
    sizes = (
        f"{cfg.min_tasks}-{cfg.max_tasks} tasks, {cfg.min_devices}-{cfg.max_devices} devices"
        if paper
        else "mixed sizes"
    )
    what = f"{cfg.updates} updates x {cfg.episodes_per_update} episodes"
    if not paper:
        what = f"imitation ({cfg.imitation_problems} problems, {cfg.imitation_epochs} epochs), then REINFORCE {what}"
    total = cfg.updates + (0 if paper or cfg.imitation_problems == 0 else cfg.imitation_epochs)
    where = "in this process" if workers == 1 and backend == "local" else f"on {workers} {backend} worker(s)"
    err_console.print(f"training GiPH on {data}: {what}, {sizes}, episodes {where}")
    if first:
        err_console.print(f"resuming {escape(str(run.checkpoint))} after update {first}")
    t0 = time.perf_counter()

    def kept() -> str:
        if run.has_checkpoint:
            return f"{run.checkpoint} holds the finished updates: --resume continues"
        return "no update had finished, nothing was kept"

    with pio.interruptible(kept), run, progress_bar() as progress:
        task = progress.add_task("training", total=total, completed=min(first, total))

        def on_update(update: int, stats: dict[str, float]) -> None:
            if stats.get("stage") == "imitation":
                text = f"imitation epoch {update + 1}: loss {stats['loss']:.3f}, agreement {stats['agreement']:.1%}"
            elif stats.get("stage") == "reinforce":
                text = f"update {update + 1}: improvement {stats['improvement']:.1%}"
            else:
                text = f"update {update + 1}: improvement {stats['improvement']:.1%}, entropy {stats['entropy']:.3f}"
            progress.update(task, completed=update + 1, description=text)

        trained = train(cfg, checkpoint=run, resume=resume, on_update=on_update)
        result = {"command": "placement train", "data": data, "config": asdict(cfg)}
        result.update(resumed_from_update=first if resume else None, seconds=time.perf_counter() - t0)
        result.update(stopped_by=trained.stopped_by, updates_done=len(trained.history))
        result.update(history=trained.history, checkpoint="policy.pt", plot="training.png")
        plot_training(trained.history, run.file("training.png"), title="GiPH training")
        run.write_json("result.json", result)
    pio.print_training(trained.history, data, out, trained.stopped_by)


@placement_app.command("place")
def placement_place(
    graph_source: SourceArg,
    out: OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="A method of 'placement compare' [default: local_search: the portfolio's best start, then a local "
            "search; giph: the same search with the shipped policy proposing the moves].",
        ),
    ] = "local_search",
    policy: pio.PolicyOpt = "pretrained",
    init: Annotated[
        str | None,
        typer.Option(
            "--init",
            help="A start placement: heft | random (giph adds it to its portfolio; giph_paper and annealing start "
            "from it) [default: the method's own: giph's portfolio, a random one for the others].",
        ),
    ] = None,
    budget: pio.BudgetOpt = None,
    timeout: TimeoutOpt = None,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
    execution: pio.ExecutionOpt = "fifo",
    op_costs: pio.OpCostsOpt = None,
    op_costs_device: pio.OpCostsDeviceOpt = None,
) -> None:
    """Place a graph on a cluster with one method (by default GiPH's portfolio start and local search).

    The default starts from the best of a portfolio (HEFT, all on the fastest feasible device, CPOP, the best of
    saga's schedulers) and improves it with a local search: never worse than that start. --method giph lets the
    shipped policy propose the moves (fewer evaluations, more seconds: at equal wall clock it does not win).
    The table compares the result with each portfolio member (or, for another method, with HEFT and the fastest
    device), and says when one of them is better. Writes result.json, placement.json, schedule.json (each
    device's tasks in order, with start and finish), cluster.json, gantt.png, search.png, and device_map.json for
    a PyTorch model. --execution ordered simulates a static schedule (HEFT is then its own schedule). The
    search ends after --budget simulator evaluations or --timeout seconds, whichever comes first.
    """
    problem = _problem(graph_source, cluster_path, devices, num_tasks, input_shape, seed, timeout, execution, op_costs,
                       op_costs_device)  # fmt: skip
    job = prepare_place(PlaceRequest(problem, out, method, policy, init, budget), status=err_console.status)
    job.load()
    for note in job.notes:
        err_console.print(f"note: {escape(note)}")
    outcome = job.run()
    pio.print_place(outcome.result, outcome.problem.cluster.num_devices, out, outcome.files)


@placement_app.command("compare")
def placement_compare(
    graph_source: SourceArg,
    out: OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    policy: pio.PolicyOpt = "pretrained",
    methods: Annotated[str | None, typer.Option("--methods", help="Comma list [default: every method].")] = None,
    budget: pio.BudgetOpt = None,
    timeout: TimeoutOpt = None,
    seeds: pio.SeedsOpt = 3,
    seed: SeedOpt = 0,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
    execution: pio.ExecutionOpt = "fifo",
    op_costs: pio.OpCostsOpt = None,
    op_costs_device: pio.OpCostsDeviceOpt = None,
) -> None:
    """Run every method with the same simulator budget over several seeds.

    Writes result.json, cluster.json and search.png. The (method, seed) searches run on --workers processes (or
    Ray tasks), with the same results as serially; each search ends after --budget evaluations or --timeout
    seconds.
    """
    problem = _problem(graph_source, cluster_path, devices, num_tasks, input_shape, seed, timeout, execution, op_costs,
                       op_costs_device)  # fmt: skip
    names = None if methods is None else tuple(pio.parse_names(methods))
    request = CompareRequest(problem, out, names, policy, budget, seeds, workers, backend, address)
    job = prepare_compare(request, status=err_console.status)
    total = len(request.names) * seeds
    job.load()
    with (
        pio.interruptible(lambda: pio.stopped_compare(job.run_dir)),
        make_executor(backend, workers, address) as executor,
        progress_bar() as progress,
    ):
        task = progress.add_task(f"compare on {executor.describe()}", total=total)

        def on_run(done: int, name: str, s: int) -> None:
            progress.update(task, completed=done, description=f"{name}, seed {s}")

        outcome = job.run(on_run, executor)
        progress.update(task, completed=total, description="compare done")
    pio.print_compare(outcome.result, out)


@placement_app.command("adapt")
def placement_adapt(
    graph_source: SourceArg,
    out: OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    policy: pio.PolicyOpt = "pretrained",
    placement_path: Annotated[
        Path | None, typer.Option("--placement", help="Start placement JSON on the old cluster [default: HEFT's].")
    ] = None,
    remove: Annotated[str | None, typer.Option("--remove", help="Devices to remove, e.g. dev3,dev5.")] = None,
    add: Annotated[int, pio.int_opt("--add", "New devices to add (drawn like --devices).", 0)] = 0,
    budget: pio.BudgetOpt = None,
    timeout: TimeoutOpt = None,
    seeds: Annotated[int, pio.int_opt("--seeds", "GiPH re-placements (seeds --seed, --seed+1, ...); best kept.")] = 1,
    seed: SeedOpt = 0,
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
    execution: pio.ExecutionOpt = "fifo",
) -> None:
    """Re-place after devices leave or join: GiPH.adapt vs a HEFT re-run vs keeping the placement.

    Writes result.json, placement.json and cluster.json (the changed cluster), old_cluster.json, gantt.png
    (and device_map.json for a PyTorch model). GiPH's seeds run on --workers processes (or Ray tasks).
    """
    problem = _problem(graph_source, cluster_path, devices, num_tasks, input_shape, seed, timeout, execution)
    start = None if placement_path is None else str(placement_path)
    request = AdaptRequest(problem, out, tuple(pio.parse_names(remove)), add, start, policy, budget, seeds, workers,
                           backend, address)  # fmt: skip
    job = prepare_adapt(request, status=err_console.status)
    job.load()
    with pio.interruptible(lambda: "nothing was written"):
        outcome = job.run()
    pio.print_adapt(outcome.result, job.old_devices, outcome.problem.cluster.num_devices, out, outcome.files)


@placement_app.command("calibrate")
def placement_calibrate(
    out: Annotated[Path, typer.Option("--out", help="The op profile to write (a .json file).")],
    threads: Annotated[
        int, pio.int_opt("--threads", "PyTorch threads while timing (the profile holds for that many).")
    ] = 1,
    reps: Annotated[int, pio.int_opt("--reps", "Timed calls per micro-kernel (the median is kept).", 5)] = 300,
    seed: SeedOpt = 0,
) -> None:
    """Time ~60 PyTorch micro-kernels on this CPU and fit its op profile: per op group a fixed cost, a FLOP and a
    byte rate (a few seconds). Give the file to --op-costs of place, compare and graph simulate."""
    # deferred: imports torch
    from mlsysopt.graph.calibrate import calibrate
    from mlsysopt.graph.op_profile import check_profile_out

    path = check_profile_out(out)
    with progress_bar() as progress:
        task = progress.add_task("timing micro-kernels", total=None)

        def on_kernel(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        profile = calibrate(threads, reps, seed, on_kernel)
    profile.save(path)
    pio.print_profile(profile, path)


def _problem(
    source: str,
    cluster: Path | None,
    devices: int | None,
    num_tasks: int,
    input_shape: str | None,
    seed: int,
    timeout: float | None,
    execution: str = "fifo",
    op_costs: str | None = None,
    op_costs_device: str | None = None,
) -> ProblemSpec:
    """The problem options every placement command shares, as the library's checked request."""
    return ProblemSpec(source, None if cluster is None else str(cluster), devices, num_tasks, input_shape, seed,
                       timeout, execution, op_costs, op_costs_device)  # fmt: skip
