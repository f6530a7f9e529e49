"""NAS benchmark: validation regret on NAS-Bench-Graph under tight and single-limit constraints, EPNAS with transfer
against the strong tabular baselines at equal budgets, plus real training on digits and the parallel speed-up.

**NAS-Bench-Graph** (real tables shipped by the ``nas-bench-graph`` package). Headline datasets: cora, citeseer,
pubmed, cs, computers, photo. Defaults were chosen on the other three (physics, arxiv, proteins: ``--tune``), never
on these. Two hard-constraint regimes per dataset (:data:`mlsysopt.nas.REGIMES`): ``tight`` (latency and params at
the table's lower quartiles, ~8% of the cells feasible) and ``single`` (params at the 10th percentile). Every method
gets the same evaluations, in batches of :data:`BATCH`, over ``seeds`` seeds (10; quick: 2, tight regime only), at
budgets 10, 30 and 100 (quick: 10, 30). Methods that never read their budget (``Searcher.anytime``: random, local
search, BANANAS, evolution, TPE, REINFORCE, zero-shot) run once at the largest budget and are read at each smaller
one (a run with budget k proposes exactly those first k architectures: tested); EPNAS (both) and PNAS split their
budget into stages, so they run once per budget.

Every method optimises validation accuracy, so the headline is **validation regret** (best feasible validation
accuracy in the whole table minus that of the returned cell), with the returned cell's **rank percentile** (the
percentage of feasible cells with a better validation accuracy) and **test regret** beside it. EPNAS's prior is
pretrained on the *other* eight tables (leave one dataset out; trained once per dataset, before the clock).
``ci95_val_regret_ratio[budget][baseline]`` = mean validation regret of EPNAS / that of the baseline, with a 95%
bootstrap interval (10,000 paired resamples of the (dataset, regime, seed) cells). ``top1pct_rate[method][dataset]``
= fraction of runs (seeds x regimes) at 100 evaluations returning a top-1% cell. Targets (issue #23): at 30
evaluations EPNAS's mean validation regret <= 0.5x the best of evolution, TPE, local search and BANANAS with the
interval's upper end < 1; a top-1% cell in >= 80% of runs on every headline dataset at 100; every returned cell
feasible. The old keys (``nasbench_graph`` per dataset, ``mean_regret`` = mean test regret at the largest budget,
``feasible_rate``, ``digits``, ``targets``) are kept.

**Digits** (scikit-learn's bundled images, real training of every candidate, space ``digits`` with up to 4 blocks):
limits params <= P and FLOPs <= F, where P and F are the medians over 40 random architectures (10 per block count,
``numpy`` seed 0) rounded to 3 significant digits. EPNAS (no prior exists for this space: it runs cold) and random
search, each with 2 workers and the same seed, ``budget`` candidates (30; quick: 6) trained for ``epochs`` epochs
(4; quick: 2). ``speedup_2_workers`` = wall time of EPNAS with 1 worker (in process) / with 2 workers (a process
pool started and warmed before the clock starts), same budget and seed; EPNAS runs with ``round_size=2`` so both
are the *same* search (``same_search``).

    python benchmarks/nas.py [--quick] [--tune] [--seeds N] [--budgets 10,30,100] [--jobs N] [--priors DIR]
                             [--no-digits] --out FILE.json

``--priors DIR`` keeps the leave-one-out priors (``prior_<dataset>.pt``) between runs (training them is the slowest
step on a loaded machine); ``--jobs`` sets the processes running searches (the results do not depend on it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.io import load_torch, save_torch_atomic, write_json_atomic
from mlsysopt.nas import (
    TableOracle,
    get_method,
    get_space,
    method_class,
    run_search,
    table_constraints,
)
from mlsysopt.nas.defaults import TRANSFER_ABLATIONS, default_method, rule_text
from mlsysopt.nas.prior import TransferPrior
from mlsysopt.nas.spaces.nasbench_graph import leave_one_out, register_prior
from mlsysopt.runtime import make_executor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nas_digits import digits
from nas_own import own_objective

METHODS = ("epnas", "epnas_cold", "local_search", "bananas", "bananas_prior", "evolution", "tpe", "random", "reinforce",
           "pnas", "zero_shot")  # fmt: skip
TARGET_BASELINES = ("evolution", "tpe", "local_search", "bananas")  # the 0.5x target is against the best of these
DATASETS = ("cora", "citeseer", "pubmed", "cs", "computers", "photo")
TUNING_DATASETS = ("physics", "arxiv", "proteins")
REGIME_NAMES = ("tight", "single")
BUDGETS = (10, 30, 100)
#: evaluations per ask (2 workers); each job carries it to the process that runs it (``nas_bananas_refit.py --batch``)
BATCH = 2
#: the batch every cached search had before the batch was part of the key: left out of its key, so they stay valid
UNKEYED_BATCH = 2
JOB_WORKERS = min(os.cpu_count() or 1, 8)  # processes for the NAS-Bench-Graph searches (2 on a 2-core machine)
BOOTSTRAP = 10_000
#: slowest first, so the pool's last jobs are short ones
COST_ORDER = {"bananas": 0, "bananas_prior": 0, "tpe": 1, "epnas": 2, "epnas_cold": 3, "pnas": 4, "reinforce": 5,
              "zero_shot": 6, "local_search": 7, "evolution": 8, "random": 9}  # fmt: skip
#: EPNAS variants tried on the tuning datasets (``--tune``), by name, every knob that differs spelled out; the
#: defaults of ``epnas`` and ``epnas_cold`` are the winners by mean validation regret at 30 (BENCHMARKS.md)
_OLD = {"stage_split": "linear", "candidates": 100, "ucb": 0.0, "predicted_update": 0.0, "prior_steps": 0,
        "neighbours": 3}  # fmt: skip
_NEW = {"stage_split": "last", "candidates": 500, "ucb": 0.5, "predicted_update": 1.0, "prior_steps": 20,
        "neighbours": 5}  # fmt: skip
TUNING_GRID_23: dict[str, tuple[str, dict[str, Any]]] = {  # issue #23's grid (BENCHMARKS.md), kept for the record
    "epnas_linear100": ("epnas", _OLD),
    "epnas_last500": ("epnas", _NEW),
    "cold_linear100": ("epnas_cold", _OLD),
    "cold_last500": ("epnas_cold", {**_NEW, "predicted_update": 0.0, "prior_steps": 0}),
}
#: Issue #34's grid: when the prior steps aside (``handover``, evaluations on the target; 0: never). EPNAS's
#: ``HANDOVER`` default is the earliest handover whose mean relative regret over budgets 10, 30 and 100 is within
#: :data:`TIE` of the best variant's (:func:`choose_handover`): tied variants, the one relying least on transfer.
HANDOVERS = (0, 10, 20, 30, 50)
TIE = 0.01  # relative regrets within 1% of the best count as a tie
TUNING_GRID: dict[str, tuple[str, dict[str, Any]]] = {f"epnas_h{h}": ("epnas", {"handover": h}) for h in HANDOVERS}
#: BANANAS with the prior's initial design: how many of its 10 starts the prior picks (``prior_init``). Its default
#: is the grid's lowest mean relative regret over budgets 10, 30 and 100, ties within :data:`TIE` going to the
#: fewest prior picks (:func:`choose_prior_init`), as for EPNAS's handover: the variant relying least on transfer.
PRIOR_INITS = (2, 3, 4, 5, 6, 8, 10)
PRIOR_INIT_GRID: dict[str, tuple[str, dict[str, Any]]] = {
    f"bananas_prior_p{k}": ("bananas_prior", {"prior_init": k}) for k in PRIOR_INITS
}
#: The methods a budget class's default is chosen from (by mean validation regret on the tuning datasets)
CANDIDATES = ("epnas", "epnas_cold", "bananas", "bananas_prior", "tpe", "evolution", "pnas", "zero_shot",
              "local_search", "random", "reinforce")  # fmt: skip


# ---------------------------------------------------------------------------- priors
def _train_prior(job: tuple[str, str]) -> str:
    """Train the leave-one-out prior of a dataset in a worker and save it to a file (returns the file)."""
    dataset, folder = job
    path = Path(folder) / f"prior_{dataset}.pt"
    save_torch_atomic(path, leave_one_out(dataset).state_dict())
    return str(path)


def _load_prior(dataset: str, folder: str | None) -> None:
    """Put the saved prior of ``dataset`` in this process's cache (so no job trains it again)."""
    if folder is None:
        return
    path = Path(folder) / f"prior_{dataset}.pt"
    if path.is_file():
        register_prior(dataset, TransferPrior.from_state_dict(load_torch(path, RuntimeError)))


