"""Helpers of ``mlsysopt placement ...``: strict options and printing results (the checks and the jobs are the
library's: :mod:`mlsysopt.placement.jobs`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlsysopt.cli.common import Interrupted, console
from mlsysopt.cli.graph import show
from mlsysopt.errors import InvalidOption

if TYPE_CHECKING:
    from mlsysopt.io import RunDir


# ---------------------------------------------------------------------------- strict options
def _int_parser(flag: str, low: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if not text.lstrip("+-").isdigit():
                raise InvalidOption(f"{flag} {text!r}: expected a whole number, e.g. {max(low, 1)}")
            number = int(text)
        if number < low:
            raise InvalidOption(f"{flag} {number}: must be >= {low}")
        return number

    return parse


def _float_parser(flag: str, low: float, strict: bool) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise InvalidOption(f"{flag} {value!r}: expected a number, e.g. 0.01") from None
        if not math.isfinite(number) or number < low or (strict and number == low):
            raise InvalidOption(f"{flag} {value}: must be a finite number {'>' if strict else '>='} {low:g}")
        return number

    return parse


def int_opt(flag: str, text: str, low: int = 1) -> Any:
    """A whole-number option >= ``low``; anything else (1.5, true, 1e3) is one clear error naming ``flag``."""
    return typer.Option(flag, parser=_int_parser(flag, low), metavar="INTEGER", help=text)


def float_opt(flag: str, text: str, low: float = 0.0, strict: bool = True) -> Any:
    """A finite number > ``low`` (>= with ``strict=False``); nan, inf and words are one clear error."""
    return typer.Option(flag, parser=_float_parser(flag, low, strict), metavar="FLOAT", help=text)


ClusterOpt = Annotated[
    Path | None, typer.Option("--cluster", help="Device cluster JSON or preset:NAME (or use --devices).")
]
DevicesOpt = Annotated[
    int | None, int_opt("--devices", "Or a random cluster of N devices in the graph's units (saved as cluster.json).")
]
OpCostsOpt = Annotated[
    str | None,
    typer.Option(
        "--op-costs",
        help="builtin or an oracle folder: the CPU device's per-op times from the latency oracle instead of FLOPs / "
        "speed (an .onnx graph); or an op profile FILE.json from 'placement calibrate' (any PyTorch or ONNX "
        "graph). Other devices keep their speed ratio.",
    ),
]
OpCostsDeviceOpt = Annotated[
    str | None, typer.Option("--op-costs-device", help="The CPU device --op-costs is for (default: named cpu*).")
]
ExecutionOpt = Annotated[
    str,
    typer.Option(
        "--execution",
        help="How a device runs its tasks: fifo (ready tasks in arrival order, as a dataflow runtime or a workflow "
        "manager does) | ordered (a static schedule's order: HEFT's own schedule for HEFT, schedule.json for "
        "the result).",
    ),
]
PolicyOpt = Annotated[
    str,
    typer.Option("--policy", help="GiPH checkpoint (from 'placement train'), or 'pretrained': the shipped policy."),
]
BudgetOpt = Annotated[
    int | None, int_opt("--budget", "Simulator evaluations per search [default: 10 x tasks, within 100-20,000].")
]
SeedsOpt = Annotated[int, int_opt("--seeds", "Seeds per method (--seed, --seed+1, ...), run in parallel.")]
ResumeOpt = Annotated[bool, typer.Option("--resume/--no-resume", help="Continue the run in --out.")]


# ---------------------------------------------------------------------------- small helpers
def parse_names(text: str | None) -> list[str]:
    """Names from a comma list."""
    return [s.strip() for s in (text or "").split(",") if s.strip()]


@contextmanager
def interruptible(what: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C: one line (``what()`` says what is kept) and exit code 130, no traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(what()) from None


def stopped_compare(run: RunDir) -> str:
    """What a stopped ``placement compare`` kept (it has no checkpoint: all or nothing)."""
    if run.stopped_after_results:
        return f"the comparison was complete: {run.path} holds it; the study store took what it could in time"
    return "nothing was written"


# ---------------------------------------------------------------------------- printing
def seconds(v: float) -> str:
    """A time in seconds with 5 significant digits."""
    return f"{v:.5g}"


def print_training(history: list[dict[str, float]], data: str, out: Path, stopped_by: str) -> None:
    """The training summary table and the files written."""
    rows = [("data", data), ("updates", str(len(history)))]
    imitation = [h for h in history if h.get("stage") == "imitation"]
    if imitation:
        rows.append(("imitation epochs", str(len(imitation))))
        rows.append(("teacher agreement, last epoch", f"{imitation[-1]['agreement']:.1%}"))
        history = [h for h in history if h.get("stage") != "imitation"]
    if history:
        k = max(1, min(5, len(history) // 2))
        first = sum(h["improvement"] for h in history[:k]) / k
        last = sum(h["improvement"] for h in history[-k:]) / k
        rows += [(f"improvement, first {k} updates", f"{first:.1%}"), (f"improvement, last {k} updates", f"{last:.1%}")]
        if history[-1].get("stage") != "reinforce":
            rows.append(("entropy, last update", f"{history[-1]['entropy']:.3f}"))
    show("training", rows)
    if stopped_by == "timeout":
        console.print(f"stopped by --timeout after {len(history)} updates: --resume continues")
    console.print(f"wrote {', '.join(escape(str(out / f)) for f in ('policy.pt', 'result.json', 'training.png'))}")


def print_place(result: dict[str, Any], num_devices: int, out: Path, files: list[str]) -> None:
    """The placement table of ``placement place``."""
    rows = [
        ("makespan (s)", seconds(result["makespan"])),
        ("CP_MIN, lower bound (s)", seconds(result["cp_min"])),
        ("SLR", f"{result['slr']:.4f}"),
        (
            "evaluations",
            f"{result['evaluations']} (best after {result['steps_to_best']}; ended by {result['stopped_by']})",
        ),
        ("devices used", f"{len(set(result['placement'].values()))} / {num_devices}"),
        ("search time (s)", f"{result['seconds']:.2f}"),
    ]
    show(f"placement ({result['method']}, {result['execution']} execution)", rows)
    print_comparison(result["comparison"], result["method"])
    for line in result.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {escape(line)}")
    console.print(f"wrote {', '.join(files)} to {escape(str(out))}")


PORTFOLIO_LABELS = {
    "heft": "HEFT",
    "fastest_device": "all on the fastest device",
    "saga_cpop": "CPOP (saga)",
    "saga_best": "best saga scheduler",
    "init": "--init",
    "keep": "kept placement",
}


def print_comparison(compared: dict[str, Any], method: str) -> None:
    """The result against each portfolio member (or HEFT and the fastest device); a warning when one is better."""
    heft = compared["members"]["heft"]
    rows, styles = [], []
    for name, ms in compared["members"].items():
        label = PORTFOLIO_LABELS.get(name, name)
        if name == "saga_best" and compared.get("saga_best_scheduler"):
            label += f" ({compared['saga_best_scheduler']})"
        if name == compared.get("start"):
            label += "  <- start"
        rows.append((label, seconds(ms), f"{ms / heft:.3f}" if heft > 0 else "-"))
        styles.append(None)
    rows.append((f"final ({method})", seconds(compared["final"]), f"{compared['final_over_heft']:.3f}"))
    styles.append("bold green" if not compared["better"] else "bold red")
    show("comparison", rows, ("placement", "makespan (s)", "x HEFT"), styles)
    if "heft_reference" in compared:
        console.print(f"x HEFT: against {escape(compared['heft_reference'])}")
    if compared["better"]:
        names = ", ".join(PORTFOLIO_LABELS.get(n, n) for n in compared["better"])
        console.print(f"[yellow]warning:[/yellow] {method}'s placement is worse than {escape(names)} on this problem")


def print_compare(result: dict[str, Any], out: Path) -> None:
    """The per-method table of ``placement compare``; the best mean makespan in green."""
    seeds, budget, bound = len(result["seeds"]), result["budget"], seconds(result["cp_min"])
    execution = result.get("execution", "fifo")
    title = f"{seeds} seed(s), budget {budget} evaluations, CP_MIN {bound} s, {execution} execution"
    valid = {name: r.get("valid", True) for name, r in result["results"].items()}
    best = min((r["mean_makespan"] for n, r in result["results"].items() if valid[n]), default=None)
    rows = []
    for name, r in result["results"].items():
        mean, low, ratio = seconds(r["mean_makespan"]), seconds(r["min_makespan"]), f"{r['mean_ratio_to_heft']:.3f}"
        own = [i["saga_makespan"] for i in r.get("info", []) if "saga_makespan" in i]
        saga = seconds(sum(own) / len(own)) if own else "-"  # saga's makespan in its own model, beside ours
        repaired = max((i.get("repaired_tasks", 0) for i in r.get("info", [])), default=0)
        label = name if valid[name] else f"{name} (invalid: left {r.get('missing_tasks', '?')} tasks out)"
        rows.append((label, mean, low, ratio, saga, str(repaired) if own else "-", f"{r['mean_steps_to_best']:.1f}",
                     f"{r['seconds']:.2f}"))  # fmt: skip
    styles = [
        "bold green" if valid[n] and r["mean_makespan"] == best else ("dim" if not valid[n] else None)
        for n, r in result["results"].items()
    ]
    columns = ("method", "mean makespan (s)", "min makespan (s)", "x HEFT", "saga's own (s)", "repaired tasks")
    columns += ("steps to best", "search time (s)")
    show(title, rows, columns, styles)
    if "heft_reference" in result:
        console.print(f"x HEFT: against {escape(result['heft_reference'])}")
    for name, why in result["skipped"].items():
        console.print(f"skipped {name}: {why}")
    console.print(f"wrote result.json, cluster.json and search.png to {escape(str(out))}")


def print_adapt(result: dict[str, Any], before: int, after: int, out: Path, files: list[str]) -> None:
    """GiPH adapt vs HEFT re-run vs keep, after the change; the best in green."""
    change = ", ".join(f"{what} {', '.join(result[what])}" for what in ("removed", "added") if result[what])
    k = len(result["giph_seeds"]["seeds"])
    giph = "GiPH adapt" if k == 1 else f"GiPH adapt (best of {k} seeds)"
    labels = {"giph_adapt": giph, "heft_rerun": "HEFT re-run", "keep": "keep (carry over, no search)"}
    best = min(result["makespans"].values())
    rows = [(labels[key], seconds(ms)) for key, ms in result["makespans"].items()]
    styles: list[str | None] = ["bold green" if ms == best else None for ms in result["makespans"].values()]
    if k > 1:
        rows.insert(1, (f"GiPH adapt (mean of {k} seeds)", seconds(result["giph_seeds"]["mean_makespan"])))
        styles.insert(1, None)
    rows.append(("before the change", seconds(result["old_makespan"])))
    show(f"{before} -> {after} devices ({change})", rows, ("placement", "makespan (s)"), [*styles, "dim"])
    console.print(f"{len(result['orphaned_tasks'])} task(s) lost their device")
    console.print(f"wrote {', '.join(files)} to {escape(str(out))}")


def print_profile(profile: Any, path: Path) -> None:
    """What ``placement calibrate`` measured: the fit, each group's costs and the file."""
    from mlsysopt.graph.op_profile import GROUPS  # deferred: only this command prints a profile

    fit = profile.meta["fit"]
    c = profile.coefficients
    console.print(f"op profile of {escape(str(profile.meta['device']))}, {profile.meta['threads']} thread(s), "
                  f"{len(profile.meta['kernels'])} micro-kernels: fitted / measured median {fit['median_ratio']:.2f}, "
                  f"{fit['min_ratio']:.2f}-{fit['max_ratio']:.2f}, {fit['within_25pct']:.0%} within +-25%")  # fmt: skip
    table = Table("op group", "fixed (us)", "GFLOP/s", "GB/s")
    for g in GROUPS:
        rate = c.get(f"{g}.per_flop")
        band = c.get(f"{g}.per_byte")
        table.add_row(g, f"{c[g + '.fixed'] * 1e6:.2f}", "-" if not rate else f"{1e-9 / rate:.1f}",
                      "-" if not band else f"{1e-9 / band:.1f}")  # fmt: skip
    console.print(table)
    layers = f"recurrent {c['layer.recurrent'] * 1e6:.1f} us, transformer {c['layer.transformer'] * 1e6:.1f} us"
    console.print(f"inside a GRU or encoder layer: {c['inner'] * 1e6:.2f} us per op; per layer: {layers}")
    console.print(f"wrote {escape(str(path))}: use it as --op-costs {escape(str(path))}")
