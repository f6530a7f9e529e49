"""Build the shipped serving presets: measure the models' service profiles here, then fit the shipped prior.

``--measure`` (real measurements; run it alone: ``flock -x``): every measured model of
:data:`mlsysopt.serving.presets.MODELS` is exported (zoo models, the user ``.py`` models of
``benchmarks/serving_models.py``, a plain ONNX file), its batches timed per (rows 1-64, intra 1-2, inter 1-2), the
service model fitted, the dispatch overhead and the low-latency timings calibrated on the engine, and its FLOPs,
parameters and input bytes recorded: ``src/mlsysopt/serving/profiles/<model>.json``.

``--prior`` (simulated, no timing): histories of the *tuning* presets only — ``serving tune --engine sim`` run folders
with random search (``--budget`` measurements at four loads per preset) written under ``--work`` — read back as
:class:`~mlsysopt.serving.history.History` records, and the prior fitted on them:
``src/mlsysopt/serving/profiles/prior.pt``.

    python benchmarks/serving_profiles.py --measure --prior [--work runs/presets]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlsysopt.io import write_json_atomic
from mlsysopt.serving.presets import MODELS, presets

HERE = Path(__file__).resolve().parent
PROFILES = HERE.parent / "src" / "mlsysopt" / "serving" / "profiles"
ZOO = ("cnn", "resnet", "mobilenet", "transformer")
LOADS = (0.2, 0.4, 0.6, 0.9)  # history rates: these fractions of the cores busy with single-row 1-thread batches
MAX_RATE = 500_000.0  # req/s: beyond, a history rate is capped (the load generator paces at most 1,000,000)


def model_spec(name: str, work: Path) -> str:
    """The ``--model`` spec of a measured preset model (writing the ONNX file of the GEMM stack)."""
    if name in ZOO:
        return f"zoo:{name}"
    if name == "gemm_stack":
        sys.path.insert(0, str(HERE))
        from serving_models import gemm_stack_onnx

        return str(gemm_stack_onnx(work / "gemm_stack.onnx"))
    return f"{HERE / 'serving_models.py'}:{name}"


def measure(work: Path, seed: int, only: list[str] | None = None) -> dict[str, Any]:
    """Profile every measured model on this machine; write its JSON into the package."""
    from mlsysopt.serving.inputs import machine_threads, resolve_model
    from mlsysopt.serving.profiling import calibrate_dispatch, measure_profile

    cores = machine_threads()
    out: dict[str, Any] = {}
    for name, (_, source, _) in MODELS.items():
        if source != "measured" or (only and name not in only):
            continue
        t0 = time.perf_counter()
        model, _ = resolve_model(model_spec(name, work), work, largest=64, instances=cores)
        prof, samples = measure_profile(model, (1, 2, 4, 8, 16, 32, 64), (1, 2), (1, 2), 5, cores, name)
        prof, calibration = calibrate_dispatch(model, prof, seed=seed)
        prof = replace(prof, **model.facts())
        prof.save(PROFILES / f"{name}.json")
        out[name] = {
            "seconds": time.perf_counter() - t0,
            "fit_error": prof.fit_error(samples),
            "calibration": calibration,
            "warnings": prof.warnings(),
            "ms_batch1": prof.service_ms(1, 1, 1),
            "ms_batch64": prof.service_ms(64, 1, 1),
        }
        print(f"{name}: {prof.service_ms(1, 1, 1):.3g} ms at batch 1, fit error {out[name]['fit_error']:.1%}")
    return out


def histories(work: Path, budget: int, seed: int) -> list[Path]:
    """Random-search ``serving tune --engine sim`` runs on every tuning preset at :data:`LOADS` (run folders)."""
    from mlsysopt.runtime.threads import torch_threads
    from mlsysopt.serving.tuning_job import TuningJob

    folders = []
    for p in presets("tuning"):
        prof = p.profile()
        for load in LOADS:
            rate = min(round(load * prof.cores * 1000.0 / prof.service_ms(1, 1, 1), -1), MAX_RATE) or 10.0
            out = work / "histories" / f"{p.name}_{load:g}"
            if not (out / "result.json").is_file():
                job = TuningJob(
                    out, rates=(rate,), budget=budget, tuner="random", engine="sim", profile=f"preset:{p.name}",
                    requests=300, seed=seed, confirm_rounds=1, noise_windows=2,
                )  # fmt: skip
                with job, torch_threads(1):
                    job.run()
            folders.append(out)
        print(f"histories of {p.name}: {len(LOADS)} runs")
    return folders


def fit_prior(folders: list[Path]) -> dict[str, Any]:
    """Fit the shipped prior on the history run folders (read back through the History records)."""
    from mlsysopt.serving.history import histories_from_runs
    from mlsysopt.serving.prior import Prior

    t0 = time.perf_counter()
    hs = histories_from_runs(folders)
    heldout = {p.model for p in presets("heldout")}
    leaked = [h.task for h in hs if h.profile.model in heldout]
    if leaked:
        raise SystemExit(f"held-out models in the prior's histories: {leaked}")
    prior = Prior().fit(hs)
    prior.save(PROFILES / "prior.pt")
    return {**prior.describe(), "seconds": time.perf_counter() - t0}


def main() -> None:
    """Measure, fit, write ``benchmarks/results/serving_profiles.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="profile the measured models here (real timings)")
    ap.add_argument("--prior", action="store_true", help="histories of the tuning presets, then the shipped prior")
    ap.add_argument("--budget", type=int, default=100, help="measurements per history run")
    ap.add_argument("--only", default=None, help="comma-separated measured models (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=Path("runs/presets"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/serving_profiles.json"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date": dt.date.today().isoformat(), "load_average_at_start": os.getloadavg()[0]}
    if args.measure:
        result["measured"] = measure(args.work, args.seed, args.only.split(",") if args.only else None)
    if args.prior:
        result["prior"] = fit_prior(histories(args.work, args.budget, args.seed))
    result["split"] = [p.to_dict() for p in presets()]
    result["load_average_at_end"] = os.getloadavg()[0]
    if args.out.is_file():
        from mlsysopt.io import read_json

        result = {**read_json(args.out), **result}
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