# ---------------------------------------------------------------------------- NAS-Bench-Graph
def graph_job(job: tuple[str, str, str, int, int, dict[str, Any], str | None, int]) -> dict[str, Any]:
    """One search: (dataset, regime, method, seed, budget, knobs, prior folder, batch) -> best-so-far curves."""
    dataset, regime, method, seed, budget, knobs, folder, batch = job
    _load_prior(dataset, folder)
    space = get_space(f"nasbench-graph:{dataset}")
    cons = table_constraints(space, regime)
    t0 = time.perf_counter()
    res = run_search(get_method(method, space, cons, budget=budget, seed=seed, **knobs), workers=batch)
    best_valid, best_test, feasible = [], [], []
    cur: Any = None
    for ev in res.history:
        if ev.ok and math.isfinite(ev.perf) and cons.feasible(ev.resources) and (cur is None or ev.perf > cur.perf):
            cur = ev
        best_valid.append(None if cur is None else cur.perf)
        best_test.append(None if cur is None else cur.test_perf)
        feasible.append(cur is not None)
    return {"dataset": dataset, "regime": regime, "method": method, "seed": seed, "budget": budget,
            "knobs": knobs, "best_valid": best_valid, "best_test": best_test, "feasible": feasible,
            "evaluations": len(res.history), "failed": res.failed, "wall_s": time.perf_counter() - t0}  # fmt: skip


