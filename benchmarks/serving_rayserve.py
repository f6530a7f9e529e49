"""Serving on Ray Serve (issue #33): the tuned deployment against Ray Serve's defaults, measured over HTTP here.

Run it alone on a quiet machine: every figure is a timing. The objective is the one the issue's target names and
Triton Model Analyzer optimizes: **throughput under the SLO** (the highest offered rate with p99 <= 50 ms and no
saturation, found by the rate search of :class:`~mlsysopt.serving.capacity.CapacityBackend`: doubling, then 3
bisections, ~6% resolution). Per model (the zoo CNN, a tiny ViT and a wide MLP from ``benchmarks/serving_models.py``):

1. **Ray Serve's default** (1 replica, no batching, ``max_ongoing_requests`` 5, ONNX Runtime's own threads): its
   throughput under the SLO, searched from 40 req/s.
2. **Exhaustive** table of the 16-configuration grid (replicas, max batch, intra-op threads and Ray Serve's
   ``max_ongoing_requests``): one rate search per configuration, each starting at the default's throughput; the
   tuners (RRL, GP, TPE, hill climb; 5 seeds) replay the table with ``Objective("throughput", SLO)``: measurements to
   within 5% of the exhaustive best (``measurements_to_5pct``), and RRL's (the default tuner's) pick after 4
   measurements (25% of the grid).
3. **Confirmation, side by side**: the default, the pick and the exhaustive best searched again in ``--rounds``
   rounds (3); in each round every one once, in a fresh seeded random order on fresh arrival windows, so a slow spell
   of the host falls on all of them. The table's figures are not reused (the table's best is its luckiest search).
   Each one's throughput is the median of its rounds: ``tuned_throughput`` the pick's, ``default_throughput`` the
   default's, ``confirmed_ratio`` = best / pick (1.0 when the pick is the best). ``tuned_over_default_paired``: the
   pick ÷ the default round by round, their geometric mean and its 95% t-interval.
4. **Home-engine transfer**: the grid without ``max_ongoing_requests`` (8 configurations) searched on mlsysopt's own
   ONNX Runtime engine; its best, deployed on Ray Serve with Ray Serve's default ``max_ongoing_requests`` 5, read
   from the table: ``home_engine_transfer`` = Ray Serve's best / the home engine's best on Ray Serve.
5. **Deploy check**: the pick written as ``serve_config.yaml`` + the application module, deployed by Ray Serve's
   own ``serve run``, the knobs read back from the replica and the p99 measured over HTTP at the pick's confirmed
   throughput (the median of its rounds) against the SLO (and, for information, at 0.8x that rate).
6. ``tune_seconds_budget3``: ``mlsysopt serving tune --budget 3`` with the defaults, per engine, wall clock.

A window whose requests have not all answered 2 s after its last arrival ends there (the engine's ``max_seconds``
3): an unanswered request counts with the time it waited, so such a window misses a 50 ms SLO either way, and a
saturated probe costs 3 s per window instead of 10. A probe also stops once its SLO verdict is clear
(:func:`decisive`).

``--confirm-only`` / ``--home-only`` / ``--deploy-only``: steps 3 and 5 / step 4 / step 5 again on the models kept in
the work folder (the tune timings kept from ``--out``).

``--quick``: the CNN on 2 configurations (1 replica, max batch 1 or 4, 2 intra-op threads, ``max_ongoing_requests``
32), budget 1, no confirmation (the table's figures), one deploy check, no home engine or tune timing (~3 min).
Each model is kept in the work folder as it finishes (a killed run resumes at the next model).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from serving_rayserve_deploy import deploy_check, write_deploy

HERE = Path(__file__).resolve().parent
MODELS = {
    "cnn": "zoo:cnn",
    "vit": f"{HERE / 'serving_models.py'}:tiny_vit",
    "mlp": f"{HERE / 'serving_models.py'}:mlp_wide",
}
SLO_MS = 50.0
TUNERS = ("rrl", "gp", "tpe", "hill_climb")
SEEDS = 5
BUDGET_FRACTION = 0.25


#: Ray Serve's default max_ongoing_requests, and room for 8 batches of 4 rows (Ray Serve's knob only)
ONGOING = (5, 32)


def knobs(quick: bool) -> dict[str, tuple]:
    """The grid: replicas, max batch, one batch timeout, intra-op threads, max ongoing requests (16 configurations; 2
    with --quick: 1 replica, 2 intra-op threads, max ongoing requests 32). Max batch 16 of the earlier 12-configuration
    grid was never the best there: max ongoing requests took its place (chosen 2026-12-05, before any throughput
    figure)."""
    return {
        "instances": (1,) if quick else (1, 2),
        "max_batch": (1, 4),
        "batch_timeout_ms": (5.0,),
        "intra_threads": (2,) if quick else (1, 2),
        "inter_threads": (1,),
        "execution_mode": (0,),
        "max_ongoing": ONGOING[1:] if quick else ONGOING,
    }


def settled(windows: Any) -> bool:
    """Whether a rate's SLO verdict is clear from its windows so far: most saturated, or the 95% interval of their
    mean p99 wholly below (none saturated) or above the SLO. A rate search needs only pass or fail."""
    from mlsysopt.serving.stats import mean_ci

    saturated = sum(bool(m.saturated) for m in windows)
    lo, hi = mean_ci([m.p99_ms for m in windows])
    return saturated * 2 > len(windows) or (not saturated and hi < SLO_MS) or lo > SLO_MS


def decisive(backend: Any) -> Any:
    """Stable windows (perf_analyzer's rule, :class:`~mlsysopt.serving.windows.StableBackend`: 3 within 10%, at most
    6) that also stop after 3 once :func:`settled`."""
    from mlsysopt.serving.windows import StableBackend

    return StableBackend(backend, decided=settled)


def capacity_of(m: Any) -> float:
    """The rate a capacity search found (req/s), 0 when no rate met the SLO."""
    return float(m.extra.get("at_rate", 0.0)) if m.p99_ms <= SLO_MS and not m.saturated else 0.0


def rate_search(stable: Any, doublings: int = 5) -> Any:
    """The rate search every figure comes from: doubling from the start rate, then 3 bisections."""
    from mlsysopt.serving.capacity import CapacityBackend

    return CapacityBackend(stable, SLO_MS, doublings=doublings, bisections=3)


def capacity_table(stable: Any, configs: list[Any], start: float, doublings: int = 5) -> dict[Any, Any]:
    """Each configuration's capacity-search measurement (its ``extra["at_rate"]``: throughput under the SLO)."""
    from mlsysopt.serving.space import Workload

    search = rate_search(stable, doublings)
    # grouped by CPUs per replica: Ray Serve restarts replicas only when num_cpus changes (the rest is in place)
    order = sorted(configs, key=lambda c: (c.threads_per_instance, c.instances, c.max_batch, c.ongoing))
    out = {}
    for c in order:
        out[c] = search.measure(c, Workload(start))
        print(f"    {c.label()}: {capacity_of(out[c]):.0f} req/s", flush=True)
    return out


