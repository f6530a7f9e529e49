"""Serving on Ray Serve (issue #33): the tuned deployment against Ray Serve's defaults, measured over HTTP here.

Run it alone on a quiet machine: every figure is a timing. Per model (the zoo CNN, a tiny ViT and a wide MLP from
``benchmarks/serving_models.py``):

1. **Ray Serve's default** (1 replica, no batching, ONNX Runtime's own threads): its throughput under the p99 SLO
   (a rate search, :class:`~mlsysopt.serving.capacity.CapacityBackend`); the two tuned rates are 0.6x and 1.2x it
   (the second beyond what the default serves within the SLO).
2. **Exhaustive** table of a 16-configuration grid (replicas, max batch, intra-op threads and Ray Serve's
   ``max_ongoing_requests``) at both rates on Ray Serve (stable windows; each configuration deployed once and
   measured at both rates), objective p99 under the SLO; the tuners (RRL, GP, TPE, hill climb; 5 seeds) replay the
   table: measurements to within 5% of the exhaustive best (``measurements_to_5pct``), and RRL's pick after 4
   measurements (25% of the grid), confirmed against the exhaustive best (interleaved, 3 rounds:
   ``confirmed_ratio`` = pick / best p99).
3. **Tuned throughput**: the pick's throughput under the SLO (the same rate search as the default's; once per
   distinct pick).
4. **Home-engine transfer**: the same grid on mlsysopt's own ONNX Runtime engine (which has no max ongoing requests:
   its 8 configurations); its best configuration's p99 on Ray Serve, deployed with Ray Serve's default
   ``max_ongoing_requests`` 5, over Ray Serve's best (does a configuration tuned on the home engine transfer?).
5. **Deploy check**: the pick written as ``serve_config.yaml`` + the application module, deployed by Ray Serve's
   own ``serve run`` (once per distinct pick), the knobs read back from the replica and the p99 at each rate it was
   picked for measured over HTTP against the SLO.
6. ``tune_seconds_budget3``: ``mlsysopt serving tune --budget 3`` with the defaults, per engine, wall clock.

``--quick``: the CNN at the higher rate only on an 8-configuration grid (two intra-op threads), one deploy check, no
tune timing (~3 min). Each model is kept in the work folder as it finishes (a killed run resumes at the next model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

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
    """The grid: replicas, max batch, one batch timeout, intra-op threads, max ongoing requests (16 configurations; 8
    with --quick, at 2 intra-op threads). Max batch 16 of the earlier 12-configuration grid was never the best there:
    max ongoing requests took its place."""
    return {
        "instances": (1, 2),
        "max_batch": (1, 4),
        "batch_timeout_ms": (5.0,),
        "intra_threads": (2,) if quick else (1, 2),
        "inter_threads": (1,),
        "execution_mode": (0,),
        "max_ongoing": ONGOING,
    }


def capacity(stable: Any, config: Any, start: float) -> float:
    """Highest rate (req/s) with p99 <= SLO and no saturation (doubling from ``start``, then bisection)."""
    from mlsysopt.serving.capacity import CapacityBackend
    from mlsysopt.serving.space import Workload

    m = CapacityBackend(stable, SLO_MS, doublings=5, bisections=2).measure(config, Workload(start))
    ok = m.p99_ms <= SLO_MS and not m.saturated
    return float(m.extra.get("at_rate", start)) if ok else 0.0


def tables(stable: Any, space: Any, rates: list[float]) -> dict[float, dict[Any, Any]]:
    """Every configuration of ``space`` at every rate: stable measurements, each configuration deployed once."""
    from mlsysopt.serving.space import Workload

    # grouped by CPUs per replica: Ray Serve restarts replicas only when num_cpus changes (the rest is in place)
    order = sorted(space, key=lambda c: (c.threads_per_instance, c.instances, c.max_batch, c.ongoing))
    out: dict[float, dict[Any, Any]] = {rate: {} for rate in rates}
    for c in order:
        for rate in rates:
            out[rate][c] = stable.measure(c, Workload(rate))
    return out


def replay(space: Any, objective: Any, measured: dict, rate: float, seed: int, tuner: str, budget: int) -> dict:
    """A tuner against the measured table: measurements to within 5% of the table's best, and its pick at ``budget``."""
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.space import Workload
    from mlsysopt.serving.tuners import get_tuner
    from mlsysopt.serving.tuning import evals_to_within, tune

    class Table(Backend):
        cores = os.cpu_count() or 1

        def measure(self, config, workload, window=0):
            return measured[config]

    scores = {c: objective.score(m) for c, m in measured.items()}
    best = min(scores.values())
    res = tune(get_tuner(tuner, space, objective, seed=seed), Table(), [(Workload(rate), space.size)])
    return {
        "to_5pct": evals_to_within(res.steps, scores, best, 0.05),
        "pick": res.steps[budget - 1].best_config,
    }