Methods = dict[str, tuple[str, dict[str, Any]]]  # label -> (method, knobs)


def anytime(method: str, knobs: dict[str, Any]) -> bool:
    """Whether one run at the largest budget gives every smaller budget's result: the method never reads its budget,
    or it is EPNAS whose stages put the whole budget in one stage on NAS-Bench-Graph (``stage_split`` auto/last;
    tested: the first k proposals of a run with budget B are those of a run with budget k)."""
    if method_class(method).anytime:
        return True
    return method in ("epnas", "epnas_cold") and knobs.get("stage_split", "auto") in ("auto", "last")


def plan(
    datasets: tuple[str, ...],
    seeds: int,
    budgets: tuple[int, ...],
    methods: Methods,
    folder: str | None,
    regimes: tuple[str, ...] = REGIME_NAMES,
) -> list[tuple[Any, ...]]:
    """Every job: anytime methods once at the largest budget, the others once per budget."""
    jobs = []
    for label, (method, knobs) in methods.items():
        runs = (max(budgets),) if anytime(method, knobs) else budgets
        for d in datasets:
            for reg in regimes:
                for s in range(seeds):
                    for b in runs:
                        jobs.append((label, (d, reg, method, s, b, knobs, folder, BATCH)))
    # seed by seed (so a run cut short, with --cache, has every method for its first seeds), slowest first within
    jobs.sort(key=lambda j: (j[1][3], COST_ORDER.get(j[1][2], 9), -j[1][4], j[1][0]))
    return jobs


def _at(run: dict[str, Any], budget: int) -> tuple[float | None, float | None, bool]:
    """(best valid, its test, feasible) after ``budget`` evaluations of a run (its last when it stopped early)."""
    i = min(budget, len(run["best_valid"])) - 1
    if i < 0:
        return None, None, False
    return run["best_valid"][i], run["best_test"][i], bool(run["feasible"][i])


def job_key(job: tuple[Any, ...]) -> str:
    """A file name for one search's result: every field of the job, EPNAS's shipped handover included (a knob's
    default is part of what ran)."""
    from mlsysopt.nas.epnas import HANDOVER

    dataset, regime, method, seed, budget, knobs, _, batch = job
    extra = {"handover_default": HANDOVER} if method == "epnas" else {}
    if batch != UNKEYED_BATCH:
        extra["batch"] = batch
    tag = json.dumps({**knobs, **extra}, sort_keys=True)
    return f"{method}-{dataset}-{regime}-s{seed}-b{budget}-{hashlib.sha1(tag.encode()).hexdigest()[:10]}.json"


def cached_job(item: tuple[tuple[Any, ...], str | None]) -> dict[str, Any]:
    """:func:`graph_job`, its result kept in the ``--cache`` folder (read back instead of searching again)."""
    job, cache = item
    path = None if cache is None else Path(cache) / job_key(job)
    if path is not None and path.is_file():
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    out = graph_job(job)
    if path is not None:
        write_json_atomic(path, out)
    return out


