"""The real part of the serving benchmark (``benchmarks/serving.py``): ONNX Runtime on this machine, measured.

Run it alone (``/work/team/cpu exclusive`` or any quiet machine): every figure here is a timing.

* :func:`latency_case` — the earlier rounds' case: the zoo ResNet at ~70% load, mean latency; exhaustive sweep vs
  RRL (25% of the measurements), both confirmed interleaved, and the calibrated simulator against every confirmed
  value (``sim_vs_real_rel_err``).
* :func:`matters_case` — ``real.matters``: throughput within a p99 SLO where ONNX Runtime's default saturates.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.confirmation import confirm, measure_noise
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Space, Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning import tune
from mlsysopt.serving.windows import StableBackend


def _p90(values: list[float]) -> float | None:
    return sorted(values)[int(0.9 * (len(values) - 1))] if values else None


def real_part(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The latency case and the case where tuning matters; the contract keys at the top level.

    Each case is kept in ``workdir`` when it finishes (with the load average around it), so a killed run resumes
    at the case it was in; ``--fresh-real`` measures both again.
    """
    from mlsysopt.io import read_json, write_json_atomic

    cases = {}
    for name, fn in (("latency", latency_case), ("matters", matters_case)):
        path = workdir / f"real_{name}{'_quick' if args.quick else ''}.json"
        if path.is_file() and not args.fresh_real:
            cases[name] = read_json(path)
            print(f"real {name}: kept from {path} (--fresh-real measures it again)")
            continue
        load_before = os.getloadavg()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        figures = fn(args, workdir)
        figures["_load"] = {"started": started, "before": load_before, "after": os.getloadavg()}
        write_json_atomic(path, figures)
        cases[name] = figures
    out = cases["latency"]
    out["real"]["matters"] = cases["matters"]
    out["real"]["load"] = {k: v["_load"] for k, v in cases.items() if "_load" in v}
    return out


