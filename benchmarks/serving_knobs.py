"""RRL's knobs on the *tuning* presets, where defaults are chosen: variants of one tuner side by side.

Each ``--variant LABEL=TUNER[,KNOB=VALUE...]`` (e.g. ``old=rrl_warm,warm_alpha=0.3``) runs on every tuning preset x
seed against the same exhaustive tables (the SimPy model of the engine), warm ones with a prior fitted without the
preset's own model (leave one model out, on the tuning histories of ``benchmarks/serving_profiles.py``). Per variant:
median, p90 and mean measurements to within 5% of the optimum at rate A, and after the rate change (as in
``benchmarks/serving.py``). The held-out presets are never run here.

    python benchmarks/serving_knobs.py --variant old=rrl_warm,warm_alpha=0.3 --variant new=rrl_warm \\
        --variant gp=gp_warm --seeds 10 --out runs/bench/serving_knobs.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import write_json_atomic
from mlsysopt.runtime import make_executor
from mlsysopt.serving.presets import presets
from mlsysopt.serving.space import Space
from mlsysopt.serving.study import run_study
from serving import CAP, MAX_BATCH, PRE, leave_one_out_priors, p90


def parse_variant(text: str) -> tuple[str, str, dict[str, Any]]:
    """``LABEL=TUNER,KNOB=VALUE,...`` -> (label, tuner, knobs); values are JSON where they parse."""
    label, eq, rest = text.partition("=")
    tuner, *pairs = rest.split(",")
    if not eq or not label or not tuner:
        raise SystemExit(f"--variant {text!r}: expected LABEL=TUNER[,KNOB=VALUE...]")
    knobs: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq:
            raise SystemExit(f"--variant {text!r}: {pair!r} is not KNOB=VALUE")
        try:
            knobs[key] = json.loads(value)
        except json.JSONDecodeError:
            knobs[key] = value
    return label, tuner, knobs


def _summary(values: list[float]) -> dict[str, float | None]:
    return {"median": statistics.median(values), "p90": p90(values), "mean": float(np.mean(values))}


def main() -> None:
    """Run every variant on every tuning preset; print and write the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, help="LABEL=TUNER[,KNOB=VALUE...] (repeatable)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=400, help="requests per simulated window")
    ap.add_argument("--histories", type=Path, default=Path("runs/presets/histories"))
    ap.add_argument("--out", type=Path, default=Path("runs/bench/serving_knobs.json"))
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    labels = {f"{tuner}:{label}": knobs for label, tuner, knobs in variants}
    if len(labels) < len(variants):
        raise SystemExit("--variant labels must be distinct")
    if not args.histories.is_dir():
        raise SystemExit(f"--histories {args.histories}: no such folder (benchmarks/serving_profiles.py builds it)")
    cases = presets("tuning")
    priors = leave_one_out_priors(
        args.histories, args.out.parent / "serving_tuning_cache", sorted({c.model for c in cases})
    )
    t0, load = time.perf_counter(), os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    with make_executor("local", args.workers) as ex:
        for case in cases:
            prof = case.profile()
            space = Space.for_machine(prof.cores, MAX_BATCH)
            res = run_study(prof, space, list(labels), list(range(args.seeds)), ex, cap=CAP, pre=PRE,
                            n_requests=args.requests, prior=priors[case.model], knobs=labels)  # fmt: skip
            rows += [{**r, "profile": case.name} for r in res["per_seed"]]
            figures = "  ".join(
                f"{t.partition(':')[2]} {res['evals_to_5pct'][t]:g}/{res['shift'][t]:g}" for t in labels
            )
            print(f"  {case.name:20s} {space.size:5d} configs  {figures}", flush=True)
    summary = {}
    for name, (label, tuner, knobs) in zip(labels, variants, strict=True):
        mine = [r for r in rows if r["tuner"] == name]
        first = [float(r["evals_to_5pct"] or CAP + 1) for r in mine]
        shift = [float(r["shift"] or CAP + 1) for r in mine]
        summary[label] = {"tuner": tuner, "knobs": knobs, **_summary(first), "shift": _summary(shift)}
        s = summary[label]
        print(f"{label:16s} median {s['median']:5.1f}  p90 {s['p90']:4.0f}  mean {s['mean']:5.1f}   after the rate "
              f"change: median {s['shift']['median']:4.1f}  p90 {s['shift']['p90']:4.0f}")  # fmt: skip
    write_json_atomic(args.out, {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "data": "simulated: SimPy model of the engine on the tuning presets (leave-one-model-out priors)",
        "split": [c.to_dict() for c in cases], "cap": CAP, "pre": PRE, "seeds": args.seeds,
        "variants": summary, "per_seed": rows, "seconds": time.perf_counter() - t0,
        "load_average_at_start": load, "load_average_at_end": os.getloadavg()[0],
    })  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