def search_all(datasets: tuple[str, ...], seeds: int, budgets: tuple[int, ...], methods: Methods,
               regimes: tuple[str, ...] = REGIME_NAMES, priors: Path | None = None,
               cache: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Run every job; return the per-cell metrics ``cells[label][budget] = [{dataset, regime, seed, ...}]``.
    ``priors``: a folder keeping the leave-one-out priors (``prior_<dataset>.pt``) across runs; missing ones are
    trained into it (default: a temporary folder). ``cache``: a folder keeping each search's result (a run cut
    short continues where it stopped; results are deterministic)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nas-priors-") as tmp, make_executor("local", JOB_WORKERS) as ex:
        folder = str(priors or tmp)
        needs_prior = any(method_class(m).uses_prior and k.get("prior", "auto") != "none" for m, k in methods.values())
        prior_s = 0.0
        if needs_prior:
            Path(folder).mkdir(parents=True, exist_ok=True)
            ex.map(_train_prior, [(d, folder) for d in datasets if not (Path(folder) / f"prior_{d}.pt").is_file()])
            prior_s = time.perf_counter() - t0
            print(f"  leave-one-out priors for {len(datasets)} dataset(s) in {prior_s:.0f} s")
        jobs = plan(datasets, seeds, budgets, methods, folder, regimes)
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        runs = ex.map(cached_job, [(j, None if cache is None else str(cache)) for _, j in jobs])
    print(f"  {len(jobs)} searches in {time.perf_counter() - t0:.0f} s")
    oracles = {}
    for d in datasets:
        space = get_space(f"nasbench-graph:{d}")
        for reg in regimes:
            oracles[(d, reg)] = TableOracle(space, table_constraints(space, reg))
    cells: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for (label, job), run in zip(jobs, runs, strict=True):
        d, reg, method, seed, b, knobs, _, _ = job
        oracle = oracles[(d, reg)]
        for budget in budgets:
            if (anytime(method, knobs) and budget <= b) or budget == b:
                valid, test, feasible = _at(run, budget)
                cells.setdefault(label, {}).setdefault(budget, []).append({
                    "dataset": d, "regime": reg, "seed": seed,
                    "val_regret": oracle.val_regret(valid if feasible else None),
                    "test_regret": oracle.best_test - (test if feasible and test is not None else 0.0),
                    "rank_pct": oracle.rank_pct(valid if feasible else None),
                    "top1": feasible and oracle.top1(valid),
                    "feasible": feasible,
                    "wall_s": run["wall_s"],
                })  # fmt: skip
    for per in cells.values():
        for lst in per.values():
            lst.sort(key=lambda c: (c["dataset"], c["regime"], c["seed"]))
    return {"cells": cells, "prior_s": prior_s, "searches": len(jobs),
            "oracle": {f"{d}/{r}": {"best_valid": o.best_valid, "best_test": o.best_test,
                                    "feasible_cells": o.feasible_cells} for (d, r), o in oracles.items()}}  # fmt: skip


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> list[float]:
    """``[mean(a) / mean(b), lo, hi]``: a paired bootstrap 95% interval over the cells (rows of a and b match)."""
    idx = rng.integers(0, len(a), (BOOTSTRAP, len(a)))
    num, den = a[idx].mean(1), b[idx].mean(1)
    ratios = num / np.where(den > 0, den, np.nan)
    lo, hi = np.nanpercentile(ratios, [2.5, 97.5])
    return [float(a.mean() / b.mean()) if b.mean() > 0 else math.inf, float(lo), float(hi)]


def regret_ratio(cells: dict[str, dict[int, list[dict[str, Any]]]], num: str, den: str, budget: int,
                 rng: np.random.Generator) -> list[float]:  # fmt: skip
    """:func:`bootstrap_ratio` of label ``num``'s validation regrets over ``den``'s at ``budget`` (the cells of
    :func:`search_all`, paired by dataset, regime and seed)."""
    a = np.array([c["val_regret"] for c in cells[num][budget]])
    return bootstrap_ratio(a, np.array([c["val_regret"] for c in cells[den][budget]]), rng)


def write_result(out: dict[str, Any], path: Path, t0: float) -> None:
    """A side script's JSON: ``out`` with its seconds since ``t0`` and the load at the end, written to ``path``."""
    out["seconds"] = time.perf_counter() - t0
    out["load_average_at_end"] = os.getloadavg()[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path} ({out['seconds']:.0f} s)")


def bootstrap_mean(a: np.ndarray, rng: np.random.Generator) -> list[float]:
    """``[mean, lo, hi]`` with a 95% bootstrap interval."""
    means = a[rng.integers(0, len(a), (BOOTSTRAP, len(a)))].mean(1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(a.mean()), float(lo), float(hi)]


Reference = str | dict[int, str]


