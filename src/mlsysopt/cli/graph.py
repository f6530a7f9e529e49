"""``mlsysopt graph ...``: inspect, generate, import and simulate computation graphs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import (
    InputShapeOpt,
    NumTasksOpt,
    SeedOpt,
    SourceArg,
    check_suffix,
    console,
    err_console,
    fmt,
    load_source,
)
from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir

graph_app = typer.Typer(
    help="Computation graphs and device clusters: inspect, generate, import, simulate.",
    no_args_is_help=True,
)


# ---------------------------------------------------------------------------- graph info / import
@graph_app.command("info")
def graph_info(
    source: SourceArg,
    num_tasks: NumTasksOpt = 100,
    seed: SeedOpt = 0,
    input_shape: InputShapeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarize a graph: tasks, edges, depth, op histogram, FLOPs, compute, edge bytes, hardware types."""
    from mlsysopt.report.summary import graph_summary

    graph = load_source(source, num_tasks, seed, input_shape)
    summary = graph_summary(graph, name=str(graph.meta.get("name") or source))
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    _print_graph(summary)


def show(
    title: str, rows: Sequence[Sequence[str]], columns: Sequence[str] | None = None, styles: Sequence[Any] = ()
) -> None:
    """Print a table: key/value rows (no ``columns``) or rows under ``columns``; ``styles`` per row."""
    from rich.table import Table

    table = Table(title=title, show_header=columns is not None, title_justify="left")
    for k, col in enumerate(columns or ("", "")):
        table.add_column(col, justify="left" if k == 0 else "right", style="bold" if k == 0 and not columns else None)
    for i, row in enumerate(rows):
        table.add_row(*row, style=styles[i] if i < len(styles) else None)
    console.print(table)


def _print_graph(s: dict[str, Any]) -> None:
    show(
        f"graph {escape(s['name'])}",
        [
            ("tasks", f"{s['tasks']:,}"),
            ("edges", f"{s['edges']:,}"),
            ("depth (longest path)", f"{s['depth']:,}"),
            ("total FLOPs", fmt(s["total_flops"])),
            ("total compute", fmt(s["total_compute"])),
            ("total edge bytes", fmt(s["total_edge_bytes"])),
            ("hardware types", ", ".join(f"type {t}: {c}" for t, c in s["hw_types"].items())),
        ],
    )
    items = list(s["ops"].items())
    ops = [(escape(op), f"{count:,}", f"{100 * count / s['tasks']:.1f}%") for op, count in items[:30]]
    if len(items) > 30:
        ops.append((f"... {len(items) - 30} more", "", ""))
    show("op histogram", ops, columns=("op", "count", "share"))


@graph_app.command("import")
def graph_import(
    source: SourceArg,
    out: Annotated[Path, typer.Option("--out", help="Where to write the CompGraph (.npz).")],
    num_tasks: NumTasksOpt = 100,
    seed: SeedOpt = 0,
    input_shape: InputShapeOpt = None,
) -> None:
    """Import a model or workflow and save it as a CompGraph .npz."""
    check_suffix(out, ".npz", "--out")
    with err_console.status(f"importing {source}"):
        graph = load_source(source, num_tasks, seed, input_shape)
    graph.save(out)
    _wrote(out, graph)


# ---------------------------------------------------------------------------- graph generate
@graph_app.command("generate")
def graph_generate(
    out: Annotated[Path, typer.Option("--out", help="Where to write the layered DAG (.npz).")],
    tasks: Annotated[int, typer.Option("--tasks", min=1, help="Number of tasks.")] = 50,
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, help="Shape: ~sqrt(n)/alpha levels.")] = 0.2,
    p: Annotated[float, typer.Option("--p", min=0.0, max=1.0, help="Edge probability between levels.")] = 0.3,
    compute_avg: Annotated[float, typer.Option("--compute-avg", min=0.0)] = 1.0,
    compute_beta: Annotated[float, typer.Option("--compute-beta", min=0.0, help="Compute heterogeneity.")] = 0.5,
    bytes_avg: Annotated[float, typer.Option("--bytes-avg", min=0.0)] = 1.0,
    bytes_beta: Annotated[float, typer.Option("--bytes-beta", min=0.0, help="Edge-bytes heterogeneity.")] = 0.5,
    types: Annotated[int, typer.Option("--types", min=1, help="Number of hardware types.")] = 5,
    seed: SeedOpt = 0,
    cluster_out: Annotated[
        Path | None, typer.Option("--cluster-out", help="Also write a random cluster here (.json).")
    ] = None,
    devices: Annotated[int, typer.Option("--devices", min=1, help="Devices of the cluster.")] = 20,
    q: Annotated[float, typer.Option("--q", min=0.0, max=1.0, help="P(device supports a type).")] = 0.5,
    speed_avg: Annotated[float, typer.Option("--speed-avg", min=0.0)] = 1.0,
    speed_beta: Annotated[float, typer.Option("--speed-beta", min=0.0)] = 0.5,
    bandwidth_avg: Annotated[float, typer.Option("--bandwidth-avg", min=0.0)] = 1.0,
    bandwidth_beta: Annotated[float, typer.Option("--bandwidth-beta", min=0.0)] = 0.5,
    delay_avg: Annotated[float, typer.Option("--delay-avg", min=0.0)] = 0.1,
) -> None:
    """Generate a random layered DAG (and optionally a random heterogeneous cluster for it)."""
    check_suffix(out, ".npz", "--out")
    if cluster_out is not None:
        check_suffix(cluster_out, ".json", "--cluster-out")
    from mlsysopt.graph.generate import layered_dag, random_cluster

    dag = {"alpha": alpha, "p": p, "compute_avg": compute_avg, "compute_beta": compute_beta, "bytes_avg": bytes_avg}
    graph = layered_dag(tasks, bytes_beta=bytes_beta, num_types=types, seed=seed, **dag)
    links = {"bandwidth_avg": bandwidth_avg, "bandwidth_beta": bandwidth_beta, "delay_avg": delay_avg, "q": q}
    devs = {"num_types": types, "speed_avg": speed_avg, "speed_beta": speed_beta, "seed": seed}
    cluster = None if cluster_out is None else random_cluster(devices, **devs, **links)
    graph.save(out)
    _wrote(out, graph)
    if cluster is not None and cluster_out is not None:
        cluster.save(cluster_out)
        console.print(f"wrote {escape(str(cluster_out))}: {cluster.num_devices} devices, {cluster.num_types} types")