def replay_steps(
    space: Any, objective: Any, measured: dict, rate: float, seed: int, tuner: str, n: int, **knobs: Any
) -> list:
    """``n`` steps of ``tuner`` (with its ``knobs``) on ``space`` answered from the ``measured`` table."""
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.space import Workload
    from mlsysopt.serving.tuners import get_tuner
    from mlsysopt.serving.tuning import tune

    class Table(Backend):
        cores = os.cpu_count() or 1

        def measure(self, config, workload, window=0):
            return measured[config]

    return tune(get_tuner(tuner, space, objective, seed=seed, **knobs), Table(), [(Workload(rate), n)]).steps


def replay(space: Any, objective: Any, measured: dict, rate: float, seed: int, tuner: str, budget: int) -> dict:
    """A tuner against the measured table: measurements to within 5% of the table's best, and its pick at ``budget``."""
    from mlsysopt.serving.tuning import evals_to_within

    scores = {c: objective.score(m) for c, m in measured.items()}
    best = min(scores.values())
    steps = replay_steps(space, objective, measured, rate, seed, tuner, space.size)
    return {
        "to_5pct": evals_to_within(steps, scores, best, 0.05),
        "pick": steps[budget - 1].best_config,
    }


def confirm(stable: Any, configs: list[Any], start: float, seed: int, rounds: int) -> dict[Any, list[float]]:
    """``configs`` searched side by side: ``rounds`` rounds, each a fresh seeded random order of every configuration
    once (fresh arrival windows). Per configuration, its throughput under the SLO round by round (req/s)."""
    import random

    from mlsysopt.serving.space import Workload

    search, rng = rate_search(stable), random.Random(seed)
    order = list(dict.fromkeys(configs))
    out: dict[Any, list[float]] = {c: [] for c in order}
    for r in range(rounds):
        rng.shuffle(order)
        for c in order:
            out[c].append(capacity_of(search.measure(c, Workload(start), window=100 * (r + 1))))
            print(f"    round {r + 1}: {c.label()} {out[c][-1]:.0f} req/s", flush=True)
    return out