def summarise(cells: dict[str, dict[int, list[dict[str, Any]]]], datasets: tuple[str, ...], budgets: tuple[int, ...],
              reference: Reference = "epnas", regimes: tuple[str, ...] = REGIME_NAMES) -> dict[str, Any]:  # fmt: skip
    """The issue's keys from the per-cell metrics; ``reference``: the method the ratios divide (one per budget:
    the default of each budget's class)."""
    rng = np.random.default_rng(0)
    labels = list(cells)
    out: dict[str, Any] = {k: {} for k in ("val_regret", "test_regret", "rank_pct", "ci95_val_regret",
                                           "ci95_val_regret_ratio", "per_regime")}  # fmt: skip
    for b in budgets:
        bk = str(b)
        for k in ("val_regret", "test_regret", "rank_pct", "ci95_val_regret", "per_regime"):
            out[k][bk] = {}
        for m in labels:
            c = cells[m][b]
            v = np.array([x["val_regret"] for x in c])
            out["val_regret"][bk][m] = float(v.mean())
            out["test_regret"][bk][m] = float(np.mean([x["test_regret"] for x in c]))
            out["rank_pct"][bk][m] = float(np.mean([x["rank_pct"] for x in c]))
            out["ci95_val_regret"][bk][m] = bootstrap_mean(v, rng)
            out["per_regime"][bk][m] = {
                reg: {d: float(np.mean([x["val_regret"] for x in c if x["regime"] == reg and x["dataset"] == d]))
                      for d in datasets}
                for reg in regimes
            }  # fmt: skip
        r = reference[b] if isinstance(reference, dict) else reference
        if r in cells:
            ref = np.array([x["val_regret"] for x in cells[r][b]])
            out["ci95_val_regret_ratio"][bk] = {
                m: bootstrap_ratio(ref, np.array([x["val_regret"] for x in cells[m][b]]), rng)
                for m in labels if m != r
            }  # fmt: skip
    top = max(budgets)
    out["top1pct_budget"] = top  # the figure is at 100 (the largest budget of a full run)
    out["top1pct_rate"] = {m: {d: float(np.mean([x["top1"] for x in cells[m][top] if x["dataset"] == d]))
                               for d in datasets} for m in labels}  # fmt: skip
    out["feasible_rate_per_budget"] = {str(b): {m: float(np.mean([x["feasible"] for x in cells[m][b]]))
                                                for m in labels} for b in budgets}  # fmt: skip
    out["feasible_rate"] = {m: float(np.mean([x["feasible"] for b in budgets for x in cells[m][b]])) for m in labels}
    out["wall_s"] = {m: float(np.mean([x["wall_s"] for x in cells[m][top]])) for m in labels}
    return out


def targets(summary: dict[str, Any], datasets: tuple[str, ...]) -> dict[str, Any]:
    """The issue's targets, each with the measured figure."""
    b30 = summary["val_regret"].get("30", {})
    ratios = summary["ci95_val_regret_ratio"].get("30", {})
    base = [m for m in TARGET_BASELINES if m in b30]
    best = min(base, key=lambda m: b30[m]) if base else None
    ratio = ratios.get(best) if best else None
    top = summary["top1pct_rate"].get("epnas", {})
    return {
        "best_baseline_at_30": best,
        "epnas_over_best_baseline_at_30": ratio,
        "val_regret_30_at_most_half_the_best_baseline": bool(ratio and ratio[0] <= 0.5),
        "interval_upper_end_below_1": bool(ratio and ratio[2] < 1.0),
        "top1pct_in_80pct_of_runs_on_every_dataset_at_100": (  # None: no run at 100 evaluations
            None if summary.get("top1pct_budget") != 100 else bool(top) and all(top.get(d, 0) >= 0.8 for d in datasets)
        ),
        "epnas_top1pct_rate": top,
        "all_returned_feasible": all(v == 1.0 for v in summary["feasible_rate"].values()),
    }


def targets34(summary: dict[str, Any], defaults: dict[int, str], datasets: tuple[str, ...]) -> dict[str, Any]:
    """Issue #34's targets: the default's ratio to every baseline has an upper end < 1 at 10 and 30 and a mean
    <= 1.0 at 100; its top-1% rate >= 0.95 on every dataset (at the largest budget)."""
    out: dict[str, Any] = {"default_method": {str(b): m for b, m in defaults.items()}}
    for b in defaults:
        ratios = summary["ci95_val_regret_ratio"].get(str(b), {})
        worst_hi = max(ratios.items(), key=lambda kv: kv[1][2]) if ratios else None
        worst_mean = max(ratios.items(), key=lambda kv: kv[1][0]) if ratios else None
        if b in (10, 30):
            out[f"upper_end_below_1_at_{b}"] = bool(ratios) and all(v[2] < 1.0 for v in ratios.values())
        elif b == 100:
            out["mean_ratio_at_most_1_at_100"] = bool(ratios) and all(v[0] <= 1.0 for v in ratios.values())
        out[f"worst_baseline_at_{b}"] = {"by_upper_end": worst_hi, "by_mean": worst_mean}
    top = summary["top1pct_budget"]
    rate = summary["top1pct_rate"].get(defaults.get(top, ""), {})
    out["default_top1pct_rate"] = rate
    out["top1pct_at_least_095_on_every_dataset"] = bool(rate) and all(rate.get(d, 0) >= 0.95 for d in datasets)
    out["top1pct_budget"] = top
    return out


