"""``mlsysopt placement ...``: train GiPH, place a graph, compare methods, adapt to cluster changes."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import InputShapeOpt, NumTasksOpt, SeedOpt, _check_run_dir, console, err_console
from mlsysopt.cli.placement_io import (
    GIPH_METHODS,
    SYNTHETIC,
    BudgetOpt,
    ClusterOpt,
    DevicesOpt,
    GraphArg,
    OutOpt,
    PolicyOpt,
    changed_cluster,
    check_backend,
    check_method,
    check_policy_file,
    heft_placement,
    load_giph,
    load_problem,
    method_summary,
    parse_methods,
    parse_names,
    print_adapt,
    print_compare,
    print_training,
    progress_bar,
    require_policy,
    resume_config,
    run_method,
)
from mlsysopt.errors import MlsysoptError

placement_app = typer.Typer(
    help="GiPH: learned task-graph placement on heterogeneous devices; baselines; adaptation to cluster changes.",
    no_args_is_help=True,
)


# ---------------------------------------------------------------------------- train
@placement_app.command("train")
def placement_train(
    out: OutOpt,
    updates: Annotated[int | None, typer.Option("--updates", min=1, help="Policy updates (default: 50).")] = None,
    episodes_per_update: Annotated[
        int | None, typer.Option("--episodes-per-update", min=1, help="Episodes per update (default: 4).")
    ] = None,
    min_tasks: Annotated[
        int | None, typer.Option("--min-tasks", min=2, help="Fewest tasks of a training graph (default: 10).")
    ] = None,
    max_tasks: Annotated[
        int | None, typer.Option("--max-tasks", min=2, help="Most tasks of a training graph (default: 50).")
    ] = None,
    min_devices: Annotated[
        int | None, typer.Option("--min-devices", min=1, help="Fewest devices of a training cluster (default: 10).")
    ] = None,
    max_devices: Annotated[
        int | None, typer.Option("--max-devices", min=1, help="Most devices of a training cluster (default: 20).")
    ] = None,
    lr: Annotated[float | None, typer.Option("--lr", min=0.0, help="Adam learning rate (default: 0.01).")] = None,
    hidden: Annotated[int | None, typer.Option("--hidden", min=1, help="Policy width (default: 32).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, help="Random seed (default: 0).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Parallel rollouts (default: 1).")] = None,
    backend: Annotated[str | None, typer.Option("--backend", help="local | ray (default: local).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from RUN_DIR/policy.pt.")] = False,
) -> None:
    """Train the GiPH policy with REINFORCE on synthetic layered DAGs and random clusters.

    Writes RUN_DIR/policy.pt (checkpointed atomically while training), result.json and training.png.

    With --resume the saved settings are kept; only --updates, --workers and --backend may change.
    """
    _check_run_dir(out)
    given = {
        "updates": updates,
        "episodes_per_update": episodes_per_update,
        "min_tasks": min_tasks,
        "max_tasks": max_tasks,
        "min_devices": min_devices,
        "max_devices": max_devices,
        "lr": lr,
        "hidden": hidden,
        "seed": seed,
        "workers": workers,
        "backend": backend,
    }
    given = {k: v for k, v in given.items() if v is not None}
    check_backend(given.get("backend", "local"))

    ckpt = out / "policy.pt"
    if not resume and ckpt.exists():
        raise MlsysoptError(f"{ckpt} exists: pass --resume to continue it, or choose another --out")
    if resume and not ckpt.is_file():
        raise MlsysoptError(f"--resume: {ckpt} does not exist (train without --resume first)")
    from mlsysopt.placement.training import TrainConfig, train

    first = 0
    if resume:
        cfg, first = resume_config(ckpt, given, TrainConfig)
    else:
        cfg = TrainConfig(**given)
    cfg.validate()

    what = f"{cfg.updates} updates x {cfg.episodes_per_update} episodes"
    sizes = f"{cfg.min_tasks}-{cfg.max_tasks} tasks, {cfg.min_devices}-{cfg.max_devices} devices"
    err_console.print(f"training GiPH on {SYNTHETIC}: {what}, {sizes}")
    if first:
        err_console.print(f"resuming {escape(str(ckpt))} after update {first}")
    t0 = time.perf_counter()
    with progress_bar() as progress:
        task = progress.add_task("training", total=cfg.updates, completed=min(first, cfg.updates))

        def on_update(update: int, stats: dict[str, float]) -> None:
            progress.update(
                task,
                completed=update + 1,
                description=f"update {update + 1}: improvement {stats['improvement']:.1%}, "
                f"entropy {stats['entropy']:.3f}",
            )

        trained = train(cfg, checkpoint=ckpt, resume=resume, on_update=on_update)
    seconds = time.perf_counter() - t0

    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.search import plot_training

    out.mkdir(parents=True, exist_ok=True)
    if not ckpt.exists():  # nothing left to train on resume: keep the policy as it was
        from mlsysopt.placement.checkpoint import save_checkpoint

        save_checkpoint(ckpt, trained.policy)
    plot_training(trained.history, out / "training.png", title=f"GiPH training on {SYNTHETIC}")
    result = {
        "command": "placement train",
        "data": SYNTHETIC,
        "config": asdict(cfg),
        "resumed_from_update": first if resume else None,
        "seconds": seconds,
        "history": trained.history,
        "checkpoint": "policy.pt",
        "plot": "training.png",
    }
    write_json_atomic(out / "result.json", result)
    print_training(trained.history, out)


# ---------------------------------------------------------------------------- place
@placement_app.command("place")
def placement_place(
    graph_source: GraphArg,
    out: OutOpt,
    cluster_path: ClusterOpt = None,
    devices: DevicesOpt = None,
    method: Annotated[
        str, typer.Option("--method", help="giph | heft | random | annealing | eft_greedy | giph_from_heft.")
    ] = "giph",
    policy: PolicyOpt = None,
    init: Annotated[
        str | None, typer.Option("--init", help="Start placement for giph/annealing: heft | random (default: random).")
    ] = None,
    budget: BudgetOpt = None,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Place GRAPH on a cluster with one method; write result.json, placement.json, gantt.png, search.png."""
    _check_run_dir(out)
    check_method(method)
    if init not in (None, "heft", "random"):
        raise MlsysoptError(f"unknown --init '{init}' (choose from: heft, random)")
    needs_giph = method in GIPH_METHODS
    if needs_giph:
        require_policy(policy, f"method '{method}'")
    with err_console.status("loading graph and cluster"):
        graph, cluster, how = load_problem(graph_source, num_tasks, seed, input_shape, cluster_path, devices)
    giph = load_giph(policy, f"method '{method}'") if needs_giph else None
    if init is not None and method not in ("giph", "annealing"):
        err_console.print(f"note: --init is ignored by {method}")
    from mlsysopt.placement.base import default_budget

    start = heft_placement(graph, cluster) if init == "heft" else None
    spend = default_budget(graph) if budget is None else budget
    t0 = time.perf_counter()
    with err_console.status(f"placing {graph.num_nodes} tasks with {method} (budget {spend} evaluations)"):
        res = run_method(method, graph, cluster, spend, seed, giph, start)
    seconds = time.perf_counter() - t0

    from mlsysopt.graph.placement import placement_to_dict
    from mlsysopt.graph.simulator import cp_min, simulate, slr_from_bound
    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.gantt import plot_gantt
    from mlsysopt.report.search import plot_search
    from mlsysopt.report.summary import graph_summary

    sched = simulate(graph, cluster, res.placement)
    bound = cp_min(graph, cluster)
    result = {
        "command": "placement place",
        "source": graph_source,
        "seed": seed,
        "budget": spend,
        "init": init,
        "policy": str(policy) if policy else None,
        **res.to_dict(graph, cluster),
        "cp_min": bound,
        "slr": slr_from_bound(sched.makespan, bound),
        "seconds": seconds,
        "graph": graph_summary(graph, name=str(graph.meta.get("name") or graph_source)),
        "cluster_source": how,
        "cluster": cluster.to_dict(),
        "schedule": sched.to_dict(graph, cluster),
    }
    out.mkdir(parents=True, exist_ok=True)
    title = f"{graph_source}: {method}"
    plot_gantt(graph, cluster, sched, out / "gantt.png", title=title)
    plot_search({method: res.history}, out / "search.png", title=f"{title} (budget {spend})")
    write_json_atomic(out / "placement.json", placement_to_dict(graph, cluster, res.placement))
    write_json_atomic(out / "result.json", result)

    from rich.table import Table

    table = Table(title=f"placement ({method})", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("makespan", f"{result['makespan']:.6g}")
    table.add_row("CP_MIN (lower bound)", f"{bound:.6g}")
    table.add_row("SLR", f"{result['slr']:.4f}")
    table.add_row("evaluations", f"{res.evaluations} (best after {res.steps_to_best})")
    table.add_row("devices used", f"{len(set(result['placement'].values()))} / {cluster.num_devices}")
    table.add_row("seconds", f"{seconds:.2f}")
    console.print(table)
    console.print(f"wrote result.json, placement.json, gantt.png, search.png to {escape(str(out))}")


# ---------------------------------------------------------------------------- compare
@placement_app.command("compare")
def placement_compare(
    graph_source: GraphArg,
    out: OutOpt,
    cluster_path: ClusterOpt = None,
    devices: DevicesOpt = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="GiPH checkpoint or 'pretrained'; without it GiPH is skipped.")
    ] = None,
    methods: Annotated[
        str | None, typer.Option("--methods", help="Comma list of methods (default: all, GiPH if --policy).")
    ] = None,
    budget: BudgetOpt = None,
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Seeds per method (--seed, --seed+1, ...).")] = 3,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Run every method with the same simulator budget over several seeds; table, result.json, search.png."""
    _check_run_dir(out)
    names, skipped = parse_methods(methods, policy is not None)
    check_policy_file(policy)
    with err_console.status("loading graph and cluster"):
        graph, cluster, how = load_problem(graph_source, num_tasks, seed, input_shape, cluster_path, devices)
    giph = load_giph(policy, "GiPH") if any(m.startswith("giph") for m in names) else None
    if skipped:
        err_console.print(f"no --policy given: skipping {', '.join(skipped)}")
    from mlsysopt.graph.simulator import cp_min, simulate
    from mlsysopt.placement.base import default_budget

    spend = default_budget(graph) if budget is None else budget
    heft_ms = simulate(graph, cluster, heft_placement(graph, cluster)).makespan
    seed_list = [seed + k for k in range(seeds)]
    summary: dict[str, Any] = {}
    with progress_bar() as progress:
        task = progress.add_task("compare", total=len(names) * len(seed_list))
        for name in names:
            runs, t0 = [], time.perf_counter()
            for s in seed_list:
                progress.update(task, description=f"{name}, seed {s}")
                runs.append(run_method(name, graph, cluster, spend, s, giph))
                progress.advance(task)
            summary[name] = method_summary(runs, heft_ms, time.perf_counter() - t0)
        progress.update(task, description="compare done")

    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.search import plot_search
    from mlsysopt.report.summary import graph_summary

    out.mkdir(parents=True, exist_ok=True)
    curves = {name: r["curve"] for name, r in summary.items()}
    plot_search(curves, out / "search.png", title=f"{graph_source}: mean over {len(seed_list)} seed(s)")
    result = {
        "command": "placement compare",
        "source": graph_source,
        "seeds": seed_list,
        "budget": spend,
        "methods": names,
        "skipped": {m: "no --policy given" for m in skipped},
        "policy": str(policy) if policy else None,
        "heft_makespan": heft_ms,
        "cp_min": cp_min(graph, cluster),
        "results": summary,
        "graph": graph_summary(graph, name=str(graph.meta.get("name") or graph_source)),
        "cluster_source": how,
        "cluster": cluster.to_dict(),
    }
    write_json_atomic(out / "result.json", result)
    print_compare(result, out)


