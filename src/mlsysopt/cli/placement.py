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
    check_parallel,
    err_console,
    progress_bar,
)
from mlsysopt.errors import MlsysoptError
from mlsysopt.placement.config import TrainConfig

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
    pio.check_timeout(timeout)
    check_parallel(workers, backend, address)
    given = {k: values[k] for k in RUNTIME}  # the others only when typed: --resume keeps the saved ones
    sources = {k: getattr(ctx.get_parameter_source(k), "name", "DEFAULT") for k in KNOBS}
    given.update({k: values[k] for k, how in sources.items() if how not in ("DEFAULT", "DEFAULT_MAP")})
    from mlsysopt.placement.config import MIXED
    from mlsysopt.placement.training import SYNTHETIC, train, training_run
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
    method: Annotated[str, typer.Option("--method", help="A method of 'placement compare'.")] = "giph",
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
) -> None:
    """Place a graph on a cluster with one method (GiPH with the shipped policy by default).

    GiPH starts from the best of a portfolio (HEFT, all on the fastest feasible device, CPOP, the best of saga's
    schedulers) and improves it with a local search whose moves its policy proposes: never worse than that start.
    The table compares the result with each portfolio member (or, for another method, with HEFT and the fastest
    device), and says when one of them is better. Writes result.json, placement.json, cluster.json, gantt.png,
    search.png, and device_map.json for a PyTorch model. The search ends after --budget simulator evaluations or
    --timeout seconds, whichever comes first.
    """
    options = dict(locals())
    from mlsysopt.placement.experiment import comparison, get_method, heft_placement, run_method

    needs_policy = get_method(method).needs_policy
    if init not in (None, "heft", "random"):
        raise MlsysoptError(f"unknown --init '{init}' (choose from: heft, random)")
    if needs_policy:
        pio.check_policy(policy)
    pio.check_sizes(options)
    run = pio.one_shot_run("placement place", options)
    giph = pio.load_giph(policy) if needs_policy else None
    problem, about, owners = pio.load_problem(options, giph=giph)
    if init is not None and method not in ("giph", "giph_paper", "annealing", "local_search"):
        err_console.print(f"note: --init is ignored by {method}")
    from mlsysopt.placement.base import default_budget

    graph, cluster = problem.graph, problem.cluster
    spend = default_budget(graph) if budget is None else budget
    t0 = time.perf_counter()
    with err_console.status(f"placing {graph.num_nodes} tasks with {method} (budget {spend} evaluations)"):
        import numpy as np

        start = heft_placement(problem) if init == "heft" else None
        if init == "random":
            start = problem.random_placement(np.random.default_rng(seed))
        res = run_method(method, problem, spend, seed, giph, start, timeout)
    seconds = time.perf_counter() - t0
    compared = comparison(problem, res)
    from mlsysopt.report.gantt import plot_gantt
    from mlsysopt.report.search import plot_search

    sched = problem.simulate(res.placement)
    result = {"command": "placement place", "source": graph_source, "seed": seed, "budget": spend, "init": init}
    result.update(policy=policy if needs_policy else None, **res.to_dict(graph, cluster), seconds=seconds)
    result.update({k: v for k, v in problem.describe(sched).items() if k != "placement"}, **about)
    result["comparison"] = compared
    result["units"] = {"makespan": "s", "cp_min": "s", "seconds": "s"}
    files = ["result.json", "placement.json", "cluster.json", "gantt.png", "search.png"]
    with run:
        plot_gantt(graph, cluster, sched, run.file("gantt.png"), title=f"{graph_source}: {method}")
        plot_search({method: res.history}, run.file("search.png"), title=f"{graph_source}: {method} (budget {spend})")
        run.write_json("placement.json", result["placement"])
        run.write_json("cluster.json", cluster.to_dict())
        if pio.write_device_map(run, problem, res.placement, owners, graph_source):
            files.append("device_map.json")
        run.write_json("result.json", result)
    pio.print_place(result, cluster.num_devices, out, files)


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
) -> None:
    """Run every method with the same simulator budget over several seeds.

    Writes result.json, cluster.json and search.png. The (method, seed) searches run on --workers processes (or
    Ray tasks), with the same results as serially; each search ends after --budget evaluations or --timeout
    seconds.
    """
    options = dict(locals())
    from mlsysopt.placement.experiment import METHODS, compare, select_methods

    names, _ = select_methods(None if methods is None else pio.parse_names(methods), True)
    needs_policy = any(METHODS[m].needs_policy for m in names)
    if needs_policy:
        pio.check_policy(policy)
    pio.check_sizes(options)
    check_parallel(workers, backend, address)
    run = pio.one_shot_run("placement compare", options)
    giph = pio.load_giph(policy) if needs_policy else None
    problem, about, _ = pio.load_problem(options, runs=len(names) * seeds, giph=giph)
    from mlsysopt.runtime import make_executor

    with pio.interruptible(lambda: "nothing was written"), run:
        with make_executor(backend, workers, address) as executor, progress_bar() as progress:
            task = progress.add_task(f"compare on {executor.describe()}", total=len(names) * seeds)

            def on_run(done: int, method: str, s: int) -> None:
                progress.update(task, completed=done, description=f"{method}, seed {s}")

            seed_list = [seed + k for k in range(seeds)]
            cmp = compare(problem, None, names, seed_list, budget, giph, on_run, executor, timeout)
            progress.update(task, completed=len(names) * seeds, description="compare done")
        from mlsysopt.report.search import plot_search

        result = {"command": "placement compare", "source": graph_source, "policy": policy if needs_policy else None}
        result.update(cmp.to_dict(), **about, workers=workers, backend=backend)
        result["units"] = {"makespan": "s", "cp_min": "s", "seconds": "s"}
        curves = {name: r["curve"] for name, r in result["results"].items()}
        plot_search(curves, run.file("search.png"), title=f"{graph_source}: mean over {seeds} seed(s)")
        run.write_json("cluster.json", problem.cluster.to_dict())
        run.write_json("result.json", result)
    pio.print_compare(result, out)


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
) -> None:
    """Re-place after devices leave or join: GiPH.adapt vs a HEFT re-run vs keeping the placement.

    Writes result.json, placement.json and cluster.json (the changed cluster), old_cluster.json, gantt.png
    (and device_map.json for a PyTorch model). GiPH's seeds run on --workers processes (or Ray tasks).
    """
    options = dict(locals())
    removed = pio.parse_names(remove)
    if not removed and add == 0:
        raise MlsysoptError("nothing changes: give --remove dev3,dev5 and/or --add N")
    pio.check_policy(policy)
    pio.check_sizes(options)
    if add:
        from mlsysopt.placement.limits import check_devices

        check_devices(add + (devices or 0))
    check_parallel(workers, backend, address)
    run = pio.one_shot_run("placement adapt", options)
    from mlsysopt.graph.placement import load_placement, placement_to_dict
    from mlsysopt.placement.adaptation import adapt, change_cluster
    from mlsysopt.placement.experiment import heft_placement
    from mlsysopt.runtime import make_executor

    giph = pio.load_giph(policy)
    problem, about, owners = pio.load_problem(options, runs=seeds, giph=giph)
    from mlsysopt.placement.base import default_budget

    graph, old = problem.graph, problem.cluster
    start = heft_placement(problem) if placement_path is None else load_placement(placement_path, graph, old)
    new, added = change_cluster(graph, old, removed, add, seed)
    spend = default_budget(graph) if budget is None else budget
    seed_list = [seed + k for k in range(seeds)]
    with pio.interruptible(lambda: "nothing was written"), run:
        with make_executor(backend, workers, address) as executor:
            status = f"adapting {graph.num_nodes} tasks ({seeds} x {spend} evaluations, {executor.describe()})"
            with err_console.status(status):
                res = adapt(graph, old, new, start, giph, spend, seed, seed_list, executor, timeout)
        from mlsysopt.report.gantt import plot_gantt

        result = {"command": "placement adapt", "source": graph_source, "seed": seed, "budget": spend}
        result.update(added=added, removed=removed, start_placement=str(placement_path) if placement_path else "heft")
        result.update(res.to_dict(graph, new), cp_min=res.problem.cp_min, old_cluster_source=about["cluster_source"])
        result["units"] = {"makespan": "s", "cp_min": "s"}
        files = ["result.json", "placement.json", "cluster.json", "old_cluster.json", "gantt.png"]
        title = f"{graph_source}: GiPH adapted placement"
        plot_gantt(graph, new, res.problem.simulate(res.giph.placement), run.file("gantt.png"), title=title)
        run.write_json("placement.json", placement_to_dict(graph, new, res.giph.placement))
        run.write_json("cluster.json", new.to_dict())
        run.write_json("old_cluster.json", old.to_dict())
        if pio.write_device_map(run, res.problem, res.giph.placement, owners, graph_source):
            files.append("device_map.json")
        run.write_json("result.json", {**result, "cluster": new.to_dict()})
    pio.print_adapt(result, old.num_devices, new.num_devices, out, files)