def transfer_ablation(cells: dict[str, dict[int, list[dict[str, Any]]]], budgets: tuple[int, ...]) -> dict[str, Any]:
    """Does each transfer component add, per budget? The paired ratio of validation regret with it / without it
    (``TRANSFER_ABLATIONS``), with its 95% bootstrap interval; ``adds``: the interval's upper end is below 1 (the
    library's rule reads it: :func:`mlsysopt.nas.defaults.choose_defaults`)."""
    rng = np.random.default_rng(1)
    out: dict[str, Any] = {}
    for b in budgets:
        row = {}
        for m, without in TRANSFER_ABLATIONS.items():
            if m in cells and without in cells and b in cells[m] and b in cells[without]:
                ratio = regret_ratio(cells, m, without, b, rng)
                row[m] = {"without": without, "ratio": ratio, "adds": bool(ratio[2] < 1.0)}
        out[str(b)] = row
    return out


def nasbench_graph_legacy(cells: dict[str, Any], datasets: tuple[str, ...], top: int) -> dict[str, Any]:
    """The old per-dataset block (test regret at the largest budget, feasible rate), now over both regimes."""
    out: dict[str, Any] = {}
    for d in datasets:
        per: dict[str, Any] = {"regret": {}, "regret_std": {}, "val_regret": {}, "feasible_rate": {}}
        for m, by_budget in cells.items():
            c = [x for x in by_budget[top] if x["dataset"] == d]
            per["regret"][m] = float(np.mean([x["test_regret"] for x in c]))
            per["regret_std"][m] = float(np.std([x["test_regret"] for x in c]))
            per["val_regret"][m] = float(np.mean([x["val_regret"] for x in c]))
            per["feasible_rate"][m] = float(np.mean([x["feasible"] for x in c]))
        out[d] = per
    return out


# ---------------------------------------------------------------------------- main
def _print_table(summary: dict[str, Any], budgets: tuple[int, ...]) -> None:
    for b in budgets:
        row = summary["val_regret"][str(b)]
        print(
            f"  validation regret @{b}: "
            + "  ".join(f"{m} {v:.4f}" for m, v in sorted(row.items(), key=lambda x: x[1]))
        )


def choose_handover(rel: dict[str, float]) -> str:
    """The grid label to ship: the earliest handover (0, never, last) within :data:`TIE` of the lowest ``rel``."""
    best = min(rel.values())
    tied = [g for g in rel if rel[g] <= best * (1 + TIE)]
    return min(tied, key=lambda g: TUNING_GRID[g][1]["handover"] or math.inf)


def choose_prior_init(rel: dict[str, float]) -> str:
    """The grid label to ship: the fewest prior picks within :data:`TIE` of the lowest ``rel``."""
    best = min(rel.values())
    tied = [g for g in rel if rel[g] <= best * (1 + TIE)]
    return min(tied, key=lambda g: PRIOR_INIT_GRID[g][1]["prior_init"])


def relative_regret(vr: dict[str, dict[str, float]], grid: dict[str, Any], budgets: tuple[int, ...]) -> dict[str, Any]:
    """Each variant's mean over ``budgets`` of its validation regret relative to the grid's best at that budget."""
    return {g: float(np.mean([vr[str(b)][g] / min(vr[str(b)][h] for h in grid) for b in budgets])) for g in grid}