def paired_ratio(num: list[float], den: list[float]) -> dict[str, Any]:
    """``num`` ÷ ``den`` round by round: the geometric mean and its 95% t-interval (None below 2 rounds; rounds where
    either met no rate are left out and counted)."""
    from mlsysopt.serving.stats import mean_ci

    logs = [math.log(a / b) for a, b in zip(num, den, strict=True) if a > 0 and b > 0]
    lo, hi = mean_ci(logs) if len(logs) > 1 else (math.nan, math.nan)
    return {
        "geomean": math.exp(statistics.fmean(logs)) if logs else None,
        "ci95": [math.exp(lo), math.exp(hi)] if len(logs) > 1 else None,
        "per_round": [a / b if b else None for a, b in zip(num, den, strict=True)],
        "rounds_left_out": len(num) - len(logs),
    }


def confirmed(default: Any, pick: Any, best: Any, rounds: dict[Any, list[float]]) -> dict[str, Any]:
    """The figures of step 3 from the rounds of :func:`confirm`."""
    med = {c: statistics.median(v) for c, v in rounds.items()}
    return {
        "confirmed": {c.label(): {"rounds": v, "median": med[c]} for c, v in rounds.items()},
        "tuned_throughput": med[pick],
        "confirmed_ratio": med[best] / med[pick] if med[pick] else None,
        "tuned_over_default_paired": paired_ratio(rounds[pick], rounds[default]),
        "best_over_default_paired": paired_ratio(rounds[best], rounds[default]),
    }


def grid(quick: bool) -> tuple[Any, Any]:
    """The tuning space and Ray Serve's default configuration (``max_ongoing_requests`` 5)."""
    from mlsysopt.serving.inputs import machine_threads, tuning_space
    from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING

    cores = machine_threads()
    space = tuning_space("rayserve", cores, knobs(quick))
    return space, replace(space.default(cores), max_ongoing=SERVE_DEFAULT_ONGOING)


def ray_engine(model: Any, name: str, workdir: Path, seed: int) -> Any:
    """A private local Ray Serve measuring ``model`` (windows of >= 1 s or 400 requests, probes ended at 3 s)."""
    from mlsysopt.serving.rayserve import RayServeEngine

    log = str(workdir / f"ray_{name}.log")
    return RayServeEngine(model, n_requests=400, window_s=1.0, max_seconds=3.0, slo_ms=SLO_MS, seed=seed, log=log)


