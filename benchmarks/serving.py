"""Serving benchmark (RRL): held-out models, a prior across models, fair warm-started baselines, real measurements.

**Held-out study** (simulated; the headline). Every *held-out* preset profile (:mod:`mlsysopt.serving.presets`: models
measured here and extrapolated to 8-64 cores, plus synthetic ones; the split is written into the JSON) is tuned by
every tuner x 10 seeds on the SimPy model of the engine, judged by exhaustive tables: ``evals_to_5pct`` (measurements
until the best so far is truly within 5% of the optimum; a run that does not get there within the cap counts cap +
1) and ``shift`` (after ``pre`` measurements at rate A, the rate rises 1.5x: measurements until within 5% of the new
optimum). Warm tuners (``rrl_warm``, ``gp_warm``, ``tpe_warm``) share one prior, fitted on histories of the *tuning*
presets only (the shipped prior; its tasks are checked to hold no held-out model). ``heldout`` gives per tuner the
median and p90 over every (profile, seed); ``ratio_rrl_warm_to_gp_cold`` etc. are the ratio of those medians with a
95% bootstrap interval (seeds resampled within each profile, 2,000 draws; ``*_by_profile``: profiles resampled).
``--split tuning`` runs the same study on the tuning presets, each with a prior fitted without its own model
(leave one model out): where the defaults were chosen.

``default_tuner`` (issue 34): ``serving tune``'s default (``--tuner auto``, :mod:`mlsysopt.serving.tuner_rule`)
per budget class (small / medium / large, judged at 10 / 30 / 60 measurements) and prior (cold / warm): the rule's
tuner, the best one here (most tunes within 5% of the optimum at that budget, the first tune at rate A and the
re-tune after the rate change pooled; among the tuners whose share is within the 95% bootstrap interval of the most,
the fewest mean measurements capped at the budget), every tuner's share, and the rule's share minus the best's with
a 95% bootstrap interval (seeds resampled within profiles). ``targets``: the default warm tuner's
mean and p90 measurements to 5% against warm GP and warm TPE, and its median after the rate change (target <= 2).

**sim** (kept from earlier rounds): the same study on the documented synthetic 32-core profile, cold tuners.

**Real** (ONNX Runtime here, load generator in its own process; timings: run it on a quiet machine):

* the latency case of earlier rounds (zoo ResNet at ~70% load): ``noise_cv``, exhaustive sweep vs RRL (25% of the
  measurements), ``confirmed_ratio`` from an interleaved confirmation, and ``sim_vs_real_rel_err``: the simulator
  calibrated to this engine (timings table, dispatch and low-latency timings) against every confirmed value;
* ``real.matters``: a case where tuning matters here — throughput within a p99 SLO on a model whose batching and
  instances matter, from a rate at which ONNX Runtime's default saturates: the exhaustive sweep, RRL warm-started from
  the shipped prior (with 25% of the measurements), and the exhaustive best 5, RRL's pick and the default confirmed
  interleaved: ``default_ms`` / ``best_ms`` / ``rrl_ms`` (ms per request = 1000 / throughput), ``confirmed_ratio``
  (RRL / best) and ``evals_fraction``.

    python benchmarks/serving.py [--quick] [--seeds N] [--skip-real] [--skip-synthetic] [--split heldout|tuning]
                                 [--fresh-real] --out FILE.json

Every part is kept as it finishes (the held-out study per profile, the synthetic study, each real case, beside
``--out``): the same command resumes after a kill; ``--fresh-real`` re-measures only the real cases.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import read_json, write_json_atomic
from mlsysopt.runtime import make_executor
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.presets import MODELS, presets
from mlsysopt.serving.prior import preset_prior
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Space
from mlsysopt.serving.stats import mean_ci, median_ci
from mlsysopt.serving.study import default_rates, exhaustive_tables, run_study, study_tables, tuner_name
from mlsysopt.serving.tuner_rule import JUDGED_AT, RULE

LOAD_AT_START = os.getloadavg()[0]
SIM_TUNERS = ("rrl", "tpe", "gp", "random", "bandit", "hill_climb")
#: held-out study's tuners; ``bandit`` is RRL without its estimator and regions (the ablation of its learned part)
HELDOUT_TUNERS = (
    "rrl_warm", "rrl_warm:ei", "rrl", "bandit", "gp_warm", "gp", "tpe_warm", "tpe", "hill_climb", "random",
)  # fmt: skip
#: variants: warm RRL picking by expected improvement of a GP on the prior's residuals (issue 34; not the default:
#: the tuning presets chose the value table and Boltzmann, BENCHMARKS.md)
VARIANTS = {"rrl_warm:ei": {"acquisition": "ei"}}
#: tuners whose runs do not depend on the seed (expected improvement draws nothing at random; tested in
#: tests/serving/test_rrl_ei.py): run once per profile, the row stands for every seed ("replicated_from_seed")
SEED_FREE = ("rrl_warm:ei",)
MAX_BATCH = (1, 2, 4, 8, 16, 32, 64)
CAP = 60  # measurements per run (GP's own cost grows with the cube of its trials: ~9 s per ask at 100 here)
PRE = 30  # measurements at rate A before the rate change
BOOTSTRAP = 2000
#: the ratios of median evals_to_5pct the JSON reports (key -> (ours, theirs))
RATIOS = {
    "ratio_rrl_warm_to_gp_cold": ("rrl_warm", "gp"),
    "ratio_rrl_warm_to_gp_warm": ("rrl_warm", "gp_warm"),
    "ratio_rrl_cold_to_gp_cold": ("rrl", "gp"),
    "ratio_rrl_warm_to_tpe_warm": ("rrl_warm", "tpe_warm"),
    "ratio_rrl_warm_to_rrl_cold": ("rrl_warm", "rrl"),
}


def p90(values: list[float]) -> float | None:
    """The 90th percentile by order statistic (None for no values)."""
    return sorted(values)[int(0.9 * (len(values) - 1))] if values else None


def _values(rows: list[dict[str, Any]], key: str, cap: int) -> list[float]:
    return [float(r[key]) if r[key] is not None else float(cap + 1) for r in rows]


def ratio_ci(a: dict[str, list[float]], b: dict[str, list[float]], seed: int = 0) -> dict[str, list[float]]:
    """median(a) / median(b) over every (profile, seed), with 95% bootstrap intervals (within and across profiles)."""
    rng = np.random.default_rng(seed)
    point = statistics.median(v for vs in a.values() for v in vs) / statistics.median(
        v for vs in b.values() for v in vs
    )
    within, across = [], []
    names = sorted(a)
    for _ in range(BOOTSTRAP):
        ra = np.concatenate([rng.choice(a[n], len(a[n])) for n in names])
        rb = np.concatenate([rng.choice(b[n], len(b[n])) for n in names])
        within.append(float(np.median(ra) / np.median(rb)))
        pick = rng.choice(names, len(names))
        across.append(float(np.median(np.concatenate([a[n] for n in pick])) /
                            np.median(np.concatenate([b[n] for n in pick]))))  # fmt: skip
    return {
        "within": [point, *np.percentile(within, [2.5, 97.5]).tolist()],
        "by_profile": [point, *np.percentile(across, [2.5, 97.5]).tolist()],
    }


def study_split(args: argparse.Namespace, split: str) -> dict[str, Any]:
    """Every tuner x seed on every preset of ``split``; aggregates, ratios with intervals."""
    cases = presets(split)
    if args.quick:
        cases = cases[:2]
    seeds = list(range(3 if args.quick else args.seeds))
    tuners = HELDOUT_TUNERS if not args.quick else ("rrl_warm", "rrl_warm:ei", "rrl", "gp_warm", "gp", "tpe_warm")
    priors = _priors(args, split, cases)
    per_profile: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    cache = args.out.parent / f"serving_{split}_cache"
    cache.mkdir(parents=True, exist_ok=True)
    with make_executor("local", args.workers) as ex:
        for case in cases:
            prof = case.profile()
            space = Space.for_machine(prof.cores, MAX_BATCH)
            done = cache / f"{case.name}.json"  # one profile at a time, kept: a rerun (or a chunked run) resumes
            key = {"tuners": list(tuners), "seeds": seeds, "cap": CAP, "pre": PRE, "requests": args.requests,
                   "knobs": VARIANTS, "reused": [str(args.reuse), args.reuse_tuners]}  # fmt: skip
            res = read_json(done) if done.is_file() else None
            kept = _kept_seeds(res, key)
            if res is None or res.get("key") != key:
                todo = [s for s in seeds if s not in kept]  # more seeds than a kept run: only the new ones
                reused = _reused_rows(args, case.name, todo)
                new = _profile_study(prof, space, tuners, todo, ex, args.requests, priors[case.model], reused)
                res = _merge_seeds(res, new, seeds, CAP) if kept else new
                write_json_atomic(done, {**res, "key": key})
            if args.max_minutes and time.perf_counter() - t0 > 60 * args.max_minutes:
                raise SystemExit(f"stopped after {case.name} (--max-minutes); rerun to continue from {cache}")
            per_profile[case.name] = {k: res[k] for k in ("space_size", "rates", "optimum", "evals_to_5pct", "shift",
                                                          "reached", "tuner_cpu_s_per_measurement")}  # fmt: skip
            rows += [{**r, "profile": case.name} for r in res["per_seed"]]
            figures = "  ".join(f"{t} {res['evals_to_5pct'][t]:g}/{res['shift'][t]:g}" for t in tuners)
            print(f"  {case.name:22s} {space.size:5d} configs  {figures}", flush=True)
    summary: dict[str, Any] = {}
    by: dict[str, dict[str, dict[str, list[float]]]] = {"evals_to_5pct": {}, "shift": {}}
    for t in tuners:
        mine = [r for r in rows if r["tuner"] == t]
        for key in by:
            by[key][t] = {c.name: _values([r for r in mine if r["profile"] == c.name], key, CAP) for c in cases}
        e, s = _values(mine, "evals_to_5pct", CAP), _values(mine, "shift", CAP)
        summary[t] = {
            "median": statistics.median(e), "p90": p90(e), "mean": float(np.mean(e)),
            "mean_ci95": list(mean_ci(e)), "median_ci95": list(median_ci(e)),
            "reached": sum(r["evals_to_5pct"] is not None for r in mine) / len(mine),
            "shift_median": statistics.median(s), "shift_p90": p90(s),
            "tuner_cpu_s_per_measurement": statistics.median(r["tuner_cpu_s_per_measurement"] for r in mine),
        }  # fmt: skip
    out: dict[str, Any] = {
        "split": [c.to_dict() for c in cases],
        "tuners": summary,
        "per_profile": per_profile,
        "per_seed": rows,
        "cap": CAP,
        "pre": PRE,
        "seeds": len(seeds),
        "requests": args.requests,
        "prior": {m: p.describe() for m, p in priors.items() if p is not None},
        "seconds": time.perf_counter() - t0,
    }
    e = by["evals_to_5pct"]
    for key, (ours, theirs) in RATIOS.items():
        if ours in e and theirs in e:
            out[key] = ratio_ci(e[ours], e[theirs], args.seed)
    out["default_tuner"] = default_tuner_block(by, summary, args.seed)
    s = by["shift"]
    if "rrl_warm" in s and "gp" in s:
        out["ratio_shift_rrl_warm_to_gp_cold"] = ratio_ci(s["rrl_warm"], s["gp"], args.seed)
    return out


def rule_label(cls: str, warm: bool) -> str:
    """The benchmark's label of the rule's tuner (``rrl:ei`` with a prior -> ``rrl_warm:ei``)."""
    name, _, tag = RULE[(cls, warm)].partition(":")
    return name + ("_warm" if warm else "") + (f":{tag}" if tag else "")


def default_tuner_block(
    by: dict[str, dict[str, dict[str, list[float]]]], summary: dict[str, Any], seed: int = 0
) -> dict[str, Any]:
    """The rule's tuner against the best one per budget class and prior, and the warm default's targets.

    A tuner's share at a budget pools both tunes of every run: the first at rate A and the re-tune after the rate
    change (what ``serving tune --rate A,B`` does); each is also reported alone.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}

    both = {
        t: {p: np.stack([by["evals_to_5pct"][t][p], by["shift"][t][p]], axis=1) for p in by["evals_to_5pct"][t]}
        for t in by["evals_to_5pct"]
    }  # (seeds, 2) per tuner and profile, seeds in the same order for every tuner

    def pooled(t: str, prof: str) -> np.ndarray:
        return both[t][prof]

    for cls, budget in JUDGED_AT.items():
        for warm in (False, True):
            names = [t for t in by["evals_to_5pct"] if tuner_name(t)[1] == warm]
            rule = rule_label(cls, warm)
            if rule not in names:
                continue
            profs = list(by["evals_to_5pct"][rule])
            runs = {t: np.concatenate([pooled(t, p) for p in profs]) for t in names}
            share = {t: float(np.mean(v <= budget)) for t, v in runs.items()}
            capped = {t: float(np.mean(np.minimum(v, budget + 1))) for t, v in runs.items()}
            # bootstrap: seeds resampled within each profile, the same draw for every tuner
            draws = {t: np.zeros(BOOTSTRAP) for t in names}
            for p in profs:
                n = len(by["evals_to_5pct"][rule][p])
                pick = rng.integers(0, n, (BOOTSTRAP, n))
                for t in names:
                    draws[t] += (pooled(t, p) <= budget).sum(axis=1)[pick].sum(axis=1)
            draws = {t: d / runs[t].size for t, d in draws.items()}
            top = max(names, key=lambda t: share[t])
            tied = [t for t in names if np.percentile(draws[top] - draws[t], 2.5) <= 0]
            best = min(tied, key=lambda t: (capped[t], -share[t]))  # within the noise of the top: fewer measurements
            diff = draws[rule] - draws[best]
            out[f"{cls}_{'warm' if warm else 'cold'}"] = {
                "budget": budget, "rule": rule, "best": best, "rule_is_best": rule == best, "most_within": top,
                "tied_with_most_within": tied, "share_within_5pct": share,
                "share_first_tune": {t: float(np.mean(v[:, 0] <= budget)) for t, v in runs.items()},
                "share_after_rate_change": {t: float(np.mean(v[:, 1] <= budget)) for t, v in runs.items()},
                "mean_measurements_capped": capped,
                "rule_minus_best_share_ci95": [share[rule] - share[best], *np.percentile(diff, [2.5, 97.5]).tolist()],
            }  # fmt: skip
    warm_default = rule_label("medium", True)  # the default budget of serving tune (30) is medium
    if warm_default in summary:
        mine = summary[warm_default]
        targets: dict[str, Any] = {"default_warm_tuner": warm_default, "shift_median": mine["shift_median"],
                                   "shift_median_le_2": bool(mine["shift_median"] <= 2)}  # fmt: skip
        for other in ("gp_warm", "tpe_warm"):
            if other in summary and other != warm_default:
                for k in ("mean", "p90"):
                    targets[f"{k}_le_{other}"] = bool(mine[k] <= summary[other][k])
                    targets[f"{k}_vs_{other}"] = [mine[k], summary[other][k]]
        out["targets"] = targets
    return out


