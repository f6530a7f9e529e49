"""The latency oracle in use by ``serving tune --cost-model builtin`` (issue #32, item 4): does its op-level
shortlist hold the best configuration, and do the tuners reach it in fewer measurements?

Run it alone on a quiet machine: the table is a timing. Per model, on mlsysopt's own engine (ONNX Runtime here):

1. **Exhaustive table**: every configuration of ``serving tune``'s default grid on this machine (119 on 2 cores:
   instances x max batch x batch timeout x intra-op threads x inter-op threads x executor), each measured once in
   stable windows (``serving tune``'s: windows of 1 s, 3 within 10%, at most 6) at ``--rate``, the objective the
   p99 latency. Configurations are measured in a seeded random order, so a slow spell of the host does not fall
   on one op-level setting.
2. **The shortlist**: the shipped oracle predicts the model's four op-level settings (intra-op threads 1-2 x
   sequential/parallel) and keeps those within 20% of its best, plus the default's (``--cost-model-tolerance``
   0.2, the default). ``shortlist_holds_best`` / ``shortlist_holds_within_5pct``: whether the table's best configuration
   / one within 5% of it is in the shortlisted space.
3. **Replay**: RRL (``serving tune``'s default at these budgets), Optuna GP and TPE, and random search (what chance
   gives), 10 seeds each, on the full space and on the shortlisted space, both replaying the same measured table:
   measurements until the best so far is within 5% of the *full* table's best (``to_5pct``, 31 when not within
   :data:`CAP` = 30, the default ``--budget``), and the table value of the pick after 10 measurements (the small
   budget class's largest); ``shortlist_minus_full``: their mean differences with 95% bootstrap intervals. The
   shortlisted space holds exactly the kept (threads, executor) pairs (``Space(op_levels=...)``, as ``serving tune``
   narrows since 2026-12-07; before, their knob product).

Each table is kept in ``--work`` as it is measured (``NAME_table.json``): a killed run resumes there, and a run
over kept tables only replays.

``--quick``: 8 configurations (1 instance, max batch 1 or 4, batch timeout 2 ms), a check that every step runs.

The replay is what makes the comparison fair: both sides see the same measured values. What it cannot show is
whether a second table would rank the same configuration first (this machine's noise; see BENCHMARKS.md #33).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from serving_rayserve import replay_steps

HERE = Path(__file__).resolve().parent
MODELS = {
    "gru": f"{HERE / 'serving_models.py'}:gru",
    "cnn": "zoo:cnn",
}
TUNERS = ("rrl", "gp", "tpe", "random")
SEEDS = 10
CAP = 30
BUDGET = 10


def measure_table(spec: str, rate: float, seed: int, quick: bool, kept: Path) -> tuple[Any, Any, dict, float]:
    """The full space, the shortlist and the shortlisted space, every configuration's measurement at ``rate`` and the
    seconds the measurements took. The table is kept in ``kept`` as it is measured; a kept table is read back."""
    from mlsysopt.costmodel.oracle.api import load_oracle
    from mlsysopt.io import read_json, write_json_atomic
    from mlsysopt.serving.backend import Measurement
    from mlsysopt.serving.cost_model import op_level_shortlist
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.inputs import ModelStage, machine_threads, tuning_space
    from mlsysopt.serving.space import Config, Workload
    from mlsysopt.serving.windows import StableBackend

    cores = machine_threads()
    grid = {"instances": (1,), "max_batch": (1, 4), "batch_timeout_ms": (2.0,)} if quick else None
    space = tuning_space("real", cores, grid)
    stage = ModelStage(spec, None, largest=16, instances=2)
    shortlist = op_level_shortlist(load_oracle("builtin"), stage.model.path, space, cores)
    # as `serving tune --cost-model` narrows it: the kept (threads, executor) pairs
    short_space = tuning_space("real", cores, {**(grid or {}), **shortlist.knobs}, op_levels=shortlist.kept)
    done = read_json(kept) if kept.is_file() else {"rows": [], "seconds": 0.0}
    table = {Config.from_dict(r["config"]): Measurement.from_dict(r["measurement"]) for r in done["rows"]}
    order = [c for c in space if c not in table]
    random.Random(seed).shuffle(order)
    t0 = time.perf_counter() - done["seconds"]
    if order:
        with Engine(stage.model, n_requests=200, max_threads=cores, seed=seed, window_s=1.0) as engine:
            stable = StableBackend(engine)
            for k, c in enumerate(order):
                table[c] = stable.measure(c, Workload(rate))
                done["rows"].append({"config": c.to_dict(), "measurement": table[c].to_dict()})
                done["seconds"] = time.perf_counter() - t0
                write_json_atomic(kept, done)
                if k % 10 == 0:
                    print(f"    {len(table)}/{space.size} {c.label()}: p99 {table[c].p99_ms:.3f} ms", flush=True)
    stage.close()
    return space, (shortlist, short_space), table, done["seconds"]


def replay(space: Any, objective: Any, table: dict, best: float, rate: float, seed: int, tuner: str) -> dict:
    """``tuner`` on ``space`` against the measured ``table``: measurements to within 5% of ``best`` and the table
    value of its pick after :data:`BUDGET` measurements."""
    from mlsysopt.serving.tuning import evals_to_within

    scores = {c: objective.score(table[c]) for c in space}
    steps = replay_steps(space, objective, table, rate, seed, tuner, min(CAP, space.size))
    to5 = evals_to_within(steps, scores, best, 0.05)
    pick = steps[min(BUDGET, len(steps)) - 1].best_config
    return {"to_5pct": to5 if to5 is not None else CAP + 1, "pick_at_10": scores[pick]}


def spread(values: list[float]) -> dict[str, float]:
    """Median, lowest and highest of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summary(run: dict[str, list]) -> dict[str, float]:
    """Mean and median measurements to within 5%, and the mean p99 (ms) of the pick after :data:`BUDGET`."""
    to5 = run["to_5pct"]
    return {"mean_to_5pct": statistics.fmean(to5), "median_to_5pct": statistics.median(to5),
            "mean_pick_at_10_ms": statistics.fmean(run["pick_at_10"])}  # fmt: skip


