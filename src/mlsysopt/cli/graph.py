"""``mlsysopt graph ...``: inspect, generate, import and simulate computation graphs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from mlsysopt.cli.common import (
    InputShapeOpt,
    NumTasksOpt,
    SeedOpt,
    SourceArg,
    check_suffix,
    console,
    err_console,
    fmt,
    safe_text,
    warn,
)
from mlsysopt.costmodel.oracle.op_costs import (
    check_op_costs,  # LightGBM: only when asked
    with_op_costs,  # torch and LightGBM: only when asked
)
from mlsysopt.errors import InvalidPlacement, MlsysoptError
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.importers.source import load_source
from mlsysopt.graph.limits import check_devices, check_tasks
from mlsysopt.graph.list_schedule import check_execution
from mlsysopt.graph.placement import is_schedule, load_placement, schedule_from_dict
from mlsysopt.graph.problem import PlacementProblem, load_problem
from mlsysopt.graph.units import describe_units, implausible, mismatch, units_of
from mlsysopt.io import RunDir, dumps, read_json
from mlsysopt.report.summary import cluster_summary, graph_summary
from mlsysopt.store.run import RunStore

graph_app = typer.Typer(
    help="Computation graphs and device clusters: inspect, generate, import, simulate.",
    no_args_is_help=True,
)

ClusterSpecOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Device cluster: a JSON file, or preset:NAME (edge, gpu-node-nvlink, gpu-node-pcie, cpu-socket).",
    ),
]
DevicesSpecOpt = Annotated[
    int | None,
    typer.Option("--devices", min=1, help="Or a seeded random cluster of N devices in the graph's units."),
]


# ---------------------------------------------------------------------------- graph info / import
@graph_app.command("info")
def graph_info(
    source: SourceArg,
    num_tasks: NumTasksOpt = 100,
    seed: SeedOpt = 0,
    input_shape: InputShapeOpt = None,
    as_json: Annotated[bool, typer.Option("--json/--no-json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarize a graph: tasks, edges, depth, op histogram, FLOPs, compute, edge bytes, hardware types."""
    graph = load_source(source, num_tasks, seed, input_shape)
    summary = info_summary(graph, source)
    if as_json:
        print(dumps(summary))  # strict JSON: never NaN or Infinity; control characters escaped
        return
    _print_graph(summary)


def info_summary(graph: Any, source: str) -> dict[str, Any]:
    """What ``graph info`` shows: the graph summary, its unit system and the ops without a FLOP formula."""
    summary = graph_summary(graph, name=str(graph.meta.get("name") or source))
    summary["units"] = describe_units(units_of(graph))
    summary["unknown_ops"] = dict(graph.meta.get("unknown_ops") or {})
    for key in ("tasks_without_runtime", "schema_version"):
        if key in graph.meta:
            summary[key] = graph.meta[key]
    return summary


def show(
    title: str, rows: Sequence[Sequence[str]], columns: Sequence[str] | None = None, styles: Sequence[Any] = ()
) -> None:
    """Print a table: key/value rows (no ``columns``) or rows under ``columns``; ``styles`` per row.

    Every cell is printed literally (markup escaped, control characters made visible): cells hold names read
    from files.
    """
    table = Table(title=escape(safe_text(title)), show_header=columns is not None, title_justify="left")
    for k, col in enumerate(columns or ("", "")):
        table.add_column(col, justify="left" if k == 0 else "right", style="bold" if k == 0 and not columns else None)
    for i, row in enumerate(rows):
        table.add_row(*(escape(safe_text(c)) for c in row), style=styles[i] if i < len(styles) else None)
    console.print(table)


