"""Helpers of ``mlsysopt placement ...``: shared options, loading the problem and the policy, printing results."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from mlsysopt.cli.common import console, err_console, load_source
from mlsysopt.cli.graph import show
from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir

if TYPE_CHECKING:
    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement.giph import GiPH

GraphArg = Annotated[str, typer.Argument(metavar="GRAPH", help="A graph: .npz .onnx .json, recipe, mod:factory.")]
ClusterOpt = Annotated[Path | None, typer.Option("--cluster", help="Device cluster JSON (or use --devices).")]
DevicesOpt = Annotated[int | None, typer.Option("--devices", min=1, help="Or a random cluster of N devices.")]
PolicyOpt = Annotated[Path | None, typer.Option("--policy", help="GiPH checkpoint (placement train) or 'pretrained'.")]
BudgetOpt = Annotated[int | None, typer.Option("--budget", min=1, help="Simulations per search (default 2 x tasks).")]
OutOpt = Annotated[Path, typer.Option("--out", help="Run directory for result.json and the plots.")]


def one_shot_run(command: str, options: dict[str, Any]) -> RunDir:
    """The checked (not yet created) run folder of ``command``; its settings are every option but ``--out``."""
    settings = {"command": command, **{k: v for k, v in options.items() if k != "out"}}
    return RunDir(options["out"], settings, checkpoint=None).check()


def load_problem(options: dict[str, Any]) -> tuple[PlacementProblem, dict[str, Any]]:
    """The command's graph on its cluster (file or random), validated once; and what result.json says about them."""
    from mlsysopt.graph.problem import load_problem as problem_of
    from mlsysopt.report.summary import graph_summary

    o = options
    with err_console.status("loading graph and cluster"):
        graph = load_source(o["graph_source"], o["num_tasks"], o["seed"], o["input_shape"])
        problem, how = problem_of(graph, o["cluster_path"], o["devices"], o["seed"])
    about = {"graph": graph_summary(graph, name=str(graph.meta.get("name") or o["graph_source"]))}
    return problem, {**about, "cluster_source": how, "cluster": problem.cluster.to_dict()}


def check_policy(policy: Path | None, why: str | None) -> None:
    """Fail fast (before torch is imported): no --policy although ``why`` needs one, or no such file."""
    if policy is None and why is not None:
        raise MlsysoptError(
            f"{why} needs --policy policy.pt (train one with 'mlsysopt placement train --out RUN') "
            "or --policy pretrained (the policy shipped with mlsysopt)"
        )
    if policy is not None and str(policy) != "pretrained" and not policy.is_file():
        raise MlsysoptError(f"--policy {policy}: no such checkpoint file")


def load_giph(policy: Path | None) -> GiPH:
    """The GiPH placer of ``--policy`` (a checkpoint or 'pretrained'); a clear error when it is unusable."""
    from mlsysopt.placement.giph import GiPH

    if policy is None:
        raise MlsysoptError("GiPH needs --policy policy.pt or --policy pretrained")
    return GiPH.load(policy)  # GiPH's search runs with one torch thread itself


def parse_names(text: str | None) -> list[str]:
    """Names from a comma list."""
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def print_training(history: list[dict[str, float]], data: str, out: Path) -> None:
    """The training summary table and the files written."""
    rows = [("data", data), ("updates", str(len(history)))]
    if history:
        k = max(1, min(5, len(history) // 2))
        first = sum(h["improvement"] for h in history[:k]) / k
        last = sum(h["improvement"] for h in history[-k:]) / k
        rows += [(f"improvement, first {k} updates", f"{first:.1%}"), (f"improvement, last {k} updates", f"{last:.1%}")]
        rows.append(("entropy, last update", f"{history[-1]['entropy']:.3f}"))
    show("training", rows)
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in ('policy.pt', 'result.json', 'training.png'))}")


def print_place(result: dict[str, Any], num_devices: int, out: Path) -> None:
    """The placement table of ``placement place``."""
    rows = [
        ("makespan", f"{result['makespan']:.6g}"),
        ("CP_MIN (lower bound)", f"{result['cp_min']:.6g}"),
        ("SLR", f"{result['slr']:.4f}"),
        ("evaluations", f"{result['evaluations']} (best after {result['steps_to_best']})"),
        ("devices used", f"{len(set(result['placement'].values()))} / {num_devices}"),
        ("seconds", f"{result['seconds']:.2f}"),
    ]
    show(f"placement ({result['method']})", rows)
    console.print(f"wrote result.json, placement.json, gantt.png, search.png to {escape(str(out))}")


def print_compare(result: dict[str, Any], out: Path) -> None:
    """The per-method table of ``placement compare``; the best mean makespan in green."""
    title = f"{len(result['seeds'])} seed(s), budget {result['budget']} evaluations, CP_MIN {result['cp_min']:.4g}"
    best = min(r["mean_makespan"] for r in result["results"].values())
    rows = []
    for name, r in result["results"].items():
        mean, low, ratio = f"{r['mean_makespan']:.5g}", f"{r['min_makespan']:.5g}", f"{r['mean_ratio_to_heft']:.3f}"
        rows.append((name, mean, low, ratio, f"{r['mean_steps_to_best']:.1f}", f"{r['seconds']:.2f}"))
    styles = ["bold green" if r["mean_makespan"] == best else None for r in result["results"].values()]
    columns = ("method", "mean makespan", "min makespan", "x HEFT", "steps to best", "seconds")
    show(title, rows, columns, styles)
    for name, why in result["skipped"].items():
        console.print(f"skipped {name}: {why}")
    console.print(f"wrote result.json and search.png to {escape(str(out))}")


def print_adapt(result: dict[str, Any], before: int, after: int, out: Path) -> None:
    """GiPH adapt vs HEFT re-run vs keep, after the change; the best in green."""
    change = ", ".join(f"{what} {', '.join(result[what])}" for what in ("removed", "added") if result[what])
    labels = {"giph_adapt": "GiPH adapt", "heft_rerun": "HEFT re-run", "keep": "keep (carry over, no search)"}
    best = min(result["makespans"].values())
    rows = [(labels[k], f"{ms:.5g}") for k, ms in result["makespans"].items()]
    styles = ["bold green" if ms == best else None for ms in result["makespans"].values()]
    rows.append(("before the change", f"{result['old_makespan']:.5g}"))
    show(f"{before} -> {after} devices ({change})", rows, ("placement", "makespan"), [*styles, "dim"])
    console.print(f"{len(result['orphaned_tasks'])} task(s) lost their device")
    console.print(f"wrote result.json, placement.json, cluster.json, gantt.png to {escape(str(out))}")