def tune(
    seeds: int, budgets: tuple[int, ...] = BUDGETS, priors: Path | None = None, cache: Path | None = None
) -> dict[str, Any]:
    """Issue #34's tuning study on physics, arxiv and proteins only: EPNAS's ``handover`` (:data:`TUNING_GRID`),
    BANANAS-with-prior's ``prior_init`` (:data:`PRIOR_INIT_GRID`) and every candidate method, at ``budgets``.
    Returns the grids' figures, the chosen handover and prior_init (lowest mean over the budgets of each variant's
    regret relative to the best variant of its grid at that budget; ties as the ``choose_*`` rules say) and the best
    candidate per budget (``epnas`` and ``bananas_prior`` read as their chosen variants): the default of each budget
    class."""
    grids = dict(TUNING_GRID) | dict(PRIOR_INIT_GRID)
    methods = grids | {m: (m, {}) for m in CANDIDATES if m not in ("epnas", "bananas_prior")}
    found = search_all(TUNING_DATASETS, seeds, budgets, methods, priors=priors, cache=cache)
    summary = summarise(found["cells"], TUNING_DATASETS, budgets, reference="epnas_h0")
    _print_table(summary, budgets)
    vr = summary["val_regret"]
    rel = relative_regret(vr, TUNING_GRID, budgets)
    rel_p = relative_regret(vr, PRIOR_INIT_GRID, budgets)
    chosen, chosen_p = choose_handover(rel), choose_prior_init(rel_p)
    read_as = {chosen: "epnas", chosen_p: "bananas_prior"}
    best: dict[str, Any] = {}
    for b in budgets:
        row = {read_as.get(m, m): v for m, v in vr[str(b)].items() if m in read_as or m not in grids}
        best[str(b)] = {"method": min(row, key=lambda m: row[m]), "val_regret": row}
    print(
        f"  handover: {chosen} (relative regret {rel[chosen]:.3f}); prior_init: {chosen_p} (relative regret "
        f"{rel_p[chosen_p]:.3f}); best per budget: " + ", ".join(f"{b}: {v['method']}" for b, v in best.items())
    )
    return {"datasets": list(TUNING_DATASETS), "seeds": seeds, "budgets": list(budgets),
            "grid": {k: v[1] for k, v in grids.items()}, "handover_relative_regret": rel,
            "chosen_handover": TUNING_GRID[chosen][1]["handover"], "prior_init_relative_regret": rel_p,
            "chosen_prior_init": PRIOR_INIT_GRID[chosen_p][1]["prior_init"], "best_per_budget": best,
            "summary": summary, "searches": found["searches"]}  # fmt: skip