def _print_graph(s: dict[str, Any]) -> None:
    u = s["units"]
    show(
        f"graph {s['name']} ({u['system']} units)",
        [
            ("tasks", f"{s['tasks']:,}"),
            ("edges", f"{s['edges']:,}"),
            ("depth (longest path)", f"{s['depth']:,}"),
            ("total FLOPs (FLOP)", fmt(s["total_flops"])),
            (f"total compute ({u['compute']})", fmt(s["total_compute"])),
            (f"total edge data ({u['bytes']})", fmt(s["total_edge_bytes"])),
            ("hardware types", ", ".join(f"type {t}: {c}" for t, c in s["hw_types"].items())),
        ],
    )
    items = list(s["ops"].items())
    ops = [(op, f"{count:,}", f"{100 * count / s['tasks']:.1f}%") for op, count in items[:30]]
    if len(items) > 30:
        ops.append((f"... {len(items) - 30} more", "", ""))
    show("op histogram", ops, columns=("op", "count", "share (%)"))
    if s["unknown_ops"]:
        listed = ", ".join(f"{op} x{n}" for op, n in s["unknown_ops"].items())
        console.print(f"ops without a FLOP formula (counted as 0 FLOPs): {escape(safe_text(listed))}")


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
    with err_console.status(f"importing {escape(source)}"):
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
    compute_avg: Annotated[float, typer.Option("--compute-avg", min=0.0, help="Mean compute (work units).")] = 1.0,
    compute_beta: Annotated[float, typer.Option("--compute-beta", min=0.0, help="Compute heterogeneity.")] = 0.5,
    bytes_avg: Annotated[float, typer.Option("--bytes-avg", min=0.0, help="Mean edge data (data units).")] = 1.0,
    bytes_beta: Annotated[float, typer.Option("--bytes-beta", min=0.0, help="Edge-data heterogeneity.")] = 0.5,
    types: Annotated[int, typer.Option("--types", min=1, help="Number of hardware types.")] = 5,
    seed: SeedOpt = 0,
    cluster_out: Annotated[
        Path | None, typer.Option("--cluster-out", help="Also write a random cluster here (.json).")
    ] = None,
    devices: Annotated[int, typer.Option("--devices", min=1, help="Devices of the cluster.")] = 20,
    q: Annotated[float, typer.Option("--q", min=0.0, max=1.0, help="P(device supports a type).")] = 0.5,
    speed_avg: Annotated[float, typer.Option("--speed-avg", min=0.0, help="Mean speed (work units/time unit).")] = 1.0,
    speed_beta: Annotated[float, typer.Option("--speed-beta", min=0.0, help="Speed heterogeneity.")] = 0.5,
    bandwidth_avg: Annotated[
        float, typer.Option("--bandwidth-avg", min=0.0, help="Mean bandwidth (data units/time unit).")
    ] = 1.0,
    bandwidth_beta: Annotated[float, typer.Option("--bandwidth-beta", min=0.0, help="Bandwidth heterogeneity.")] = 0.5,
    delay_avg: Annotated[float, typer.Option("--delay-avg", min=0.0, help="Mean link delay (time units).")] = 0.1,
) -> None:
    """Generate a random layered DAG (and optionally a random heterogeneous cluster for it), in synthetic units.

    Synthetic units are GiPH's: compute in work units, data in data units, a device of speed 1 does one work unit
    per time unit. The cluster file records them; for a PyTorch, ONNX or WfCommons graph use 'graph simulate
    --devices N' or '--cluster preset:NAME' instead, which build the cluster in that graph's units.
    """
    check_suffix(out, ".npz", "--out")
    check_tasks(tasks, p, "--tasks")
    check_devices(devices, tasks, "--devices")
    if cluster_out is not None:
        check_suffix(cluster_out, ".json", "--cluster-out")

    dag = {"alpha": alpha, "p": p, "compute_avg": compute_avg, "compute_beta": compute_beta, "bytes_avg": bytes_avg}
    graph = layered_dag(tasks, bytes_beta=bytes_beta, num_types=types, seed=seed, **dag)
    links = {"bandwidth_avg": bandwidth_avg, "bandwidth_beta": bandwidth_beta, "delay_avg": delay_avg, "q": q}
    devs = {"num_types": types, "speed_avg": speed_avg, "speed_beta": speed_beta, "seed": seed}
    cluster = None if cluster_out is None else random_cluster(devices, **devs, **links)
    graph.save(out)
    _wrote(out, graph)
    if cluster is not None and cluster_out is not None:
        cluster.save(cluster_out)
        console.print(
            f"wrote {escape(str(cluster_out))}: {cluster.num_devices} devices, {cluster.num_types} types "
            "(synthetic units)"
        )


def _wrote(out: Path, graph: Any) -> None:
    console.print(
        f"wrote {escape(str(out))}: {graph.num_nodes:,} tasks, {graph.num_edges:,} edges, depth {graph.depth}"
    )