def differences(runs: dict[str, dict[str, list]], resamples: int = 10_000) -> dict[str, dict[str, Any]]:
    """Per tuner, shortlist - full over the seeds (paired by seed): the mean difference in measurements to within 5%
    and in the pick's p99 after :data:`BUDGET`, each with a 95% bootstrap interval (numpy seed 0)."""
    import numpy as np

    rng = np.random.default_rng(0)
    out: dict[str, dict[str, Any]] = {}
    for t in TUNERS:
        if f"{t}/full" not in runs:
            continue
        row = {}
        for key in ("to_5pct", "pick_at_10"):
            diff = np.array(runs[f"{t}/shortlist"][key], float) - np.array(runs[f"{t}/full"][key], float)
            means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(axis=1)
            row[key] = {"mean": float(diff.mean()), "ci95": [float(np.percentile(means, q)) for q in (2.5, 97.5)]}
        out[t] = row
    return out


def model_case(name: str, spec: str, rate: float, seed: int, quick: bool, work: Path) -> dict[str, Any]:
    """Every figure of one model (see the module docstring)."""
    from mlsysopt.serving.objective import Objective

    kept = work / f"{name}{'_quick' if quick else ''}_table.json"
    space, (shortlist, short_space), table, seconds = measure_table(spec, rate, seed, quick, kept)
    objective = Objective("latency", stat="p99")
    scores = {c: objective.score(m) for c, m in table.items()}
    best_config = min(scores, key=scores.get)
    best = scores[best_config]
    short = list(short_space)
    near = [c for c in table if scores[c] <= best * 1.05]
    runs: dict[str, dict[str, list]] = {}
    for label, sp in (("full", space), ("shortlist", short_space)):
        for t in TUNERS:
            rs = [replay(sp, objective, table, best, rate, s, t) for s in range(SEEDS)]
            runs[f"{t}/{label}"] = {"to_5pct": [r["to_5pct"] for r in rs], "pick_at_10": [r["pick_at_10"] for r in rs]}
    by_op: dict[str, list[float]] = {}
    for c, v in scores.items():
        by_op.setdefault(f"i{c.intra_threads} {'par' if c.execution_mode else 'seq'}", []).append(v)
    return {
        "model": spec,
        "rate": rate,
        "space_size": len(table),
        "shortlist": {"kept": [list(k) for k in shortlist.kept], "predicted_ms": [list(p) for p in shortlist.predicted],
                      "size": len(short)},
        "table_seconds": seconds,
        "best": {"config": best_config.label(), "p99_ms": best},
        "within_5pct": [c.label() for c in near],
        "shortlist_holds_best": best_config in short,
        "shortlist_holds_within_5pct": any(c in short for c in near),
        "p99_by_op_setting_ms": {k: spread(v) for k, v in by_op.items()},
        "table_p99_ms": {c.label(): scores[c] for c in table},
        "replay": runs,
        "summary": {k: summary(v) for k, v in runs.items()},
        "shortlist_minus_full": differences(runs),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("runs/bench/serving_oracle_replay"))
    parser.add_argument("--quick", action="store_true", help="8 configurations (1 instance, max batch 1 or 4)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serving_oracle_replay.json"))
    args = parser.parse_args()
    from mlsysopt.io import write_json_atomic

    args.work.mkdir(parents=True, exist_ok=True)
    load = {"before": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t0 = time.perf_counter()
    names = args.models.split(",")
    for name in names:  # every table first, then the replays (no replay's CPU beside a measurement)
        print(f"{name}: {MODELS[name]} at {args.rate:g} req/s", flush=True)
        kept = args.work / f"{name}{'_quick' if args.quick else ''}_table.json"
        measure_table(MODELS[name], args.rate, args.seed, args.quick, kept)
    load["tables_done"] = os.getloadavg()
    models = {}
    for name in names:
        models[name] = model_case(name, MODELS[name], args.rate, args.seed, args.quick, args.work)
        print(json.dumps(models[name]["summary"], indent=1), flush=True)
    result = {"models": models, "seconds": time.perf_counter() - t0, "load": {**load, "after": os.getloadavg()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, result)
    print(json.dumps({n: {k: m[k] for k in ("best", "shortlist_holds_best", "summary")} for n, m in models.items()},
                     indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