def main() -> None:
    """Run the benchmark and write the JSON."""
    global JOB_WORKERS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 datasets, the tight regime, 2 seeds, budgets 10 and 30; digits budget 6"
    )
    parser.add_argument("--tune", action="store_true", help="only the tuning study on physics, arxiv and proteins")
    parser.add_argument("--seeds", type=int, help="seeds per (dataset, regime) (default 10; quick 2; tune quick 3)")
    parser.add_argument("--jobs", type=int, default=JOB_WORKERS, help="processes running searches (results do not "
                        "depend on it: every search runs alone in one)")  # fmt: skip
    parser.add_argument("--budgets", help="comma-separated evaluation budgets (default 10,30,100; quick 10,30)")
    parser.add_argument("--priors", type=Path, help="folder keeping the leave-one-out priors across runs")
    parser.add_argument("--cache", type=Path, help="folder keeping each search's result (resumable runs)")
    parser.add_argument("--no-digits", action="store_true", help="skip the digits part (real training)")
    parser.add_argument("--no-own", action="store_true", help="skip the own-objective part (scikit-learn vs Optuna)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    args = parser.parse_args()
    if args.seeds is not None and args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    JOB_WORKERS = args.jobs
    quick = args.quick
    t0 = time.perf_counter()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    meta = {"command": " ".join(["python", *sys.argv]), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(), "load_average_at_start": load}  # fmt: skip
    if args.tune:
        seeds = args.seeds or (3 if quick else 10)
        t_budgets = tuple(sorted({int(b) for b in args.budgets.split(",")})) if args.budgets else BUDGETS
        print(
            f"tuning: {len(TUNING_GRID)} EPNAS and {len(PRIOR_INIT_GRID)} BANANAS-with-prior variants on "
            f"{', '.join(TUNING_DATASETS)}, {seeds} seeds"
        )
        tuning = tune(seeds, t_budgets, args.priors, args.cache)
        result = {"tuning": tuning, "mode": "tune-quick" if quick else "tune", **meta}
        result["seconds"] = {"total": time.perf_counter() - t0}
        write_json_atomic(args.out, result)
        print(f"wrote {args.out} ({result['seconds']['total']:.0f} s)")
        return
    datasets = DATASETS[:2] if quick else DATASETS
    regimes = REGIME_NAMES[:1] if quick else REGIME_NAMES
    seeds = args.seeds or (2 if quick else 10)
    budgets = BUDGETS[:2] if quick else BUDGETS
    if args.budgets:
        try:
            budgets = tuple(sorted({int(b) for b in args.budgets.split(",")}))
        except ValueError:
            parser.error(f"--budgets must be comma-separated integers, got {args.budgets!r}")
        if budgets[0] < 1:
            parser.error(f"--budgets must be >= 1, got {args.budgets!r}")
    d_budget, d_epochs = (6, 2) if quick else (30, 4)
    print(f"NAS-Bench-Graph: {len(datasets)} datasets x {len(regimes)} regime(s) x {len(METHODS)} methods x "
          f"{seeds} seeds, budgets {budgets}")  # fmt: skip
    found = search_all(datasets, seeds, budgets, {m: (m, {}) for m in METHODS}, regimes, args.priors, args.cache)
    graph_s = time.perf_counter() - t0
    defaults = {b: default_method(b) for b in budgets}  # the rule of `nas search --method auto`
    summary = summarise(found["cells"], datasets, budgets, reference=defaults, regimes=regimes)
    _print_table(summary, budgets)
    print("digits: skipped" if args.no_digits else f"digits: budget {d_budget}, {d_epochs} epochs")
    t1 = time.perf_counter()
    dig = None if args.no_digits else digits(d_budget, d_epochs)
    t2 = time.perf_counter()
    own_seeds, own_n = (2, 8) if quick else (10, 30)
    print("own objective: skipped" if args.no_own else f"own objective: {own_seeds} seeds x {own_n} trainings")
    own = None if args.no_own else own_objective(own_seeds, own_n)
    top = max(budgets)
    legacy = nasbench_graph_legacy(found["cells"], datasets, top)
    tg = targets(summary, datasets)
    if dig is not None:
        tg["all_returned_feasible"] = tg["all_returned_feasible"] and all(r["feasible"] for r in dig["runs"].values())
    result = {
        **{
            k: summary[k]
            for k in (
                "val_regret",
                "ci95_val_regret_ratio",
                "top1pct_rate",
                "top1pct_budget",
                "feasible_rate",
                "test_regret",
                "rank_pct",
                "ci95_val_regret",
                "per_regime",
                "feasible_rate_per_budget",
                "wall_s",
            )
        },
        "nasbench_graph": legacy,
        "mean_regret": {m: float(np.mean([legacy[d]["regret"][m] for d in datasets])) for m in METHODS},
        "oracle": found["oracle"],
        "digits": dig,
        "own_objective": own,
        "default_method": {str(b): m for b, m in defaults.items()},
        "default_rule": rule_text(),
        "targets": tg,
        "targets_34": targets34(summary, defaults, datasets),
        "transfer_ablation": transfer_ablation(found["cells"], budgets),
        "settings": {
            "datasets": list(datasets),
            "tuning_datasets": list(TUNING_DATASETS),
            "methods": list(METHODS),
            "regimes": {
                r: "latency and params <= lower quartiles" if r == "tight" else "params <= 10th percentile"
                for r in regimes
            },
            "seeds": seeds,
            "budgets": list(budgets),
            "batch": BATCH,
            "job_workers": JOB_WORKERS,
            "bootstrap_resamples": BOOTSTRAP,
            "prior_training_s": found["prior_s"],
            "searches": found["searches"],
        },
        "mode": "quick" if quick else "full",
        **meta,
        "seconds": {
            "nasbench_graph": graph_s,
            "digits": t2 - t1,
            "own_objective": time.perf_counter() - t2,
            "total": time.perf_counter() - t0,
        },
    }
    write_json_atomic(args.out, result)
    r30 = tg["epnas_over_best_baseline_at_30"]
    if r30:
        print(f"EPNAS / {tg['best_baseline_at_30']} at 30: {r30[0]:.3f} [{r30[1]:.3f}, {r30[2]:.3f}]")
    print(
        f"top-1% rate at {top} ({defaults[top]}): "
        + "  ".join(f"{d} {v:.2f}" for d, v in summary["top1pct_rate"][defaults[top]].items())
    )
    if dig is not None:
        print(f"digits: epnas {dig['epnas_acc']}, random {dig['random_acc']}, speed-up {dig['speedup_2_workers']:.2f}x")
    t34 = result["targets_34"]
    print(f"defaults {t34['default_method']}; upper end < 1 at 10: {t34.get('upper_end_below_1_at_10')}, at 30: "
          f"{t34.get('upper_end_below_1_at_30')}; mean <= 1 at 100: {t34.get('mean_ratio_at_most_1_at_100')}; "
          f"top-1% >= 0.95 everywhere: {t34['top1pct_at_least_095_on_every_dataset']}")  # fmt: skip
    for b, row in result["transfer_ablation"].items():
        print(f"transfer ablation @{b}: " + "  ".join(
            f"{m}/{a['without']} {a['ratio'][0]:.2f} [{a['ratio'][1]:.2f}, {a['ratio'][2]:.2f}]"
            f"{' adds' if a['adds'] else ''}" for m, a in row.items()))  # fmt: skip
    if own is not None:
        print(f"own objective: mlsysopt {own['summary']['mlsysopt']['mean_best']:.4f} vs optuna "
              f"{own['summary']['optuna_tpe']['mean_best']:.4f}; overhead ratio {own['overhead_ratio']:+.2f}; "
              f"CLI == Study: {own['cli_equals_study']}")  # fmt: skip
    print(f"wrote {args.out} ({result['seconds']['total']:.0f} s)")


if __name__ == "__main__":
    main()