# ---------------------------------------------------------------------------- graph simulate
@graph_app.command("simulate")
def graph_simulate(
    graph_source: Annotated[str, typer.Argument(metavar="GRAPH", help="A graph (anything 'graph info' reads).")],
    out: Annotated[Path, typer.Option("--out", help="Run folder for result.json, cluster.json and gantt.png.")],
    cluster_spec: ClusterSpecOpt = None,
    devices: DevicesSpecOpt = None,
    placement_path: Annotated[
        Path | None,
        typer.Option(
            "--placement",
            help="Placement JSON: {task: device}, a result.json, or a schedule.json (then its devices' orders run).",
        ),
    ] = None,
    random: Annotated[
        bool, typer.Option("--random/--no-random", help="Use a seeded random feasible placement.")
    ] = False,
    num_tasks: NumTasksOpt = 100,
    input_shape: InputShapeOpt = None,
    seed: SeedOpt = 0,
    execution: Annotated[
        str,
        typer.Option(
            "--execution",
            help="fifo: each device runs ready tasks in arrival order | ordered: each device runs its tasks in "
            "HEFT's order for this map (upward rank, insertion).",
        ),
    ] = "fifo",
    op_costs: Annotated[
        str | None,
        typer.Option(
            "--op-costs",
            help="builtin or an oracle folder: the CPU device's per-op times from the latency "
            "oracle instead of FLOPs / speed (an .onnx GRAPH); or an op profile FILE.json from 'placement "
            "calibrate' (a PyTorch or ONNX GRAPH).",
        ),
    ] = None,
    op_costs_device: Annotated[
        str | None, typer.Option("--op-costs-device", help="The CPU device --op-costs is for (default: named cpu*).")
    ] = None,
) -> None:
    """Simulate a placement of GRAPH on a cluster: makespan, CP_MIN, SLR, critical path and a Gantt chart."""
    check_execution(execution)
    if cluster_spec is None and devices is None:
        raise MlsysoptError(
            "graph simulate needs --cluster C.json, --cluster preset:NAME or --devices N "
            "(a random cluster in the graph's units)"
        )
    if cluster_spec is not None and devices is not None:
        raise MlsysoptError("give either --cluster or --devices, not both")
    if placement_path is not None and random:
        raise MlsysoptError("give either --placement P.json or --random, not both")
    settings = {"command": "graph simulate", "source": graph_source, "cluster": cluster_spec, "seed": seed}
    settings.update(devices=devices, num_tasks=num_tasks, input_shape=input_shape, execution=execution)
    if op_costs is not None or op_costs_device is not None:
        check_op_costs(op_costs, op_costs_device)
        settings.update(op_costs=op_costs, op_costs_device=op_costs_device)
    run = RunDir(out, {**settings, "placement": placement_path}, checkpoint=None, sink=RunStore).check()
    result, problem, sched, placement = _simulate(graph_source, {**settings, "random": random}, placement_path, seed)
    # deferred: mlsysopt.report.gantt imports matplotlib
    from mlsysopt.report.gantt import plot_gantt

    with run, err_console.status("plotting the Gantt chart"):
        run.write_json("cluster.json", problem.cluster.to_dict())
        title = f"{graph_source} ({result['placement_source']})"
        plot_gantt(problem.graph, problem.cluster, sched, run.file("gantt.png"), title=title, units=result["units"])
        run.write_json("result.json", result)
    t = result["units"]["time"]
    rows = [
        (f"makespan ({t})", f"{sched.makespan:.6g}"),
        (f"CP_MIN, lower bound ({t})", f"{problem.cp_min:.6g}"),
        ("SLR (makespan / CP_MIN)", f"{result['slr']:.4f}"),
        ("devices used", f"{len(set(placement.tolist()))} / {problem.num_devices}"),
        ("critical-path tasks", str(len(sched.critical_path))),
    ]
    show("simulation", rows)

    for line in result["warnings"]:
        if line != mismatch(problem.graph, problem.cluster):  # that one was said when the cluster was loaded
            warn(line)
    files = ", ".join(escape(str(out / f)) for f in ("result.json", "cluster.json", "gantt.png"))
    console.print(f"wrote {files}")


def _simulate(graph_source: str, settings: dict[str, Any], placement_path: Path | None, seed: int) -> Any:
    """Load graph, cluster and placement, simulate; (result.json, problem, schedule, placement)."""
    with err_console.status("loading graph, cluster and placement"):
        graph = load_source(graph_source, settings["num_tasks"], seed, settings["input_shape"])
        problem, cluster_how = load_problem(
            graph, settings["cluster"], settings["devices"], seed, settings.get("execution", "fifo")
        )
        op_costs = None
        if settings.get("op_costs"):
            graph, cluster, op_costs = with_op_costs(graph, problem.cluster, settings["op_costs"],
                                                     settings["op_costs_device"])  # fmt: skip
            problem = PlacementProblem(graph, cluster, problem.execution)
        order = None
        if placement_path is not None and is_schedule(read_json(placement_path, InvalidPlacement, expect=None)):
            data = read_json(placement_path, InvalidPlacement, expect=None)
            placement, order = schedule_from_dict(graph, problem.cluster, data, where=str(placement_path))
            how = f"the schedule in {placement_path} (its devices' orders, ordered execution)"
        elif placement_path is not None:
            placement, how = load_placement(placement_path, graph, problem.cluster), f"from {placement_path}"
        else:
            placement = problem.random_placement(np.random.default_rng(seed))
            how = f"random feasible placement (seed {seed})"
            if not settings.get("random"):
                err_console.print(f"no --placement given: using a {how}")
    with err_console.status("simulating"):
        sched = problem.simulate(placement, order)
    if not np.isfinite(sched.makespan):
        raise MlsysoptError(f"the simulated makespan is {sched.makespan}: the graph's times overflow on this cluster")
    result = {
        **settings,
        "units": describe_units(units_of(graph)),
        "cluster": cluster_summary(problem.cluster),
        "cluster_source": cluster_how,
        "cluster_file": "cluster.json",
        "placement_source": how,
        **problem.describe(sched),
        "graph": info_summary(graph, graph_source),
        "gantt": "gantt.png",
        **({"op_costs": op_costs} if op_costs else {}),
    }
    result["warnings"] = implausible(graph, problem.cluster, sched.makespan, problem.cp_min)
    return result, problem, sched, placement