def _wrote(out: Path, graph: Any) -> None:
    console.print(
        f"wrote {escape(str(out))}: {graph.num_nodes:,} tasks, {graph.num_edges:,} edges, depth {graph.depth}"
    )


# ---------------------------------------------------------------------------- graph simulate
@graph_app.command("simulate")
def graph_simulate(
    graph_source: Annotated[str, typer.Argument(metavar="GRAPH", help="A graph (anything 'graph info' reads).")],
    out: Annotated[Path, typer.Option("--out", help="Run directory for result.json and gantt.png.")],
    cluster_path: Annotated[Path | None, typer.Option("--cluster", help="Device cluster JSON.")] = None,
    placement_path: Annotated[
        Path | None, typer.Option("--placement", help="Placement JSON: {task: device}, or a result.json.")
    ] = None,
    random: Annotated[bool, typer.Option("--random", help="Use a seeded random feasible placement.")] = False,
    seed: SeedOpt = 0,
) -> None:
    """Simulate a placement of GRAPH on a cluster: makespan, CP_MIN, SLR, critical path and a Gantt chart."""
    if cluster_path is None:
        raise MlsysoptError(
            "graph simulate needs --cluster C.json "
            "(make one with 'mlsysopt graph generate --out G.npz --cluster-out C.json')"
        )
    if placement_path is not None and random:
        raise MlsysoptError("give either --placement P.json or --random, not both")
    settings = {"command": "graph simulate", "source": graph_source, "cluster": cluster_path, "seed": seed}
    run = RunDir(out, {**settings, "placement": placement_path}, checkpoint=None).check()
    import numpy as np

    from mlsysopt.graph.placement import load_placement
    from mlsysopt.graph.problem import load_problem
    from mlsysopt.report.gantt import plot_gantt
    from mlsysopt.report.summary import cluster_summary, graph_summary

    with err_console.status("loading graph, cluster and placement"):
        graph = load_source(graph_source)
        problem, _ = load_problem(graph, cluster_path)
        if placement_path is not None:
            placement, how = load_placement(placement_path, graph, problem.cluster), f"from {placement_path}"
        else:
            placement = problem.random_placement(np.random.default_rng(seed))
            how = f"random feasible placement (seed {seed})"
            err_console.print(f"no --placement given: using a {how}")
    with err_console.status("simulating"):
        sched = problem.simulate(placement)
    result = {
        **settings,
        "cluster": cluster_summary(problem.cluster),
        "placement_source": how,
        **problem.describe(sched),
        "graph": graph_summary(graph, name=str(graph.meta.get("name") or graph_source)),
        "gantt": "gantt.png",
    }
    with run, err_console.status("plotting the Gantt chart"):
        plot_gantt(graph, problem.cluster, sched, run.file("gantt.png"), title=f"{graph_source} ({how})")
        run.write_json("result.json", result)
    rows = [
        ("makespan", f"{sched.makespan:.6g}"),
        ("CP_MIN (lower bound)", f"{problem.cp_min:.6g}"),
        ("SLR", f"{result['slr']:.4f}"),
        ("devices used", f"{len(set(placement.tolist()))} / {problem.num_devices}"),
        ("critical-path tasks", str(len(sched.critical_path))),
    ]
    show("simulation", rows)
    console.print(f"wrote {escape(str(out / 'result.json'))} and {escape(str(out / 'gantt.png'))}")