def _profile_study(
    prof: ServiceProfile,
    space: Space,
    tuners: tuple[str, ...],
    seeds: list[int],
    ex: Any,
    requests: int,
    prior: Any,
    reused: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """One profile: the exhaustive tables, then every tuner not in ``reused`` x seed (a :data:`SEED_FREE` tuner once,
    its row standing for every seed), merged with the ``reused`` rows; aggregated as :func:`run_study` does."""
    bound = prior.bind(prof) if prior is not None else None
    tables = exhaustive_tables(prof, space, default_rates(prof), requests, ex)
    runs = [t for t in tuners if t not in reused]
    common = (ex, Objective("latency"), CAP, PRE, prof.cores, bound, VARIANTS)
    seeded, free = [t for t in runs if t not in SEED_FREE], [t for t in runs if t in SEED_FREE]
    base = study_tables(tables, space, seeded, seeds, *common)  # (no tuner: the tables' optimum, rates, size)
    rows = list(base["per_seed"])
    if free:
        once = study_tables(tables, space, free, seeds[:1], *common)["per_seed"]
        rows += [{**r, "seed": s, "replicated_from_seed": r["seed"]} for r in once for s in seeds]
    rows += [r for t in tuners if t in reused for r in reused[t]]
    empty = ("evals_to_5pct", "shift", "reached", "shift_reached", "tuner_cpu_s_per_measurement")
    return _merge_seeds({"per_seed": []}, {**base, "per_seed": rows, **{k: {} for k in empty}}, seeds, CAP)


def _reused_rows(args: argparse.Namespace, profile: str, seeds: list[int]) -> dict[str, list[dict[str, Any]]]:
    """``--reuse``: per-seed rows of the ``--reuse-tuners`` from an earlier benchmark JSON (their code unchanged since;
    each run is deterministic per seed)."""
    if args.reuse is None:
        return {}
    old = read_json(args.reuse)
    wanted = set(args.reuse_tuners.split(","))
    out: dict[str, list[dict[str, Any]]] = {}
    for r in old["heldout_study"]["per_seed"]:
        label = r["tuner"]
        if r["profile"] == profile and label in wanted and r["seed"] in seeds:
            row = {k: v for k, v in r.items() if k != "profile"}
            out.setdefault(label, []).append({**row, "tuner": label, "reused_from": str(args.reuse)})
    return {t: rs for t, rs in out.items() if len(rs) == len(seeds)}


def _kept_seeds(res: dict[str, Any] | None, key: dict[str, Any]) -> set[int]:
    """The seeds of a kept profile study that a run with ``key`` can reuse (same settings, fewer seeds)."""
    if res is None or "key" not in res:
        return set()
    old = res["key"]
    same = all(old.get(k) == v for k, v in key.items() if k != "seeds")
    return set(old["seeds"]) if same and set(old["seeds"]) <= set(key["seeds"]) else set()


def _merge_seeds(old: dict[str, Any], new: dict[str, Any], seeds: list[int], cap: int) -> dict[str, Any]:
    """A kept profile study plus the runs of its new seeds (same tables: the study is deterministic per seed)."""
    rows = sorted([*old["per_seed"], *new["per_seed"]], key=lambda r: (r["tuner"], r["seed"]))
    out = {**new, "per_seed": rows, "seeds": len(seeds)}
    for k in ("evals_to_5pct", "shift", "reached", "shift_reached", "tuner_cpu_s_per_measurement"):
        out[k] = dict(out.get(k, {}))
    for name in {r["tuner"] for r in rows}:
        mine = [r for r in rows if r["tuner"] == name]
        for k, reached in (("evals_to_5pct", "reached"), ("shift", "shift_reached")):
            out[k][name] = statistics.median(r[k] if r[k] is not None else cap + 1 for r in mine)
            out[reached][name] = sum(r[k] is not None for r in mine) / len(mine)
        out["tuner_cpu_s_per_measurement"][name] = statistics.median(r["tuner_cpu_s_per_measurement"] for r in mine)
    return out


def _priors(args: argparse.Namespace, split: str, cases: list[Any]) -> dict[str, Any]:
    """The prior per model: the shipped one for held-out models, leave-one-model-out for tuning ones."""
    if split == "heldout":
        prior = preset_prior()
        heldout = {m for m, (side, _, _) in MODELS.items() if side == "heldout"}
        seen = {t.partition("@")[0] for t in prior.describe().get("tasks", [])}
        if seen & heldout:
            raise SystemExit(f"the shipped prior saw held-out models {sorted(seen & heldout)}: refit it")
        return {c.model: prior for c in cases}
    models = sorted({c.model for c in cases})
    return leave_one_out_priors(args.histories, args.out.parent / "serving_tuning_cache", models)


def leave_one_out_priors(histories: Path, cache: Path, models: list[str]) -> dict[str, Any]:
    """A prior per tuning model, fitted on every other tuning model's histories (kept in ``cache``)."""
    from mlsysopt.serving.history import histories_from_runs
    from mlsysopt.serving.prior import Prior

    cache.mkdir(parents=True, exist_ok=True)
    out, hs = {}, None
    for model in models:
        path = cache / f"prior_without_{model}.pt"
        if path.is_file():
            out[model] = Prior.load(path)
            continue
        hs = hs if hs is not None else histories_from_runs([histories])
        out[model] = Prior().fit([h for h in hs if h.profile.model != model])
        out[model].save(path)
        print(f"  prior without {model}: {out[model].describe()['samples']} samples", flush=True)
    return out


def sim_part(args: argparse.Namespace) -> dict[str, Any]:
    """The earlier rounds' study: cold tuners on the documented synthetic 32-core profile (a tuning profile now)."""
    profile = ServiceProfile.synthetic(32)
    space = Space.for_machine(32, max_batch=MAX_BATCH)
    cap = math.ceil((0.10 if args.quick else 0.2) * space.size)
    seeds = list(range(3 if args.quick else args.seeds))
    tuners = ("rrl", "tpe", "random") if args.quick else SIM_TUNERS
    t0 = time.perf_counter()
    done = args.out.parent / f"serving_sim{'_quick' if args.quick else ''}.json"  # kept: a rerun resumes after it
    key = {"tuners": list(tuners), "seeds": seeds, "cap": cap, "requests": 200 if args.quick else 400}
    out = read_json(done) if done.is_file() else None
    if out is None or out.get("key") != key:
        with make_executor("local", args.workers) as ex:
            out = run_study(profile, space, tuners, seeds, ex, cap=cap, pre=60, n_requests=key["requests"])
        out["seconds"] = time.perf_counter() - t0
        write_json_atomic(done, {**out, "key": key})
    print(f"sim: {space.size} configurations ({space.raw_size} before merging), rates {out['rates']}, cap {cap}")
    for name in tuners:
        print(f"  {name:10s} evals_to_5pct {out['evals_to_5pct'][name]:>6}  shift {out['shift'][name]:>6}")
    return out


def main() -> None:
    """Held-out study, the earlier simulated study, the real part; write the JSON."""
    from serving_real import real_part

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 profiles, 3 seeds, 8-configuration real spaces in short windows (~2 min; a smoke run)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=10, help="seeds per tuner and profile")
    ap.add_argument("--workers", type=int, default=2, help="processes for the simulated studies")
    ap.add_argument("--requests", type=int, default=400, help="requests per simulated window")
    ap.add_argument("--split", choices=("heldout", "tuning"), default="heldout")
    ap.add_argument(
        "--histories", type=Path, default=Path("runs/presets/histories"),
        help="--split tuning: history run folders of the tuning presets (serving_profiles.py --prior)",
    )  # fmt: skip
    ap.add_argument("--reuse", type=Path, default=None, help="an earlier benchmark JSON whose rows to reuse")
    ap.add_argument("--reuse-tuners", default="", help="comma-separated tuner labels reused from --reuse")
    ap.add_argument("--skip-real", action="store_true", help="only the simulated studies")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop after the profile that passes this")
    ap.add_argument("--skip-sim", action="store_true", help="no simulated study")
    ap.add_argument(
        "--skip-synthetic", action="store_true", help="no study on the earlier rounds' synthetic 32-core profile"
    )
    ap.add_argument("--fresh-real", action="store_true", help="measure the real cases again (else kept ones stay)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/serving.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    work = args.out.parent / "serving_model"
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "mode": "quick" if args.quick else "full",
        "load_average_at_start": LOAD_AT_START,
        "data": {
            "heldout": "simulated: SimPy model of the engine; preset profiles measured here (2 cores) and extrapolated "
            "to 8-64 cores (Amdahl, not measured there), and synthetic ones",
            "sim": "synthetic: SimPy model of the engine, documented synthetic 32-core profile",
            "real": "real: ONNX Runtime on this machine, Poisson load from a separate process",
        },
    }
    if not args.skip_sim:
        print(f"{args.split} study:")
        key = "heldout" if args.split == "heldout" else "tuning"
        study = study_split(args, args.split)
        result[key] = study["tuners"]
        apart = ("tuners", "default_tuner")
        result[f"{key}_study"] = {k: v for k, v in study.items() if k not in apart and not k.startswith("ratio_")}
        result["default_tuner"] = study["default_tuner"]
        result.update({k: v["within"] for k, v in study.items() if k.startswith("ratio_")})
        result.update({f"{k}_by_profile": v["by_profile"] for k, v in study.items() if k.startswith("ratio_")})
        if args.split == "heldout" and not args.skip_synthetic:
            result["sim"] = sim_part(args)
    if not args.skip_real:
        result.update(real_part(args, work))
    result["seconds"] = time.perf_counter() - t0
    result["load_average_1m_at_end"] = os.getloadavg()[0]
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} in {result['seconds']:.0f}s")


if __name__ == "__main__":
    main()
