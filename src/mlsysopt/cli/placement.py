"""``mlsysopt placement ...``: train GiPH, place a graph, compare methods, adapt to cluster changes."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mlsysopt.cli import placement_io as pio
from mlsysopt.cli.common import InputShapeOpt, NumTasksOpt, SeedOpt, err_console, progress_bar
from mlsysopt.errors import MlsysoptError

placement_app = typer.Typer(
    help="GiPH: learned task-graph placement on heterogeneous devices; baselines; adaptation to cluster changes.",
    no_args_is_help=True,
)


def _opt(flag: str, text: str, low: float = 1) -> typer.models.OptionInfo:
    return typer.Option(flag, min=low, help=text)


@placement_app.command("train")
def placement_train(
    out: pio.OutOpt,
    updates: Annotated[int | None, _opt("--updates", "Policy updates (default 50).")] = None,
    episodes_per_update: Annotated[int | None, _opt("--episodes-per-update", "Episodes each (default 4).")] = None,
    min_tasks: Annotated[int | None, _opt("--min-tasks", "Fewest tasks per training graph (default 10).", 2)] = None,
    max_tasks: Annotated[int | None, _opt("--max-tasks", "Most tasks per training graph (default 50).", 2)] = None,
    min_devices: Annotated[int | None, _opt("--min-devices", "Fewest devices per cluster (default 10).")] = None,
    max_devices: Annotated[int | None, _opt("--max-devices", "Most devices per cluster (default 20).")] = None,
    lr: Annotated[float | None, _opt("--lr", "Adam learning rate (default 0.01).", 0.0)] = None,
    hidden: Annotated[int | None, _opt("--hidden", "Policy width (default 32).")] = None,
    seed: Annotated[int | None, _opt("--seed", "Random seed (default 0).", 0)] = None,
    workers: Annotated[int | None, _opt("--workers", "Parallel rollouts (default 1).")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="local | ray (default local).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from RUN_DIR/policy.pt.")] = False,
) -> None:
    """Train the GiPH policy with REINFORCE on synthetic layered DAGs and random clusters.

    Writes RUN_DIR/policy.pt (checkpointed atomically while training), result.json and training.png.

    With --resume the saved settings are kept; only --updates, --workers and --backend may change.
    """
    given = {k: v for k, v in locals().items() if k not in ("out", "resume") and v is not None}  # TrainConfig fields
    from mlsysopt.placement.training import SYNTHETIC, train, training_run
    from mlsysopt.report.search import plot_training

    run, cfg, first = training_run(out, given, resume)
    sizes = f"{cfg.min_tasks}-{cfg.max_tasks} tasks, {cfg.min_devices}-{cfg.max_devices} devices"
    what = f"{cfg.updates} updates x {cfg.episodes_per_update} episodes"
    err_console.print(f"training GiPH on {SYNTHETIC}: {what}, {sizes}")
    if first:
        err_console.print(f"resuming {escape(str(run.checkpoint))} after update {first}")
    t0 = time.perf_counter()
    with run, progress_bar() as progress:
        task = progress.add_task("training", total=cfg.updates, completed=min(first, cfg.updates))

        def on_update(update: int, stats: dict[str, float]) -> None:
            text = f"update {update + 1}: improvement {stats['improvement']:.1%}, entropy {stats['entropy']:.3f}"
            progress.update(task, completed=update + 1, description=text)

        trained = train(cfg, checkpoint=run, resume=resume, on_update=on_update)
        result = {"command": "placement train", "data": SYNTHETIC, "config": asdict(cfg)}
        result.update(resumed_from_update=first if resume else None, seconds=time.perf_counter() - t0)
        result.update(history=trained.history, checkpoint="policy.pt", plot="training.png")
        plot_training(trained.history, run.file("training.png"), title=f"GiPH training on {SYNTHETIC}")
        run.write_json("result.json", result)
    pio.print_training(trained.history, SYNTHETIC, out)


@placement_app.command("place")
def placement_place(
    graph_source: pio.GraphArg,
    out: pio.OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    method: Annotated[str, typer.Option("--method", help="A method of 'placement compare' (default giph).")] = "giph",
    policy: pio.PolicyOpt = None,
    init: Annotated[str | None, typer.Option("--init", help="giph/annealing start: heft | random (default).")] = None,
    budget: pio.BudgetOpt = None,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Place GRAPH on a cluster with one method; write result.json, placement.json, gantt.png, search.png."""
    options = dict(locals())
    from mlsysopt.placement.experiment import get_method, heft_placement, run_method

    needs_policy = get_method(method).needs_policy
    if init not in (None, "heft", "random"):
        raise MlsysoptError(f"unknown --init '{init}' (choose from: heft, random)")
    pio.check_policy(policy, f"method '{method}'" if needs_policy else None)
    run = pio.one_shot_run("placement place", options)
    problem, about = pio.load_problem(options)
    giph = pio.load_giph(policy) if needs_policy else None
    if init is not None and method not in ("giph", "annealing"):
        err_console.print(f"note: --init is ignored by {method}")
    graph, cluster = problem.graph, problem.cluster
    spend = 2 * graph.num_nodes if budget is None else budget
    t0 = time.perf_counter()
    with err_console.status(f"placing {graph.num_nodes} tasks with {method} (budget {spend} evaluations)"):
        res = run_method(method, problem, spend, seed, giph, heft_placement(problem) if init == "heft" else None)
    seconds = time.perf_counter() - t0
    from mlsysopt.report.gantt import plot_gantt
    from mlsysopt.report.search import plot_search

    sched = problem.simulate(res.placement)
    result = {"command": "placement place", "source": graph_source, "seed": seed, "budget": spend, "init": init}
    result.update(policy=str(policy) if policy else None, **res.to_dict(graph, cluster), seconds=seconds)
    result.update({k: v for k, v in problem.describe(sched).items() if k != "placement"}, **about)
    with run:
        plot_gantt(graph, cluster, sched, run.file("gantt.png"), title=f"{graph_source}: {method}")
        plot_search({method: res.history}, run.file("search.png"), title=f"{graph_source}: {method} (budget {spend})")
        run.write_json("placement.json", result["placement"])
        run.write_json("result.json", result)
    pio.print_place(result, cluster.num_devices, out)


