"""``mlsysopt graph ...``: inspect, generate, import and simulate computation graphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.errors import InvalidPlacement, MlsysoptError

if TYPE_CHECKING:
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.ir import CompGraph

from mlsysopt.cli.common import (
    InputShapeOpt,
    NumTasksOpt,
    SeedOpt,
    SourceArg,
    _check_run_dir,
    _check_suffix,
    _fmt,
    _load_source,
    console,
    err_console,
)

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

    graph = _load_source(source, num_tasks, seed, input_shape)
    summary = graph_summary(graph, name=str(graph.meta.get("name") or source))
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    _print_graph(summary)


def _print_graph(s: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"graph {escape(s['name'])}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key, label in (("tasks", "tasks"), ("edges", "edges"), ("depth", "depth (longest path)")):
        table.add_row(label, f"{s[key]:,}")
    table.add_row("total FLOPs", _fmt(s["total_flops"]))
    table.add_row("total compute", _fmt(s["total_compute"]))
    table.add_row("total edge bytes", _fmt(s["total_edge_bytes"]))
    table.add_row("hardware types", ", ".join(f"type {t}: {c}" for t, c in s["hw_types"].items()))
    console.print(table)
    ops = Table(title="op histogram", title_justify="left")
    ops.add_column("op")
    ops.add_column("count", justify="right")
    ops.add_column("share", justify="right")
    items = list(s["ops"].items())
    for op, count in items[:30]:
        ops.add_row(escape(op), f"{count:,}", f"{100 * count / s['tasks']:.1f}%")
    if len(items) > 30:
        ops.add_row(f"... {len(items) - 30} more", "", "")
    console.print(ops)


@graph_app.command("import")
def graph_import(
    source: SourceArg,
    out: Annotated[Path, typer.Option("--out", help="Where to write the CompGraph (.npz).")],
    num_tasks: NumTasksOpt = 100,
    seed: SeedOpt = 0,
    input_shape: InputShapeOpt = None,
) -> None:
    """Import a model or workflow and save it as a CompGraph .npz."""
    _check_suffix(out, ".npz", "--out")
    with err_console.status(f"importing {source}"):
        graph = _load_source(source, num_tasks, seed, input_shape)
    graph.save(out)
    console.print(
        f"wrote {escape(str(out))}: {graph.num_nodes:,} tasks, {graph.num_edges:,} edges, depth {graph.depth}"
    )


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
    _check_suffix(out, ".npz", "--out")
    if cluster_out is not None:
        _check_suffix(cluster_out, ".json", "--cluster-out")
    from mlsysopt.graph.generate import layered_dag, random_cluster

    graph = layered_dag(
        num_tasks=tasks,
        alpha=alpha,
        p=p,
        compute_avg=compute_avg,
        compute_beta=compute_beta,
        bytes_avg=bytes_avg,
        bytes_beta=bytes_beta,
        num_types=types,
        seed=seed,
    )
    cluster = None
    if cluster_out is not None:
        cluster = random_cluster(
            num_devices=devices,
            num_types=types,
            speed_avg=speed_avg,
            speed_beta=speed_beta,
            bandwidth_avg=bandwidth_avg,
            bandwidth_beta=bandwidth_beta,
            delay_avg=delay_avg,
            q=q,
            seed=seed,
        )
    graph.save(out)
    console.print(
        f"wrote {escape(str(out))}: {graph.num_nodes:,} tasks, {graph.num_edges:,} edges, depth {graph.depth}"
    )
    if cluster is not None and cluster_out is not None:
        cluster.save(cluster_out)
        console.print(f"wrote {escape(str(cluster_out))}: {cluster.num_devices} devices, {cluster.num_types} types")


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
    _check_run_dir(out)

    import numpy as np

    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.placement import random_placement
    from mlsysopt.graph.simulator import cp_min, simulate, slr_from_bound

    with err_console.status("loading graph, cluster and placement"):
        graph = _load_source(graph_source)
        cluster = DeviceCluster.load(cluster_path)
        cluster.check_feasible(graph)
        if placement_path is not None:
            placement = _load_placement(placement_path, graph, cluster)
            how = f"from {placement_path}"
        else:
            placement = random_placement(graph, cluster, np.random.default_rng(seed))
            how = f"random feasible placement (seed {seed})"
    if placement_path is None:
        err_console.print(f"no --placement given: using a {how}")
    with err_console.status("simulating"):
        sched = simulate(graph, cluster, placement)
        bound = cp_min(graph, cluster)
    ratio = slr_from_bound(sched.makespan, bound)
    result = _simulate_result(graph, cluster, sched, bound, ratio, how, seed, graph_source)

    from mlsysopt.io import write_json_atomic
    from mlsysopt.report.gantt import plot_gantt

    out.mkdir(parents=True, exist_ok=True)
    with err_console.status("plotting the Gantt chart"):
        plot_gantt(graph, cluster, sched, out / "gantt.png", title=f"{graph_source} ({how})")
    write_json_atomic(out / "result.json", result)
    _print_simulation(result, out)


def _load_placement(path: Path, graph: CompGraph, cluster: DeviceCluster) -> Any:
    from mlsysopt.graph.placement import check_placement, placement_from_dict

    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidPlacement(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidPlacement(f"{path}: not valid JSON ({exc})") from None
    if isinstance(data, list):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in data):
            raise InvalidPlacement(f"{path}: a list placement must hold one integer device id per task")
        try:
            return check_placement(graph, cluster, data)
        except InvalidPlacement as exc:
            raise type(exc)(f"{path}: {exc}") from None
    return placement_from_dict(graph, cluster, data, where=str(path))


def _simulate_result(
    graph: CompGraph,
    cluster: DeviceCluster,
    sched: Any,
    bound: float,
    ratio: float,
    how: str,
    seed: int,
    source: str,
) -> dict[str, Any]:
    from mlsysopt.graph.placement import placement_to_dict
    from mlsysopt.report.summary import cluster_summary, graph_summary

    return {
        "command": "graph simulate",
        "source": source,
        "seed": seed,
        "placement_source": how,
        "makespan": float(sched.makespan),
        "cp_min": float(bound),
        "slr": float(ratio),
        "graph": graph_summary(graph, name=str(graph.meta.get("name") or source)),
        "cluster": cluster_summary(cluster),
        "placement": placement_to_dict(graph, cluster, sched.placement),
        "schedule": sched.to_dict(graph, cluster),
        "gantt": "gantt.png",
    }


def _print_simulation(r: dict[str, Any], out: Path) -> None:
    from rich.table import Table

    table = Table(title="simulation", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("makespan", f"{r['makespan']:.6g}")
    table.add_row("CP_MIN (lower bound)", f"{r['cp_min']:.6g}")
    table.add_row("SLR", f"{r['slr']:.4f}")
    table.add_row("devices used", f"{len(set(r['placement'].values()))} / {r['cluster']['devices']}")
    table.add_row("critical-path tasks", str(len(r["schedule"]["critical_path"])))
    console.print(table)
    console.print(f"wrote {escape(str(out / 'result.json'))} and {escape(str(out / 'gantt.png'))}")