def latency_case(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Noise, exhaustive vs RRL (both confirmed), and the calibrated simulator against every confirmed value."""
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.inputs import machine_threads, resolve_model
    from mlsysopt.serving.profiling import calibrate_dispatch, measure_profile
    from mlsysopt.serving.simulator import SimulatedEngine

    cores = machine_threads()
    model, _ = resolve_model("zoo:resnet", workdir, largest=16, instances=cores)
    t0 = time.perf_counter()
    repeats = 3 if args.quick else 5
    profile, samples = measure_profile(
        model, (1, 2, 4, 8, 16), (1, 2), (1, 2), repeats=repeats, cores=cores, name="resnet"
    )
    profile, dispatch = calibrate_dispatch(model, profile, seed=args.seed)
    profile_s = time.perf_counter() - t0
    if args.quick:
        space = Space(
            instances=(1, 2),
            max_batch=(1, 16),
            batch_timeout_ms=(2.0,),
            intra_threads=(1, 2),
            inter_threads=(1,),
            execution_mode=(0,),
            max_threads=cores,
        )
    else:
        space = Space.for_machine(cores, max_batch=(1, 2, 4, 8, 16))
    rate = round(0.7 * 1000.0 / profile.service_ms(1, 1, 1), -1)
    workload, objective = Workload(rate), Objective("latency")
    # --quick (a smoke run of every step, ~2 min in all): 8 configurations, shorter windows, the top 3 confirmed in
    # 2 rounds
    n_req = 40 if args.quick else 150
    stability = {"count": 3, "tolerance": 0.10, "max_windows": 3 if args.quick else 5}
    top, own_top, rounds = (3, 1, 2) if args.quick else (5, 3, 3)  # table's top, RRL's top confirmed, rounds
    print(
        f"real: {space.size} configurations ({space.raw_size} before merging) at {rate:g} req/s, {n_req} requests "
        f"per window; profile fit error {profile.fit_error(samples):.1%}, dispatch {profile.dispatch_ms:.3g} ms"
    )
    default = space.default(cores)
    with Engine(model, n_requests=n_req, max_seconds=10.0, max_threads=cores, seed=args.seed) as engine:
        stable = StableBackend(engine, **stability)
        noise = measure_noise(engine, default, workload, windows=3 if args.quick else 5)
        t1 = time.perf_counter()
        table = {c: stable.measure(c, workload) for c in space}
        exhaustive_s = time.perf_counter() - t1
        budget = max(1, math.floor(0.25 * space.size))
        t2 = time.perf_counter()
        with torch_threads(1):
            res = tune(get_tuner("rrl", space, objective, seed=args.seed), stable, [(workload, budget)])
        ans = res.per_rate[-1]
        scores = {c: objective.score(m) for c, m in ans.measured.items()}
        own = confirm(stable, ans.ranked(objective)[:own_top], default, workload, objective, rounds, scores)
        rrl_s = time.perf_counter() - t2
        rrl_pick = own.pick.config
        top_table = sorted(table, key=lambda c: objective.score(table[c]))[:top]
        t3 = time.perf_counter()
        table_scores = {c: objective.score(table[c]) for c in table}
        side = confirm(stable, [*top_table, rrl_pick], default, workload, objective, rounds, table_scores)
        confirm_s = time.perf_counter() - t3
    by = {c.config: c for c in side.candidates}
    ex_best = min(top_table, key=lambda c: by[c].value)
    ratio = by[rrl_pick].value / by[ex_best].value
    # the simulator calibrated to this engine against every confirmed real value (both confirmations)
    sim = SimulatedEngine(profile, n_requests=n_req, seed=args.seed)
    sim_stable = StableBackend(sim, **stability)
    compared = []
    for conf in (side, own):
        for c in conf.candidates:
            s = sim_stable.measure(c.config, workload)
            compared.append(
                {
                    **c.config.to_dict(),
                    "confirmed_real_ms": c.value,
                    "sim_ms": s.mean_ms,
                    "rel_err": abs(s.mean_ms - c.value) / c.value,
                    "sim_saturated": s.saturated,
                }
            )
    errs = [r["rel_err"] for r in compared]
    table_errs = []
    for c, m in table.items():
        s = sim.measure(c, workload)
        if not (m.saturated or s.saturated):
            table_errs.append(abs(s.mean_ms - m.mean_ms) / m.mean_ms)
    out = {
        "space_size": space.size,
        "space_raw_size": space.raw_size,
        "rate": rate,
        "requests_per_window": n_req,
        "stability": stability,
        "noise_cv": noise["cv_mean_ms"],
        "noise": noise,
        "exhaustive_measurements": len(table),
        "exhaustive_windows": sum(m.windows for m in table.values()),
        "exhaustive_unstable": sum(not m.stable for m in table.values()),
        "exhaustive_single_pass_best": ex_best.to_dict(),
        "rrl_evals": len(res.steps),
        "rrl_evals_fraction": len(res.steps) / space.size,
        "rrl_confirmation_measurements": len(own.measurements),
        "rrl_search_best": ans.best.to_dict(),
        "rrl_pick": rrl_pick.to_dict(),
        "rrl_own_confirmation": own.to_dict(objective),
        "confirmation": side.to_dict(objective),
        "confirmed_ratio": ratio,
        "confirmed_rrl_ms": by[rrl_pick].value,
        "confirmed_exhaustive_best_ms": by[ex_best].value,
        "confirmed_exhaustive_best": ex_best.to_dict(),
        "confirmed_default_ms": next(c.value for c in side.candidates if c.config == default),
        "single_pass": {
            "exhaustive_min_ms": objective.score(table[top_table[0]]),
            "rrl_pick_ms": objective.score(table[rrl_pick]),
        },
        "sim_compared": compared,
        "sim_rel_err_p90": _p90(errs),
        "sim_vs_exhaustive_table": {
            "median": statistics.median(table_errs) if table_errs else None,
            "p90": _p90(table_errs),
            "configs": len(table_errs),
        },
        "profile": profile.to_dict(),
        "profile_fit_error": profile.fit_error(samples),
        "profile_warnings": profile.warnings(),
        "dispatch_calibration": dispatch,
        "seconds": {
            "profile": profile_s,
            "exhaustive": exhaustive_s,
            "rrl_with_confirmation": rrl_s,
            "side_by_side_confirmation": confirm_s,
        },
        "load_average_1m_at_end": os.getloadavg()[0],
        "table": [
            {
                **c.to_dict(),
                "mean_ms": m.mean_ms,
                "mean_ci": m.ci.get("mean_ms"),
                "p99_ms": m.p99_ms,
                "windows": m.windows,
                "stable": m.stable,
                "saturated": m.saturated,
            }
            for c, m in table.items()
        ],
    }
    sim_err = statistics.median(errs) if errs else math.nan
    print(
        f"  noise CV {noise['cv_mean_ms']:.1%}; confirmed: exhaustive best {by[ex_best].value:.2f} ms, RRL "
        f"{by[rrl_pick].value:.2f} ms (ratio {ratio:.3f}) after {len(res.steps)} measurements; sim median "
        f"error {sim_err:.1%} (p90 {out['sim_rel_err_p90']:.1%})"
    )
    return {"real": out, "sim_vs_real_rel_err": sim_err, "sim_vs_real_rel_err_p90": out["sim_rel_err_p90"]}


MATTERS_MODEL = "serving_models.py:mlp_wide"  # a held-out model (no history of the shipped prior is of it)


def matters_case(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Throughput within a p99 SLO from a rate where the default saturates: exhaustive vs RRL warm, confirmed."""
    from mlsysopt.serving.capacity import CapacityBackend
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.inputs import machine_threads, resolve_model
    from mlsysopt.serving.prior import preset_prior
    from mlsysopt.serving.tuning_phases import probe_profile

    cores = machine_threads()
    spec = str(Path(__file__).resolve().parent / MATTERS_MODEL)
    model, _ = resolve_model(spec, workdir, largest=32, instances=cores)
    t0 = time.perf_counter()
    task = probe_profile(model, cores, args.seed)
    probe_s = time.perf_counter() - t0
    default_capacity = 1000.0 / (task.service_ms(1, cores, 1) + task.dispatch_ms)  # req/s, one row per batch
    rate = round(2.0 * default_capacity, -1)  # the default cannot keep up with this
    slo = round(max(10.0, 25.0 * task.service_ms(1, 1, 1)), 1)
    objective = Objective("throughput", slo_ms=slo)
    if args.quick:
        space = Space(instances=(1, 2), max_batch=(1, 32), batch_timeout_ms=(2.0,), intra_threads=(1, 2),
                      inter_threads=(1,), execution_mode=(0,), max_threads=cores)  # fmt: skip
    else:
        space = Space.for_machine(cores, max_batch=(1, 2, 4, 8, 16, 32))
    n_req = 40 if args.quick else 200
    stability = {"count": 3, "tolerance": 0.10, "max_windows": 3 if args.quick else 4}
    top, own_top, rounds, bisections = (3, 1, 2, 1) if args.quick else (5, 3, 3, 2)
    workload, default = Workload(rate), space.default(cores)
    budget = max(1, math.floor(0.25 * space.size))
    print(f"real matters: {model.path.name}, {space.size} configurations, throughput within p99 <= {slo:g} ms from "
          f"{rate:g} req/s (the default serves ~{default_capacity:.0f} req/s with one row per batch)")  # fmt: skip
    prior = preset_prior().bind(task)
    with Engine(model, n_requests=n_req, max_seconds=10.0, slo_ms=slo, max_threads=cores, seed=args.seed) as engine:
        backend = CapacityBackend(StableBackend(engine, **stability), slo, doublings=5, bisections=bisections)
        t1 = time.perf_counter()
        table = {c: backend.measure(c, workload) for c in space}
        exhaustive_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        with torch_threads(1):
            res = tune(get_tuner("rrl", space, objective, seed=args.seed, prior=prior), backend, [(workload, budget)])
        ans = res.per_rate[-1]
        scores = {c: objective.score(m) for c, m in ans.measured.items()}
        own = confirm(backend, ans.ranked(objective)[:own_top], default, workload, objective, rounds, scores)
        rrl_s = time.perf_counter() - t2
        pick = own.pick.config
        top_table = sorted(table, key=lambda c: objective.score(table[c]))[:top]
        t3 = time.perf_counter()
        side = confirm(backend, [*top_table, pick], default, workload, objective, rounds,
                       {c: objective.score(m) for c, m in table.items()})  # fmt: skip
        confirm_s = time.perf_counter() - t3
    by = {c.config: c for c in side.candidates}
    best = min(top_table, key=lambda c: by[c].value)
    # the simulator calibrated to this engine (a full profile and the engine's overheads) against the confirmed values
    from mlsysopt.serving.profiling import calibrate_dispatch, measure_profile
    from mlsysopt.serving.simulator import SimulatedEngine

    repeats = 3 if args.quick else 5
    prof, _ = measure_profile(model, (1, 2, 4, 8, 16, 32), (1, 2), (1, 2), repeats, cores, model.path.name)
    prof, _ = calibrate_dispatch(model, prof, seed=args.seed)
    sim = CapacityBackend(StableBackend(SimulatedEngine(prof, n_requests=n_req, seed=args.seed), **stability), slo,
                          doublings=5, bisections=bisections)  # fmt: skip
    compared = []
    for c in side.candidates:
        s = objective.score(sim.measure(c.config, workload))
        if not objective.missed(s) and not objective.missed(c.value):
            compared.append({**c.config.to_dict(), "confirmed_real_ms": c.value, "sim_ms": s,
                             "rel_err": abs(s - c.value) / c.value})  # fmt: skip
    errs = [r["rel_err"] for r in compared]
    out = {
        "model": model.path.name,
        "sim_compared": compared,
        "sim_vs_real_rel_err": statistics.median(errs) if errs else None,
        "data": "real: ONNX Runtime on this machine; RRL warm-started from the shipped prior (histories of the "
        "tuning presets, simulated; this model is held out)",
        "objective": objective.to_dict(),
        "rate": rate,
        "slo_ms": slo,
        "space_size": space.size,
        "task_profile": task.to_dict(),
        "default_ms": by[default].value,
        "best_ms": by[best].value,
        "rrl_ms": by[pick].value,
        "confirmed_ratio": by[pick].value / by[best].value,
        "default_over_best": by[default].value / by[best].value,
        "evals_fraction": len(res.steps) / space.size,
        "rrl_evals": len(res.steps),
        "default_throughput": 1000.0 / by[default].value,
        "best_throughput": 1000.0 / by[best].value,
        "rrl_throughput": 1000.0 / by[pick].value,
        "best": best.to_dict(),
        "rrl_pick": pick.to_dict(),
        "rrl_first": res.steps[0].config.to_dict(),
        "prior_top": [c.to_dict() for c in prior.ranked(space, workload, objective, 5)],
        "confirmation": side.to_dict(objective),
        "rrl_own_confirmation": own.to_dict(objective),
        "seconds": {
            "probe": probe_s,
            "exhaustive": exhaustive_s,
            "rrl_with_confirmation": rrl_s,
            "side_by_side_confirmation": confirm_s,
        },
        "table": [
            {
                **c.to_dict(),
                "throughput": 1000.0 / objective.score(m) if not objective.missed(objective.score(m)) else None,
                "at_rate": m.extra.get("at_rate"),
                "p99_ms": m.p99_ms,
            }
            for c, m in table.items()
        ],
        "load_average_1m_at_end": os.getloadavg()[0],
    }
    print(f"  confirmed: default {out['default_throughput']:.0f} req/s, best {out['best_throughput']:.0f}, RRL "
          f"{out['rrl_throughput']:.0f} (ratio {out['confirmed_ratio']:.3f}, default {out['default_over_best']:.2f}x "
          f"off) with {out['evals_fraction']:.0%} of the measurements")  # fmt: skip
    return out