def confirm_pair(stable: Any, pick: Any, best: Any, rate: float, objective: Any, rounds: int = 3) -> dict:
    """Pick and exhaustive best re-measured interleaved; medians of the p99 scores and their ratio."""
    from mlsysopt.serving.space import Workload

    configs = [pick] if pick == best else [pick, best]
    values: dict[Any, list[float]] = {c: [] for c in configs}
    for k in range(rounds):
        for c in configs if k % 2 == 0 else configs[::-1]:
            values[c].append(objective.score(stable.measure(c, Workload(rate), window=100 + k)))
    med = {c: statistics.median(v) for c, v in values.items()}
    return {"pick_p99_ms": med[pick], "best_p99_ms": med[best], "ratio": med[pick] / med[best]}


def deploy_check(folder: Path, config: Any, rates: list[float]) -> dict[float, dict[str, Any]]:
    """Deploy ``folder/serve_config.yaml`` with Ray Serve's own ``serve run``; knobs read back, p99 over HTTP at each
    rate."""
    from mlsysopt.errors import MlsysoptError
    from mlsysopt.serving.rayserve_config import deployment_options
    from mlsysopt.serving.rayserve_deploy import ServeRun
    from mlsysopt.serving.rayserve_driver import http_p99_ms

    try:
        with ServeRun(folder) as run:
            info = run.info
            opts = deployment_options(config)
            user = opts["user_config"]
            knobs_ok = (
                info["batching"]["max_batch_size"] == user["max_batch_size"]
                and info["session"]["intra_op_num_threads"] == user["intra_op_num_threads"]
                and info.get("ongoing") in (None, opts["max_ongoing_requests"])
            )
            # a fresh Ray (its dashboard and agents starting on the same cores) settles and the replicas warm up
            # first, as the tune's own engine did before its windows
            time.sleep(5.0)
            out = {}
            for rate in rates:
                http_p99_ms(run.port, folder / "model.onnx", rate=rate, seconds=3.0)
                p99 = http_p99_ms(run.port, folder / "model.onnx", rate=rate, seconds=3.0, seed=1)
                out[rate] = {
                    "deployed": True,
                    "start_s": round(run.start_s, 1),
                    "knobs_match": knobs_ok,
                    "ongoing": info.get("ongoing"),
                    "p99_ms": p99,
                    "ok": bool(knobs_ok and p99 <= SLO_MS),
                }
            return out
    except MlsysoptError as exc:
        return {rate: {"deployed": False, "ok": False, "why": str(exc)} for rate in rates}


