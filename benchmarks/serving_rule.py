"""The validation study behind ``serving tune``'s default tuner (issue 34): every tuner on the *tuning* presets.

Every tuning preset (:mod:`mlsysopt.serving.presets`, 14 profiles) x seed, on the SimPy model of the engine, judged
by exhaustive tables as ``benchmarks/serving.py`` does (cap 60, 30 measurements at rate A then 1.5 x A, mean
latency); warm tuners get a prior fitted without the profile's own model (leave one model out, on the tuning
histories of ``benchmarks/serving_profiles.py``). The held-out presets are never run here. Writes per tuner the
median / p90 / mean measurements to within 5% and after the rate change, and ``default_tuner``: per budget class the
rule's tuner (:mod:`mlsysopt.serving.tuner_rule`) against the best one (``benchmarks/serving.py`` explains the
fields). A ``LABEL`` with a ``:TAG`` is a variant whose knobs ``--knobs`` gives (JSON: ``{"rrl_warm:ei":
{"acquisition": "ei"}}``). Tables and each (profile, tuner) are kept under ``--work``: a rerun resumes.

    python benchmarks/serving_rule.py [--tuners rrl,gp,...] [--knobs JSON] [--seeds 10] --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import write_json_atomic
from mlsysopt.runtime import make_executor
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.presets import presets
from mlsysopt.serving.space import Space
from mlsysopt.serving.study import default_rates, exhaustive_tables, study_tables
from serving import CAP, MAX_BATCH, PRE, default_tuner_block, leave_one_out_priors, p90

TUNERS = ("rrl", "gp", "tpe", "hill_climb", "random", "rrl_warm", "gp_warm", "tpe_warm")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every tuner x seed on every tuning preset (kept per profile and tuner); the summary and the rule's check."""
    cases = presets("tuning")
    tuners = args.tuners.split(",")
    knobs = json.loads(args.knobs) if args.knobs else {}
    seeds = list(range(args.seeds))
    models = sorted({c.model for c in cases})
    warm = any(t.partition(":")[0].endswith("_warm") for t in tuners)
    priors = leave_one_out_priors(args.histories, args.work / "loo", models) if warm else {}
    rows: list[dict[str, Any]] = []
    with make_executor("local", args.workers) as ex:
        for case in cases:
            prof = case.profile()
            space = Space.for_machine(prof.cores, MAX_BATCH)
            kept = args.work / f"tables_{case.name}.pkl"
            if kept.is_file():
                tables = pickle.loads(kept.read_bytes())
            else:
                tables = exhaustive_tables(prof, space, default_rates(prof), args.requests, ex)
                kept.write_bytes(pickle.dumps(tables))
            bound = priors[case.model].bind(prof) if warm else None
            for t in tuners:
                done = args.work / f"rows_{case.name}_{t}.json"
                if not done.is_file():
                    res = study_tables(tables, space, [t], seeds, ex, Objective("latency"), CAP, PRE, prof.cores,
                                       bound, {t: knobs.get(t, {})})  # fmt: skip
                    write_json_atomic(done, res["per_seed"])
                rows += [{**r, "profile": case.name} for r in json.loads(done.read_text()) if r["seed"] in seeds]
            print(f"  {case.name} done", flush=True)
    by: dict[str, dict[str, dict[str, list[float]]]] = {"evals_to_5pct": {}, "shift": {}}
    summary: dict[str, Any] = {}
    for t in tuners:
        mine = [r for r in rows if r["tuner"] == t]
        for key in by:
            by[key][t] = {c.name: [float(r[key] or CAP + 1) for r in mine if r["profile"] == c.name] for c in cases}
        e = [float(r["evals_to_5pct"] or CAP + 1) for r in mine]
        s = [float(r["shift"] or CAP + 1) for r in mine]
        summary[t] = {
            "median": statistics.median(e), "p90": p90(e), "mean": float(np.mean(e)),
            "reached": sum(r["evals_to_5pct"] is not None for r in mine) / len(mine),
            "shift_median": statistics.median(s), "shift_p90": p90(s), "shift_mean": float(np.mean(s)),
            "knobs": knobs.get(t, {}),
        }  # fmt: skip
    return {"tuning": summary, "default_tuner": default_tuner_block(by, summary, args.seed), "per_seed": rows}


def main() -> None:
    """Run, print the summary, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tuners", default=",".join(TUNERS), help="comma-separated tuner labels")
    ap.add_argument("--knobs", default=None, help="JSON: label -> tuner knobs (variants)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=400, help="requests per simulated window")
    ap.add_argument("--histories", type=Path, default=Path("runs/presets/histories"))
    ap.add_argument("--work", type=Path, default=Path("runs/serving_rule"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/serving_tuning.json"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    t0, load = time.perf_counter(), os.getloadavg()[0]
    result = {
        "date": dt.date.today().isoformat(),
        "data": "simulated: SimPy model of the engine on the tuning presets (validation); held-out never run here",
        "split": [c.to_dict() for c in presets("tuning")],
        "cap": CAP, "pre": PRE, "seeds": args.seeds, "load_average_at_start": load,
        **run(args),
    }  # fmt: skip
    for t, v in result["tuning"].items():
        print(f"{t:22s} median {v['median']:4.1f} p90 {v['p90']:3.0f} mean {v['mean']:5.2f} "
              f"| after the rate change median {v['shift_median']:4.1f} p90 {v['shift_p90']:3.0f}")  # fmt: skip
    for k, v in result["default_tuner"].items():
        print(k, {kk: vv for kk, vv in v.items() if kk not in ("share_within_5pct", "mean_measurements_capped")})
    result["seconds"] = time.perf_counter() - t0
    result["load_average_1m_at_end"] = os.getloadavg()[0]
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} in {result['seconds']:.0f}s")


if __name__ == "__main__":
    main()