# ---------------------------------------------------------------------------- adapt
@placement_app.command("adapt")
def placement_adapt(
    graph_source: GraphArg,
    out: OutOpt,
    cluster_path: ClusterOpt = None,
    devices: DevicesOpt = None,
    policy: PolicyOpt = None,
    placement_path: Annotated[
        Path | None, typer.Option("--placement", help="Start placement JSON on the old cluster (default: HEFT's).")
    ] = None,
    remove: Annotated[str | None, typer.Option("--remove", help="Devices to remove, e.g. dev3,dev5.")] = None,
    add: Annotated[int, typer.Option("--add", min=0, help="New devices to add (drawn like --devices).")] = 0,
    budget: BudgetOpt = None,
    seed: SeedOpt = 0,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
) -> None:
    """Re-place after devices leave or join: GiPH.adapt vs a HEFT re-run vs keeping the placement."""
    _check_run_dir(out)
    removed = parse_names(remove)
    if not removed and add == 0:
        raise MlsysoptError("nothing changes: give --remove dev3,dev5 and/or --add N")
    require_policy(policy, "placement adapt")
    with err_console.status("loading graph and cluster"):
        graph, old, how = load_problem(graph_source, num_tasks, seed, input_shape, cluster_path, devices)
    if placement_path is not None:
        from mlsysopt.cli.graph import _load_placement

        start = _load_placement(placement_path, graph, old)
    else:
        start = heft_placement(graph, old)
    new, added = changed_cluster(graph, old, removed, add, seed)
    try:
        new.check_feasible(graph)
    except MlsysoptError as exc:
        raise type(exc)(f"after the change: {exc}") from None

    giph = load_giph(policy, "placement adapt")
    from mlsysopt.graph.simulator import cp_min, simulate
    from mlsysopt.placement.base import default_budget
    from mlsysopt.placement.giph import carry_over

    spend = default_budget(graph) if budget is None else budget
    with err_console.status(f"adapting {graph.num_nodes} tasks (budget {spend} evaluations)"):
        kept, orphans = carry_over(graph, old, new, start)
        keep_sched = simulate(graph, new, kept)
        heft = run_method("heft", graph, new, spend, seed)
        adapted = giph.adapt(graph, old, new, start, spend, seed)
    sched = simulate(graph, new, adapted.placement)

    from mlsysopt.graph.placement import placement_to_dict
    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.gantt import plot_gantt

    makespans = {"giph_adapt": adapted.makespan, "heft_rerun": heft.makespan, "keep": keep_sched.makespan}
    result = {
        "command": "placement adapt",
        "source": graph_source,
        "seed": seed,
        "budget": spend,
        "start_placement": str(placement_path) if placement_path else "heft",
        "old_makespan": simulate(graph, old, start).makespan,
        "removed": removed,
        "added": added,
        "orphaned_tasks": [graph.names[int(i)] for i in orphans],
        "makespans": makespans,
        "cp_min": cp_min(graph, new),
        "giph": adapted.to_dict(graph, new),
        "heft": heft.to_dict(graph, new),
        "keep": {"makespan": keep_sched.makespan, "placement": placement_to_dict(graph, new, kept)},
        "old_cluster_source": how,
        "cluster": new.to_dict(),
    }
    out.mkdir(parents=True, exist_ok=True)
    plot_gantt(graph, new, sched, out / "gantt.png", title=f"{graph_source}: GiPH adapted placement")
    write_json_atomic(out / "placement.json", placement_to_dict(graph, new, adapted.placement))
    write_json_atomic(out / "cluster.json", new.to_dict())
    write_json_atomic(out / "result.json", result)
    print_adapt(result, old.num_devices, new.num_devices, out)