def model_case(name: str, spec: str, quick: bool, workdir: Path, seed: int) -> dict[str, Any]:
    """Every figure of one model (see the module docstring)."""
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.inputs import ModelStage, machine_threads, tuning_space
    from mlsysopt.serving.objective import Objective
    from mlsysopt.serving.rayserve import RayServeEngine
    from mlsysopt.serving.rayserve_config import model_inputs, write_deployment
    from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING, Config
    from mlsysopt.serving.windows import StableBackend

    cores = machine_threads()
    space = tuning_space("rayserve", cores, knobs(quick))
    objective = Objective("latency", SLO_MS, "p99")
    budget = max(1, int(BUDGET_FRACTION * space.size))
    default = space.default(cores)
    stage = ModelStage(spec, None, largest=16, instances=2)
    model = stage.model
    out: dict[str, Any] = {"model": spec, "space_size": space.size, "budget": budget, "per_rate": {}}
    t0 = time.perf_counter()
    log = str(workdir / f"ray_{name}.log")
    with RayServeEngine(model, n_requests=400, window_s=1.0, slo_ms=SLO_MS, seed=seed, log=log) as engine:
        stable = StableBackend(engine)
        cap_default = capacity(stable, default, 20.0)
        out["default"] = {"config": default.label(), "throughput_under_slo": cap_default}
        rates = (
            [max(5.0, round(1.2 * cap_default))] if quick else [max(5.0, round(f * cap_default)) for f in (0.6, 1.2)]
        )
        print(f"{name}: Ray Serve's default serves {cap_default:.0f} req/s within p99 {SLO_MS:g} ms; rates {rates}")
        measured = tables(stable, space, rates)
        caps: dict[Any, float] = {}  # the pick's throughput under the SLO: once per distinct pick
        for rate in rates:
            scores = {c: objective.score(m) for c, m in measured[rate].items()}
            best = min(scores, key=scores.get)
            runs = {
                t: [replay(space, objective, measured[rate], rate, s, t, budget) for s in range(SEEDS)] for t in TUNERS
            }
            pick = runs["rrl"][0]["pick"]
            conf = confirm_pair(stable, pick, best, rate, objective)
            if pick not in caps:
                caps[pick] = capacity(stable, pick, rate)
            out["per_rate"][f"{rate:g}"] = {
                "table_p99_ms": {c.label(): scores[c] for c in space},
                "best": best.label(),
                "rrl_pick": pick.label(),
                "to_5pct": {t: [r["to_5pct"] for r in v] for t, v in runs.items()},
                "confirmed": conf,
                "tuned_throughput": caps[pick],
                "_pick": pick.to_dict(),
                "_best": best.to_dict(),
            }
            print(f"  {rate:g} req/s: best {best.label()} {scores[best]:.2f} ms; RRL@{budget} {pick.label()} "
                  f"confirmed x{conf['ratio']:.3f}; tuned throughput {caps[pick]:.0f} req/s")  # fmt: skip
        out["rayserve_s"] = time.perf_counter() - t0
        out["redeploys"] = dict(engine.redeploys)
    if not quick:
        t1 = time.perf_counter()
        # the home engine has no max ongoing requests: its grid is the six shared knobs, and its pick is deployed on
        # Ray Serve with Ray Serve's default (5)
        home_space = tuning_space("real", cores, {k: v for k, v in knobs(quick).items() if k != "max_ongoing"})
        with Engine(model, n_requests=400, max_seconds=10.0, max_threads=cores, seed=seed, window_s=1.0) as home:
            home_tables = tables(StableBackend(home), home_space, rates)
        for rate in rates:
            htable = {c: objective.score(m) for c, m in home_tables[rate].items()}
            home_best = replace(min(htable, key=htable.get), max_ongoing=SERVE_DEFAULT_ONGOING)
            rs = out["per_rate"][f"{rate:g}"]["table_p99_ms"]
            out["per_rate"][f"{rate:g}"]["home"] = {
                "best": home_best.label(),
                "transfer_ratio": rs[home_best.label()] / min(rs.values()),
            }
        out["home_s"] = time.perf_counter() - t1
    checked = rates if not quick else rates[:1]
    picks: dict[Config, list[float]] = {}  # one `serve run` per distinct pick, measured at each rate it was picked
    for rate in checked:
        picks.setdefault(Config.from_dict(out["per_rate"][f"{rate:g}"]["_pick"]), []).append(rate)
    for k, (pick, at) in enumerate(picks.items()):
        folder = workdir / f"deploy_{name}_{k}"
        write_deployment(pick, model.path, model_inputs(model), folder)
        for rate, check in deploy_check(folder, pick, at).items():
            out["per_rate"][f"{rate:g}"]["deploy"] = check
            print(f"  deploy check of {pick.label()} at {rate:g} req/s: {check}")
    stage.close()
    return out


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
    """The issue's JSON keys from the per-model figures."""
    keyed = {f"{n}@{r}": (m, e) for n, m in models.items() for r, e in m["per_rate"].items()}
    to5 = {t: [x if x is not None else 10**6 for _, e in keyed.values() for x in e["to_5pct"][t]] for t in TUNERS}
    defaults = {n: m["default"]["throughput_under_slo"] for n, m in models.items()}
    tuned = {k: e["tuned_throughput"] for k, (_, e) in keyed.items()}
    best_tuned = {n: max(e["tuned_throughput"] for e in m["per_rate"].values()) for n, m in models.items()}
    return {
        "slo_ms": SLO_MS,
        "default_throughput": defaults,
        "tuned_throughput": tuned,
        "tuned_over_default": {n: best_tuned[n] / defaults[n] if defaults[n] else None for n in models},
        "confirmed_ratio": {k: e["confirmed"]["ratio"] for k, (_, e) in keyed.items()},
        "evals_fraction": {n: m["budget"] / m["space_size"] for n, m in models.items()},
        "measurements_to_5pct": {t: statistics.median(v) for t, v in to5.items()},
        "deploy_check": {k: e["deploy"]["ok"] for k, (_, e) in keyed.items() if "deploy" in e},
        "home_engine_transfer": {k: e["home"]["transfer_ratio"] for k, (_, e) in keyed.items() if "home" in e},
        "tune_seconds_budget3": {k: v["seconds"] for k, v in tunes.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serving_rayserve.json"))
    parser.add_argument("--work", type=Path, default=Path("runs/bench/serving_rayserve"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", default="cnn" if "--quick" in sys.argv else ",".join(MODELS))
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
            continue
        models[name] = model_case(name, MODELS[name], args.quick, args.work, args.seed)
        write_json_atomic(path, models[name])
    tunes = {} if args.quick else {e: tune_seconds(e, args.work) for e in ("real", "rayserve")}
    result = {
        **summarize(models, tunes),
        "models": models,
        "tunes": tunes,
        "seconds": time.perf_counter() - t0,
        "load": {**load, "after": os.getloadavg()},
        "quick": args.quick,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("models", "tunes")}, indent=1, default=str))


if __name__ == "__main__":
    main()
