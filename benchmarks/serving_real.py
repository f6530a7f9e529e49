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
    """The latency case and the case where tuning matters; the contract keys at the top level."""
    out = latency_case(args, workdir)
    out["real"]["matters"] = matters_case(args, workdir)
    return out


def latency_case(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Noise, exhaustive vs RRL (both confirmed), and the calibrated simulator against every confirmed value."""
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.experiment import calibrate_dispatch, measure_profile
    from mlsysopt.serving.inputs import machine_threads, resolve_model
    from mlsysopt.serving.simulator import SimulatedEngine

    cores = machine_threads()
    model, _ = resolve_model("zoo:resnet", workdir, largest=16, instances=cores)
    t0 = time.perf_counter()
    profile, samples = measure_profile(model, (1, 2, 4, 8, 16), (1, 2), (1, 2), repeats=5, cores=cores, name="resnet")
    profile, dispatch = calibrate_dispatch(model, profile, seed=args.seed)
    profile_s = time.perf_counter() - t0
    if args.quick:
        space = Space(
            instances=(1, 2),
            max_batch=(1, 4, 16),
            batch_timeout_ms=(0.0, 2.0),
            intra_threads=(1, 2),
            inter_threads=(1,),
            execution_mode=(0,),
            max_threads=cores,
        )
    else:
        space = Space.for_machine(cores, max_batch=(1, 2, 4, 8, 16))
    rate = round(0.7 * 1000.0 / profile.service_ms(1, 1, 1), -1)
    workload, objective = Workload(rate), Objective("latency")
    n_req = 100 if args.quick else 150
    stability = {"count": 3, "tolerance": 0.10, "max_windows": 4 if args.quick else 5}
    print(
        f"real: {space.size} configurations ({space.raw_size} before merging) at {rate:g} req/s, {n_req} requests "
        f"per window; profile fit error {profile.fit_error(samples):.1%}, dispatch {profile.dispatch_ms:.3g} ms"
    )
    default = space.default(cores)
    with Engine(model, n_requests=n_req, max_seconds=10.0, max_threads=cores, seed=args.seed) as engine:
        stable = StableBackend(engine, **stability)
        noise = measure_noise(engine, default, workload, windows=5)
        t1 = time.perf_counter()
        table = {c: stable.measure(c, workload) for c in space}
        exhaustive_s = time.perf_counter() - t1
        budget = max(1, math.floor(0.25 * space.size))
        t2 = time.perf_counter()
        with torch_threads(1):
            res = tune(get_tuner("rrl", space, objective, seed=args.seed), stable, [(workload, budget)])
        ans = res.per_rate[-1]
        scores = {c: objective.score(m) for c, m in ans.measured.items()}
        own = confirm(stable, ans.ranked(objective)[:3], default, workload, objective, 3, scores)
        rrl_s = time.perf_counter() - t2
        rrl_pick = own.pick.config
        top5 = sorted(table, key=lambda c: objective.score(table[c]))[:5]
        t3 = time.perf_counter()
        side = confirm(
            stable, [*top5, rrl_pick], default, workload, objective, 3, {c: objective.score(table[c]) for c in table}
        )
        confirm_s = time.perf_counter() - t3
    by = {c.config: c for c in side.candidates}
    ex_best = min(top5, key=lambda c: by[c].value)
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
            "exhaustive_min_ms": objective.score(table[top5[0]]),
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


def matters_case(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Throughput within a p99 SLO where the default saturates (see the module docstring)."""
    raise NotImplementedError