@placement_app.command("compare")
def placement_compare(
    graph_source: pio.GraphArg,
    out: pio.OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="As for 'place'; without it GiPH is skipped.")] = None,
    methods: Annotated[str | None, typer.Option("--methods", help="Comma list (default: every method).")] = None,
    budget: pio.BudgetOpt = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds per method (--seed, --seed+1, ...).")] = 3,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Run every method with the same simulator budget over several seeds; table, result.json, search.png."""
    options = dict(locals())
    from mlsysopt.placement.experiment import METHODS, compare, select_methods

    names, skipped = select_methods(None if methods is None else pio.parse_names(methods), policy is not None)
    pio.check_policy(policy, None)
    run = pio.one_shot_run("placement compare", options)
    problem, about = pio.load_problem(options)
    giph = pio.load_giph(policy) if any(METHODS[m].needs_policy for m in names) else None
    if skipped:
        err_console.print(f"no --policy given: skipping {', '.join(skipped)}")
    with progress_bar() as progress:
        task = progress.add_task("compare", total=len(names) * seeds)

        def on_run(done: int, method: str, s: int) -> None:
            progress.update(task, completed=done, description=f"{method}, seed {s}")

        seed_list = [seed + k for k in range(seeds)]
        cmp = compare(problem, methods=names, seeds=seed_list, budget=budget, giph=giph, on_run=on_run)
        progress.update(task, completed=len(names) * seeds, description="compare done")
    from mlsysopt.report.search import plot_search

    result = {"command": "placement compare", "source": graph_source, "policy": str(policy) if policy else None}
    result.update(cmp.to_dict(), skipped={m: "no --policy given" for m in skipped}, **about)
    with run:
        curves = {name: r["curve"] for name, r in result["results"].items()}
        plot_search(curves, run.file("search.png"), title=f"{graph_source}: mean over {seeds} seed(s)")
        run.write_json("result.json", result)
    pio.print_compare(result, out)


@placement_app.command("adapt")
def placement_adapt(
    graph_source: pio.GraphArg,
    out: pio.OutOpt,
    cluster_path: pio.ClusterOpt = None,
    devices: pio.DevicesOpt = None,
    policy: pio.PolicyOpt = None,
    placement_path: Annotated[
        Path | None, typer.Option("--placement", help="Start placement JSON on the old cluster (default: HEFT's).")
    ] = None,
    remove: Annotated[str | None, typer.Option("--remove", help="Devices to remove, e.g. dev3,dev5.")] = None,
    add: Annotated[int, typer.Option("--add", min=0, help="New devices to add (drawn like --devices).")] = 0,
    budget: pio.BudgetOpt = None,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Re-place after devices leave or join: GiPH.adapt vs a HEFT re-run vs keeping the placement."""
    options = dict(locals())
    removed = pio.parse_names(remove)
    if not removed and add == 0:
        raise MlsysoptError("nothing changes: give --remove dev3,dev5 and/or --add N")
    pio.check_policy(policy, "placement adapt")
    run = pio.one_shot_run("placement adapt", options)
    from mlsysopt.graph.placement import load_placement, placement_to_dict
    from mlsysopt.placement.adaptation import adapt, change_cluster
    from mlsysopt.placement.experiment import heft_placement

    problem, about = pio.load_problem(options)
    graph, old = problem.graph, problem.cluster
    start = heft_placement(problem) if placement_path is None else load_placement(placement_path, graph, old)
    new, added = change_cluster(graph, old, removed, add, seed)
    giph = pio.load_giph(policy)
    spend = 2 * graph.num_nodes if budget is None else budget
    with err_console.status(f"adapting {graph.num_nodes} tasks (budget {spend} evaluations)"):
        res = adapt(graph, old, new, start, giph, spend, seed)
    from mlsysopt.report.gantt import plot_gantt

    result = {"command": "placement adapt", "source": graph_source, "seed": seed, "budget": spend, "added": added}
    result.update(removed=removed, start_placement=str(placement_path) if placement_path else "heft")
    result.update(res.to_dict(graph, new), cp_min=res.problem.cp_min, old_cluster_source=about["cluster_source"])
    with run:
        title = f"{graph_source}: GiPH adapted placement"
        plot_gantt(graph, new, res.problem.simulate(res.giph.placement), run.file("gantt.png"), title=title)
        run.write_json("placement.json", placement_to_dict(graph, new, res.giph.placement))
        run.write_json("cluster.json", new.to_dict())
        run.write_json("result.json", {**result, "cluster": new.to_dict()})
    pio.print_adapt(result, old.num_devices, new.num_devices, out)