def model_case(name: str, spec: str, quick: bool, workdir: Path, seed: int, rounds: int) -> dict[str, Any]:
    """Every figure of one model (see the module docstring)."""
    from mlsysopt.serving.inputs import ModelStage
    from mlsysopt.serving.objective import Objective

    space, default = grid(quick)
    objective = Objective("throughput", SLO_MS)
    budget = max(1, int(BUDGET_FRACTION * space.size))
    stage = ModelStage(spec, None, largest=16, instances=2)
    model = stage.model
    out: dict[str, Any] = {"model": spec, "space_size": space.size, "budget": budget, "slo_ms": SLO_MS}
    t0 = time.perf_counter()
    with ray_engine(model, name, workdir, seed) as engine:
        stable = decisive(engine)
        first = capacity_table(stable, [default], 40.0)[default]
        start = capacity_of(first) or 40.0
        print(f"{name}: Ray Serve's default serves {start:.0f} req/s within p99 {SLO_MS:g} ms")
        table = capacity_table(stable, [c for c in space if c != default], start)
        if default in space:
            table[default] = first
        caps = {c: capacity_of(m) for c, m in table.items()}
        scores = {c: objective.score(m) for c, m in table.items()}
        best = min(scores, key=scores.get)
        runs = {t: [replay(space, objective, table, start, s, t, budget) for s in range(SEEDS)] for t in TUNERS}
        pick = runs["rrl"][0]["pick"]
        if quick:  # no confirmation: the table's figures, as one round
            by_round = {c: [caps.get(c, capacity_of(first))] for c in (default, pick, best)}
        else:
            by_round = confirm(stable, [default, pick, best], start, seed, rounds)
        fig = confirmed(default, pick, best, by_round)
        out.update(
            table_throughput={c.label(): caps[c] for c in space},
            table_measurements={c.label(): m.to_dict() for c, m in table.items()},  # exact replays later
            default={"config": default.label(), "throughput_under_slo": statistics.median(by_round[default]),
                     "first": capacity_of(first)},
            best=best.label(),
            rrl_pick=pick.label(),
            to_5pct={t: [r["to_5pct"] for r in v] for t, v in runs.items()},
            _pick=pick.to_dict(),
            **fig,
        )  # fmt: skip
        print(f"  best {best.label()} {caps[best]:.0f} req/s; RRL@{budget} {pick.label()}; confirmed: default "
              f"{out['default']['throughput_under_slo']:.0f}, pick {out['tuned_throughput']:.0f} req/s")  # fmt: skip
        out["rayserve_s"] = time.perf_counter() - t0
        out["redeploys"] = dict(engine.redeploys)
    if not quick:
        out["home"] = home_transfer(model, out["table_throughput"], start, seed)
    folder = workdir / f"deploy_{name}"
    write_deploy(pick, model, folder)
    out["deploy"] = deploy_check(folder, pick, out["tuned_throughput"], SLO_MS)
    print(f"  deploy check of {pick.label()} at {out['tuned_throughput']:.0f} req/s: {out['deploy']}")
    stage.close()
    return out


def redo(name: str, kept: dict[str, Any], part: str, workdir: Path, seed: int, rounds: int) -> dict[str, Any]:
    """Step 3 and 5 (``part`` "confirm"), step 4 ("home") or step 5 ("deploy") again on a kept model's figures."""
    from mlsysopt.serving.inputs import ModelStage
    from mlsysopt.serving.space import Config

    space, default = grid(False)
    labels = {c.label(): c for c in [*space, default]}
    pick, best = Config.from_dict(kept["_pick"]), labels[kept["best"]]
    stage = ModelStage(MODELS[name], None, largest=16, instances=2)
    start = kept["default"]["first"] or 40.0
    folder = workdir / f"deploy_{name}"
    if part == "confirm":
        with ray_engine(stage.model, name, workdir, seed) as engine:
            by_round = confirm(decisive(engine), [default, pick, best], start, seed, rounds)
        kept.update(confirmed(default, pick, best, by_round))
        kept["default"]["throughput_under_slo"] = statistics.median(by_round[default])
        write_deploy(pick, stage.model, folder)
    if part == "home":
        kept["home"] = home_transfer(stage.model, kept["table_throughput"], start, seed)
    if part in ("confirm", "deploy"):
        kept["deploy"] = deploy_check(folder, pick, kept["tuned_throughput"], SLO_MS)
        print(f"  deploy check of {pick.label()}: {kept['deploy']}")
    stage.close()
    return kept


def home_transfer(model: Any, table: dict[str, float], start: float, seed: int) -> dict[str, Any]:
    """The grid without ``max_ongoing_requests`` searched on mlsysopt's own engine; its best on Ray Serve (with Ray
    Serve's default ``max_ongoing_requests`` 5, read from ``table``: label -> req/s) against Ray Serve's best."""
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.inputs import machine_threads, tuning_space
    from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING

    t1 = time.perf_counter()
    cores = machine_threads()
    home_space = tuning_space("real", cores, {k: v for k, v in knobs(False).items() if k != "max_ongoing"})
    with Engine(model, n_requests=400, max_seconds=3.0, max_threads=cores, seed=seed, window_s=1.0) as home:
        # the home engine has no HTTP hop: it serves many times Ray Serve's rate, so the search may double 10 times
        htable = capacity_table(decisive(home), list(home_space), start, doublings=10)
    home_best = max(htable, key=lambda c: capacity_of(htable[c]))
    on_serve = replace(home_best, max_ongoing=SERVE_DEFAULT_ONGOING).label()
    return {
        "table_throughput": {c.label(): capacity_of(m) for c, m in htable.items()},
        "best": on_serve,
        "on_rayserve": table[on_serve],
        "transfer_ratio": max(table.values()) / table[on_serve] if table[on_serve] else None,
        "seconds": time.perf_counter() - t1,
    }


