"""``mlsysopt nas ...``: search architectures under resource constraints, export the best one, list the spaces."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlsysopt.cli.common import (
    AddressOpt,
    BackendOpt,
    OutOpt,
    SeedOpt,
    TimeoutOpt,
    WorkersOpt,
    console,
    err_console,
    fmt,
    progress_bar,
)
from mlsysopt.errors import InvalidOption
from mlsysopt.nas.catalog import space_catalog
from mlsysopt.nas.defaults import resolve_method, rule_text
from mlsysopt.nas.experiment import SearchOptions, prepare_search
from mlsysopt.nas.export import prepare_export
from mlsysopt.nas.registry import check_method, parse_method_knobs
from mlsysopt.nas.warm_start import warm_start_search
from mlsysopt.report.labels import NAS_CELL, gnn_ops_text
from mlsysopt.runtime import check_parallel

nas_app = typer.Typer(
    help="EPNAS: progressive architecture search with a performance predictor under resource constraints.",
    no_args_is_help=True,
)

SPACE_HELP = (
    "nasbench-graph:<dataset> (table look-ups), digits (real training), cifar10:/folder (ImageFolder), or your own "
    "FILE.py:space (an mlsysopt.nas.Space, with --objective)."
)
METHOD_HELP = (
    "auto (default: the method that did best on validation problems for your --budget's class; see below) | "
    "epnas (with transfer) | epnas_cold | local_search | bananas | bananas_prior (BANANAS starting from the transfer "
    "prior's picks) | evolution | tpe | random | reinforce | pnas | "
    "zero_shot."
)
MAX_OPTION_CHARS = 2000  # an --ops or --knob string longer than this is refused unread


def _integer(flag: str) -> Any:
    """A typer parser for an integer option: ``1.5``, ``true`` or ``1e3`` are one clear error naming ``flag``."""

    def parse(value: str) -> int:
        text = str(value).strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not digits.isdigit() or len(digits) > 30:
            raise InvalidOption(f"{flag} '{text[:40]}' is not an integer")
        return int(text)

    return parse


def _int_opt(flag: str, text: str) -> Any:
    return typer.Option(flag, help=text, parser=_integer(flag), metavar="INTEGER")


def _opt(flag: str, text: str) -> Any:
    return typer.Option(flag, help=text)


def parse_ops(value: str | None) -> list[str] | None:
    """``"conv3x3,identity"`` -> ``["conv3x3", "identity"]``; None stays None."""
    if value is None:
        return None
    if len(value) > MAX_OPTION_CHARS:
        raise InvalidOption(f"--ops is {len(value):,} characters long (at most {MAX_OPTION_CHARS:,})")
    ops = [o.strip() for o in value.split(",") if o.strip()]
    if not ops:
        raise InvalidOption(f"--ops '{value}' names no op")
    return ops


# ---------------------------------------------------------------------------- search
@nas_app.command("search")
def nas_search(
    out: OutOpt,
    space: Annotated[str, _opt("--space", SPACE_HELP)] = "nasbench-graph:cora",
    method: Annotated[
        str,
        _opt("--method", METHOD_HELP),
    ] = "auto",
    objective: Annotated[
        str | None, _opt("--objective", "Your training function FILE.py:train for --space FILE.py:space.")
    ] = None,
    direction: Annotated[
        str, _opt("--direction", "maximize | minimize what --objective returns (a loss: minimize).")
    ] = "maximize",
    budget: Annotated[int, _int_opt("--budget", "Architectures to evaluate (bounded by memory; see README).")] = 100,
    timeout: TimeoutOpt = None,
    max_latency_ms: Annotated[float | None, _opt("--max-latency-ms", "Latency limit (ms; default: none).")] = None,
    max_params: Annotated[float | None, _opt("--max-params", "Parameter-count limit (default: none).")] = None,
    max_flops: Annotated[float | None, _opt("--max-flops", "FLOPs limit, CNN spaces (default: none).")] = None,
    min_intensity: Annotated[
        float | None, _opt("--min-intensity", "Least compute intensity, FLOPs/byte, CNN spaces (default: none).")
    ] = None,
    limit: Annotated[
        list[str] | None,
        _opt("--limit", "A constraint NAME=VALUE on any resource your space reports, repeatable: max_memory_mb=512."),
    ] = None,
    constraint_mode: Annotated[
        str, _opt("--constraint-mode", "hard (never return an infeasible arch) | soft (MnasNet reward).")
    ] = "hard",
    workers: WorkersOpt = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    epochs: Annotated[
        int | None, _int_opt("--epochs", "Training epochs per candidate, CNN spaces (default 8).")
    ] = None,
    ops: Annotated[str | None, _opt("--ops", "Comma-separated ops of the CNN space (default: all six).")] = None,
    max_blocks: Annotated[int | None, _int_opt("--max-blocks", "Most blocks, CNN spaces (default 4).")] = None,
    lr: Annotated[float | None, _opt("--lr", "Adam learning rate, CNN spaces (default 0.01).")] = None,
    knob: Annotated[
        list[str] | None, _opt("--knob", "A method knob NAME=VALUE, repeatable, e.g. --knob round_size=4 (see README).")
    ] = None,
    latency_model: Annotated[
        Path | None,
        _opt(
            "--latency-model",
            "builtin (the shipped latency oracle), an oracle folder or a logmse "
            "cost-model run predicting latency_ms (CNN spaces).",
        ),
    ] = None,
    seed: SeedOpt = 0,
    resume: Annotated[bool, _opt("--resume/--no-resume", "Continue RUN_DIR/checkpoint.pt after a stop.")] = False,
    warm_start: Annotated[
        str | None, _opt("--warm-start", "STUDY or auto: pretrain the predictor on earlier runs' evaluations.")
    ] = None,
    count_failed: Annotated[
        bool,
        _opt(
            "--count-failed/--no-count-failed",
            "Failed trials use up --budget too (default: only successful "
            "ones do; the search stops once as many trials failed as --budget).",
        ),
    ] = False,
    metric: Annotated[
        str | None,
        _opt("--metric", "The objective's name in the study store (default: your --objective's function name)."),
    ] = None,
) -> None:
    """Search the space for the best architecture that meets every resource constraint.

    Writes RUN_DIR/result.json (every evaluation with its resources and constraint values, the best feasible
    architecture), checkpoint.pt (after every batch, with the best model's weights; --resume continues it, also
    with a larger --budget or after --timeout), settings.json, pareto.png and best_so_far.png.
    `mlsysopt nas export RUN_DIR` writes the best architecture out.

    --method auto (the default) runs the method with the lowest validation regret on the tuning problems
    (NAS-Bench-Graph physics, arxiv, proteins) for the class of --budget, confirmed on the held-out datasets
    (BENCHMARKS.md, docs/guides/nas.md): {rule}.

    A NAS-Bench-Graph cell prints as link [0, 1, 1, 2] ops gcn/gat/skip/fc: node i (1-4) reads the node the i-th
    entry of link names (0 = the cell's input) and applies the i-th op. Ops: gcn graph convolution, gat graph
    attention, sage GraphSAGE, gin graph isomorphism network, cheb Chebyshev convolution, arma ARMA convolution,
    graph k-GNN GraphConv, fc a linear layer, skip identity (`mlsysopt nas spaces` lists them).
    """
    chosen = resolve_method(method, budget, space) if isinstance(budget, int) and budget >= 1 else method
    if chosen != "auto":  # (a bad --budget is refused by SearchOptions, with its own message)
        check_method(chosen)
    knobs = knob or []
    if sum(len(k) for k in knobs) > MAX_OPTION_CHARS:
        raise InvalidOption(f"--knob values are longer than {MAX_OPTION_CHARS:,} characters in all")
    limits = {"max_latency_ms": max_latency_ms, "max_params": max_params, "max_flops": max_flops}
    limits["min_intensity"] = min_intensity
    limits |= parse_limits(limit or [], limits)
    cnn = {"epochs": epochs, "ops": parse_ops(ops), "max_blocks": max_blocks, "lr": lr}
    options = SearchOptions(space=space, method=method, budget=budget, limits=limits, mode=constraint_mode,
                            workers=workers, backend=backend, address=address, space_options=cnn, seed=seed,
                            knobs=parse_method_knobs(chosen, knobs) if knobs else {}, timeout=timeout,
                            objective=objective, direction=direction, count_failed=count_failed, metric=metric,
                            latency_model=None if latency_model is None else str(latency_model))  # fmt: skip
    with err_console.status(f"loading the space {escape(space)}"):
        job = prepare_search(out, options, resume)  # every input checked; nothing written yet

    if note := warm_start_search(job, warm_start):  # earlier runs from the study store; nothing written yet
        err_console.print(note)
    job.searcher.check_ready()  # a transfer method with no prior, not even from --warm-start: refused, nothing written
    check_parallel(workers, backend, address)  # after the limits, so a refused --workers gets no warning first
    with job.executor() as executor:  # an unreachable Ray head fails here, before any file
        cons = job.constraints
        how = " (--method auto: the default for this budget)" if job.options.auto else ""
        err_console.print(f"{job.options.method}{how} on {job.space.name}: budget {budget}, "
                          f"constraints {escape(cons.describe())}")  # fmt: skip
        best = [math.nan]
        with progress_bar() as progress:
            task = progress.add_task("searching", total=budget, completed=job.resumed_from)

            def on_eval(ev: Any, n: int) -> None:
                if ev.ok and math.isfinite(ev.perf) and (not cons.hard or cons.feasible(ev.resources)):
                    best[0] = ev.perf if math.isnan(best[0]) else max(best[0], ev.perf)
                label = "searching" if math.isnan(best[0]) else f"best {best[0]:.4g}"
                progress.update(task, completed=n, description=label)

            done = job.run(executor, on_eval=on_eval)
    _print_result(done, job, out)


nas_search.__doc__ = (nas_search.__doc__ or "").replace("{rule}", rule_text())


def parse_limits(items: list[str], given: dict[str, float | None]) -> dict[str, float]:
    """``--limit NAME=VALUE`` strings as ``{name: value}`` (a name given twice, or also by its own flag, refused)."""
    if sum(len(i) for i in items) > MAX_OPTION_CHARS:
        raise InvalidOption(f"--limit values are longer than {MAX_OPTION_CHARS:,} characters in all")
    out: dict[str, float] = {}
    for item in items:
        name, sep, text = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidOption(f"--limit '{item[:80]}': expected NAME=VALUE, e.g. --limit max_memory_mb=512")
        if name in out or given.get(name) is not None:
            raise InvalidOption(f"--limit {name} is given twice")
        try:
            out[name] = float(text)
        except ValueError:
            raise InvalidOption(f"--limit {name}={text[:40]}: expected a number") from None
    return out


def _fmt(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else fmt(v)


def _print_result(done: Any, job: Any, out: Path) -> None:
    """The best architecture (or why there is none), its resources against the limits, and the files written."""
    result, regret = done.result, done.regret
    console.print(
        f"{result.method} on {result.space}: {len(result.history)} evaluation(s), {result.failed} failed, "
        f"{result.skipped} infeasible candidate(s) skipped, {result.wall_s:.1f} s"
    )
    best = result.best
    if best is None:
        console.print(f"[yellow]no architecture returned: {escape(result.message)}[/yellow]")
    else:
        console.print(f"best architecture: {escape(json.dumps(result.best_decoded))}")
        if "link" in (result.best_decoded or {}):
            console.print(f"[dim]{escape(NAS_CELL)}; ops: {escape(gnn_ops_text())}[/dim]")
        value, test_value = best.extra.get("value", best.perf), best.extra.get("test_value", best.test_perf)
        test = "-" if test_value is None else f"{test_value:.4g}"
        line = f"validation {value:.4g}, test {test}"
        if regret is not None:
            line += f", regret vs the best feasible cell in the table {regret:.4g}"
        console.print(line)
        table = Table(title_justify="left")
        for col in ("resource", "value", "limit"):
            table.add_column(col, justify="left" if col == "resource" else "right")
        limits = {c.resource: c for c in job.constraints.constraints}
        units = {"latency_ms": "ms", "params": "parameters", "flops": "FLOPs", "intensity": "FLOPs/byte"}
        for name, v in best.resources.items():
            c = limits.get(name)
            limit = "-" if c is None else ("<= " if c.kind == "max" else ">= ") + _fmt(c.limit)
            table.add_row(f"{name} ({units.get(name, '')})", _fmt(v), limit)
        console.print(table)
        console.print(escape(result.message))
    conf = done.record.get("latency_confirmation")
    if conf:
        best_c = conf["confirmed_best"]
        what = "none of them meets the limits when timed" if conf["candidates"] else "nothing to time"
        what = what if best_c is None else (
            f"the best that meets the limits when timed: validation {best_c['perf']:.4g}, "
            f"{best_c['measured_ms']:.3g} ms measured ({best_c['predicted_ms']:.3g} predicted)")  # fmt: skip
        console.print(f"latency model {escape(conf['latency_model'])}: {len(conf['candidates'])} final candidate(s) "
                      f"timed; {what}")  # fmt: skip
    if result.stopped == "timeout":
        console.print("[yellow]stopped by --timeout: run the same command with --resume to continue[/yellow]")
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in done.files)}")


# ---------------------------------------------------------------------------- export
@nas_app.command("export")
def nas_export(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="A 'nas search' run folder (finished or checkpointed).")],
    out: OutOpt,
    verify: Annotated[
        bool, _opt("--verify/--no-verify", "Reload the files and check they reproduce the recorded accuracy.")
    ] = True,
) -> None:
    """Write the best architecture of a search: CNN spaces as ONNX (dynamic batch) + a PyTorch state dict +
    architecture.json; NAS-Bench-Graph as its cell spec (link, ops, valid_hash, table entry)."""
    with err_console.status(f"reading {escape(str(run))}"):
        job = prepare_export(run, out, verify=verify)
        record = job.run()
    rec, got = record["recorded"], record.get("reproduced")
    line = f"best architecture of {escape(str(run))} (evaluation {record['best_index']} of {record['evaluated']}"
    line += ")" if record["search_finished"] else ", search not finished: from its checkpoint)"
    console.print(line)
    console.print(f"recorded: validation {_fmt(rec['perf'])}, test {_fmt(rec['test_perf'])}")
    if got and "pytorch" in got:
        for name, key in (("PyTorch state dict", "pytorch"), ("ONNX Runtime", "onnx_runtime")):
            acc = got[key]
            console.print(f"reproduced by {name}: validation {_fmt(acc['perf'])}, test {_fmt(acc['test_perf'])}")
    elif got and "params" in got:
        console.print(f"parameters (re-derived by the space file): {escape(json.dumps(got['params']))}")
    elif got:
        console.print(f"table entry {got['valid_hash']}: validation {_fmt(got['perf'])}, test {_fmt(got['test_perf'])}")
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in record['files'])}")


# ---------------------------------------------------------------------------- spaces
@nas_app.command("spaces")
def nas_spaces() -> None:
    """List the search spaces: NAS-Bench-Graph datasets with their table statistics, and the CNN spaces."""
    cat = space_catalog()
    table = Table(title="NAS search spaces", title_justify="left")
    table.add_column("space", no_wrap=True)
    for col in ("archs", "blocks", "median latency (ms)", "median params"):
        table.add_column(col, justify="right")
    table.add_column("evaluation")
    for r in cat["rows"]:
        cells = (f"{r['archs']:,}", r["blocks"], _fmt(r["median_latency_ms"]), _fmt(r["median_params"]))
        table.add_row(r["space"], *cells, r["evaluation"])
    console.print(table)
    res = cat["resources"]
    console.print(f"resources: {', '.join(res['nasbench-graph'])} (NAS-Bench-Graph); {', '.join(res['cnn'])} (CNN).")
    console.print(f"CNN ops: {', '.join(cat['cnn_ops'])}; widths {', '.join(map(str, cat['cnn_widths']))}.")

    console.print(f"NAS-Bench-Graph cells: {escape(NAS_CELL)}; GNN ops: {escape(gnn_ops_text())}.")
    src = cat["sources"]
    console.print(
        f"NAS-Bench-Graph: {src['nasbench-graph']} (read in {cat['load_s']:.1f} s); digits: {src['digits']}; "
        f"cifar10: {src['cifar10']}."
    )
