"""``mlsysopt costmodel collect-latency | latency | latency-train``: the latency oracle from the command line."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mlsysopt.cli.common import SeedOpt, TimeoutOpt, console, err_console
from mlsysopt.cli.costmodel import costmodel_app
from mlsysopt.costmodel.oracle.predictors import TRAIN_METHOD
from mlsysopt.costmodel.oracle.settings import make_setting
from mlsysopt.errors import InvalidOption, MlsysoptWarning


@costmodel_app.command("collect-latency")
def costmodel_collect_latency(
    out: Annotated[Path, typer.Option("--out", help="Run folder to write (--resume continues it).")],
    models: Annotated[int, typer.Option("--models", help="Distinct generated models to time.")] = 1100,
    rounds: Annotated[int, typer.Option("--rounds", help="Timing rounds per setting (>= 2: the noise floor).")] = 2,
    families: Annotated[str | None, typer.Option("--families", help="Comma-separated families (default: all).")] = None,
    max_others: Annotated[
        float, typer.Option("--max-others", help="Cores other processes may use before a model is timed again.")
    ] = 0.25,
    timeout: TimeoutOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted collection.")] = False,
    seed: SeedOpt = 0,
) -> None:
    """Time REAL latencies on this machine: generated models x 12 settings (ONNX Runtime and PyTorch eager, 1-2
    threads, batch 1 and 8). Timing-sensitive: run it alone. Checkpointed after every model."""
    # deferred: mlsysopt.costmodel.oracle.collect imports torch
    from mlsysopt.costmodel.oracle.collect import NOISY, collect_latency

    # deferred: mlsysopt.costmodel.oracle.families imports torch
    from mlsysopt.costmodel.oracle.families import FAMILIES

    # deferred: mlsysopt.costmodel.oracle.timing imports torch
    from mlsysopt.costmodel.oracle.timing import SLOW_REFERENCE

    fams = list(FAMILIES) if families is None else [f.strip() for f in families.split(",") if f.strip()]
    manifest = collect_latency(out, models=models, rounds=rounds, seed=seed, families=fams, timeout=timeout,
                               resume=resume, max_others=max_others,
                               log=lambda line: err_console.print(escape(line)))  # fmt: skip
    state = "complete" if manifest["complete"] else "stopped: --resume continues"
    speed = manifest.get("host_speed") or {}
    host = f", host speed spread {speed['spread']:.2f}x ({speed['slow_rounds']} slow rounds)" if speed else ""
    console.print(f"{manifest['models']} models ({state}), noise floor {manifest['noise_floor']:.1%}{host}; wrote "
                  f"{escape(str(out))}")  # fmt: skip
    if manifest["noise_floor"] > NOISY or speed.get("spread", 1.0) > SLOW_REFERENCE:
        err_console.print(f"[yellow]the times reproduce only to {manifest['noise_floor']:.1%} between rounds (host "
                          f"speed spread {speed.get('spread', float('nan')):.2f}x): the machine was busy or its host "
                          "slow for a while; time it again when it is quiet[/yellow]")  # fmt: skip


@costmodel_app.command("latency")
def costmodel_latency(
    source: Annotated[str, typer.Argument(help="A model: file.py:factory, model.onnx or zoo:NAME.")],
    engine: Annotated[str, typer.Option("--engine", help="onnxruntime | torch.")] = "onnxruntime",
    threads: Annotated[int, typer.Option("--threads", help="Intra-op threads.")] = 1,
    mode: Annotated[str, typer.Option("--mode", help="seq | par (ONNX Runtime's executor).")] = "seq",
    batch: Annotated[int, typer.Option("--batch", help="Batch size.")] = 1,
    run: Annotated[
        str | None, typer.Option("--run", help="An oracle folder ('costmodel latency-train'); default: builtin.")
    ] = None,
    measure: Annotated[bool, typer.Option("--measure", help="Also time the model here, for comparison.")] = False,
    grid: Annotated[
        bool, typer.Option("--grid", help="Every setting the oracle learned, fastest predicted first (a ranking).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predicted milliseconds of one inference of SOURCE under a setting, with an interval (~20 ms, offline)."""
    # deferred: mlsysopt.costmodel.oracle.api imports torch
    from mlsysopt.costmodel.oracle.api import measure_source, predict_grid, predict_source

    setting = make_setting(engine, threads, mode, batch)
    if grid:
        if measure:
            raise InvalidOption("--grid predicts every setting; time one with --measure and without --grid")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MlsysoptWarning)
            preds, oracle_name = predict_grid(source, run)
        if as_json:
            console.print_json(json.dumps({"source": source, "oracle": oracle_name,
                                           "settings": [p.to_dict() for p in preds]}))  # fmt: skip
            return
        _print_warnings(caught)
        legend = "; * outside what it learned" if any(p.ood for p in preds) else ""
        head = f"{escape(source)}: every setting, fastest predicted first (oracle {escape(oracle_name)}{legend})"
        console.print(head)
        for p in preds:
            console.print(f"  {p.setting:<16} {p.ms:9.4g} ms  ({p.low:.4g}-{p.high:.4g}){' *' if p.ood else ''}")
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MlsysoptWarning)
        t0 = time.perf_counter()
        pred, oracle_name = predict_source(source, setting, run)
        seconds = time.perf_counter() - t0
    out = {"source": source, "oracle": oracle_name, **pred.to_dict(), "seconds": round(seconds, 4)}
    if measure:
        out["measured_ms"] = measure_source(source, setting)
    if as_json:
        console.print_json(json.dumps(out))
    else:
        _print_warnings(caught)
        line = (f"{escape(source)} ({setting.key}): {pred.ms:.4g} ms predicted "
                f"(90% interval {pred.low:.4g}-{pred.high:.4g} ms; oracle {escape(oracle_name)})")  # fmt: skip
        if measure:
            line += f"; measured here {out['measured_ms']:.4g} ms ({out['measured_ms'] / pred.ms - 1:+.0%})"
        console.print(line)


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    """The oracle's warnings on stderr, one line per distinct reason (a grid's PyTorch settings share theirs)."""
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, MlsysoptWarning)):
        err_console.print(f"warning: {escape(message)}")


METHOD_HELP = "flops | additive | gbm | additive+gbm | additive-mlp | gnn (default: the shipped oracle's method)."


@costmodel_app.command("latency-train")
def costmodel_latency_train(
    data: Annotated[Path, typer.Option("--data", help="A collection folder ('costmodel collect-latency').")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the oracle into.")],
    method: Annotated[str, typer.Option("--method", help=METHOD_HELP)] = TRAIN_METHOD,
    seed: SeedOpt = 0,
) -> None:
    """Train a latency oracle on your own collection (train split; interval from the valid split)."""
    # deferred: mlsysopt.costmodel.oracle.api imports torch
    from mlsysopt.costmodel.oracle.api import train_oracle

    summary = train_oracle(data, out, method, seed)
    rep = summary["valid_repeatability"]
    ruler = "" if rep is None else f" (its labels: a re-measurement lands within +-10% {rep:.1%} of the time)"
    console.print(f"oracle ({summary['method']}) on {summary['train']} models: valid within +-10% "
                  f"{summary['valid_within10']:.1%}{ruler}, Spearman {summary['valid_spearman']:.3f}; wrote "
                  f"{escape(str(out))}")  # fmt: skip