def tune_seconds(engine: str, workdir: Path) -> dict[str, Any]:
    """``serving tune --budget 3`` with the defaults on ``engine``: wall clock and what it answered."""
    out = workdir / f"tune_budget3_{engine}"
    cmd = [sys.executable, "-m", "mlsysopt.cli", "serving", "tune", "--engine", engine, "--model", "zoo:cnn",
           "--rate", "50", "--budget", "3", "--out", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - t0
    result = json.loads((out / "result.json").read_text()) if proc.returncode == 0 else {}
    return {"seconds": seconds, "rc": proc.returncode, "verdict": result.get("verdict", {}).get("decision")}


def summarize(models: dict[str, Any], tunes: dict[str, Any]) -> dict[str, Any]:
    """The issue's JSON keys from the per-model figures (keys ``model@SLO``: the throughput objective has no rate)."""
    key = {n: f"{n}@p99<={SLO_MS:g}ms" for n in models}
    to5 = {t: [x if x is not None else 10**6 for m in models.values() for x in m["to_5pct"][t]] for t in TUNERS}
    defaults = {key[n]: m["default"]["throughput_under_slo"] for n, m in models.items()}
    tuned = {key[n]: m["tuned_throughput"] for n, m in models.items()}
    return {
        "slo_ms": SLO_MS,
        "objective": "throughput under the SLO (req/s)",
        "default_throughput": defaults,
        "tuned_throughput": tuned,
        "tuned_over_default": {k: tuned[k] / defaults[k] if defaults[k] else None for k in tuned},
        "confirmed_ratio": {key[n]: m["confirmed_ratio"] for n, m in models.items()},
        "tuned_over_default_paired": {key[n]: m.get("tuned_over_default_paired") for n, m in models.items()},
        "evals_fraction": {key[n]: m["budget"] / m["space_size"] for n, m in models.items()},
        "measurements_to_5pct": {t: statistics.median(v) for t, v in to5.items()},
        "deploy_check": {key[n]: m["deploy"]["ok"] for n, m in models.items()},
        "home_engine_transfer": {key[n]: m["home"]["transfer_ratio"] for n, m in models.items() if "home" in m},
        "tune_seconds_budget3": {k: v["seconds"] for k, v in tunes.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serving_rayserve.json"))
    parser.add_argument("--work", type=Path, default=Path("runs/bench/serving_rayserve"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="confirmation rounds (step 3)")
    parser.add_argument("--models", default="cnn" if "--quick" in sys.argv else ",".join(MODELS))
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--confirm-only", action="store_const", const="confirm", dest="only", help="redo steps 3 and 5")
    only.add_argument("--home-only", action="store_const", const="home", dest="only", help="redo step 4")
    only.add_argument("--deploy-only", action="store_const", const="deploy", dest="only", help="redo step 5")
    args = parser.parse_args()
    from mlsysopt.io import read_json, write_json_atomic

    args.work.mkdir(parents=True, exist_ok=True)
    load = {"before": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t0 = time.perf_counter()
    models = {}
    for name in args.models.split(","):
        path = args.work / f"{name}{'_quick' if args.quick else ''}.json"
        if path.is_file():
            models[name] = read_json(path)
            print(f"{name}: kept from {path}")
            if args.only:
                models[name] = redo(name, models[name], args.only, args.work, args.seed, args.rounds)
                write_json_atomic(path, models[name])
            continue
        models[name] = model_case(name, MODELS[name], args.quick, args.work, args.seed, args.rounds)
        write_json_atomic(path, models[name])
    earlier: dict[str, Any] = {}
    if args.only and args.out.is_file():  # the tune timings, time and load of the run the models come from
        previous = read_json(args.out)
        tunes = previous.get("tunes", {})
        earlier = {"models_run": previous.get("models_run", {"seconds": previous["seconds"], "load": previous["load"]})}
        load["only"] = args.only
    else:
        tunes = {} if args.quick else {e: tune_seconds(e, args.work) for e in ("real", "rayserve")}
    result = {
        **summarize(models, tunes),
        "models": models,
        "tunes": tunes,
        "seconds": time.perf_counter() - t0,
        "load": {**load, "after": os.getloadavg()},
        "quick": args.quick,
        **earlier,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("models", "tunes")}, indent=1, default=str))


if __name__ == "__main__":
    main()
