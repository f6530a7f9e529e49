"""The placement experiments the CLI, the demo and the benchmark share: methods by name, one search, compare.

* :data:`~mlsysopt.placement.methods.METHODS` is the one registry of placement methods (the baselines, saga's
  schedulers and ``saga_best``, the plain hill climb, GiPH — the default — and the paper's GiPH variants);
  :func:`~mlsysopt.placement.methods.run_method` runs one of them by name (both re-exported here).
* :func:`compare` runs every method over several seeds with one simulator budget (and optionally a wall-clock
  timeout per search) and summarizes each one (:func:`method_summary`: makespans, ratio to HEFT, steps to best,
  the mean search curve). Given a parallel ``mlsysopt.runtime`` executor (local pool or Ray) it runs the
  (method, seed) searches there as :mod:`~mlsysopt.placement.tasks`; the results are the same as serially.
* The adaptation experiments (``adapt``, the benchmark's ``adaptivity``) and cluster changes are in
  :mod:`mlsysopt.placement.adaptation`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import PlacementResult, default_budget
from mlsysopt.placement.methods import (  # the registry, re-exported: experiments name methods through it
    HEFT_REFERENCE,
    METHODS,
    heft_makespan,
    heft_placement,
    run_method,
    select_methods,
)
from mlsysopt.placement.tasks import PolicySpec, SearchTask, run_search

__all__ = ["METHODS", "Comparison", "compare", "comparison", "heft_makespan", "heft_placement", "run_method"]
from mlsysopt.placement.baselines.fastest_device import fastest_placement
from mlsysopt.placement.baselines.portfolio import PORTFOLIO
from mlsysopt.placement.baselines.saga_schedulers import (
    SAGA_SCHEDULERS,
    TIME_LIMIT_S,
    SagaFailed,
    SagaSkipped,
    check_runnable,
)
from mlsysopt.store.records import record_comparison

if TYPE_CHECKING:
    from mlsysopt.placement.giph import GiPH
    from mlsysopt.runtime import Executor


def comparison(problem: PlacementProblem, result: PlacementResult) -> dict[str, Any]:
    """What ``placement place`` reports beside a result: the portfolio's members, the start, the final placement.

    A method that ran the portfolio (``giph``, ``local_search``) reports its members; for any other method HEFT
    and the all-on-the-fastest-device placement are evaluated here for reference. ``better`` lists the members
    that beat the result (empty for the portfolio methods, which never return worse than their start).

    Args:
        problem: The problem that was solved.
        result: The placer's result on it.

    Returns:
        ``members`` (name -> makespan), ``saga_best_scheduler``, ``start`` and ``start_makespan`` (the portfolio's
        best, when one ran), ``final`` (the result's makespan), ``final_over_heft`` and ``better``.
    """

    portfolio = result.info.get("portfolio", {})
    given = portfolio.get("makespans", {})
    members = {k: float(v) for k, v in given.items() if k in PORTFOLIO or k in ("init", "keep")}
    if "heft" not in members:
        members["heft"] = heft_makespan(problem)
    if "fastest_device" not in members:
        members["fastest_device"] = problem.makespan(fastest_placement(problem))
    start = portfolio.get("best")
    out = {
        "members": members,
        "saga_best_scheduler": portfolio.get("saga_best_scheduler"),
        "start": start,
        "start_makespan": given.get(start) if start else None,
        "final": float(result.makespan),
        "final_over_heft": float(result.makespan / members["heft"]) if members["heft"] > 0 else float("nan"),
        "better": sorted(k for k, v in members.items() if v < result.makespan * (1 - 1e-12)),
        "execution": problem.execution,
        "heft_reference": HEFT_REFERENCE[problem.execution],
    }
    return out


@dataclass
class Comparison:
    """Every method's searches on one problem with one budget: the runs, their time, and HEFT as the reference.

    Args:
        budget: Simulator evaluations per search.
        seeds: The seeds every method ran with.
        heft_makespan: HEFT's makespan on the problem (the reference of the ratios).
        cp_min: The CP_MIN lower bound of the problem.
        runs: Method -> its results, one per seed.
        seconds: Method -> wall-clock seconds of all its searches.
        skipped: Method -> why it did not run.
        execution: ``fifo`` or ``ordered``: the semantics every makespan was simulated in.
    """

    budget: int
    seeds: list[int]
    heft_makespan: float
    cp_min: float
    runs: dict[str, list[PlacementResult]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why it did not run
    execution: str = "fifo"

    @property
    def summary(self) -> dict[str, dict[str, Any]]:
        """Per method: :func:`method_summary` of its runs."""
        return {m: method_summary(r, self.heft_makespan, self.seconds[m]) for m, r in self.runs.items()}

    @property
    def best(self) -> str:
        """The method with the lowest mean makespan (a saga schedule that left tasks out is never ranked)."""
        valid = [m for m in self.runs if all(r.info.get("valid", True) for r in self.runs[m])] or list(self.runs)
        return min(valid, key=lambda m: float(np.mean([r.makespan for r in self.runs[m]])))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: budget, seeds, methods, HEFT's makespan, CP_MIN and the per-method summaries."""
        return {
            "seeds": self.seeds,
            "budget": self.budget,
            "methods": list(self.runs),
            "heft_makespan": self.heft_makespan,
            "execution": self.execution,
            "heft_reference": HEFT_REFERENCE[self.execution],
            "cp_min": self.cp_min,
            "results": self.summary,
            "skipped": self.skipped,
        }


def compare(
    problem: PlacementProblem | CompGraph,
    cluster: DeviceCluster | None = None,
    methods: Sequence[str] | None = None,
    seeds: int | Sequence[int] = 3,
    budget: int | None = None,
    giph: GiPH | None = None,
    on_run: Callable[[int, str, int], None] | None = None,
    executor: Executor | None = None,
    timeout: float | None = None,
) -> Comparison:
    """Every method × every seed with one simulator budget (default: ``default_budget``) on one problem.

    Args:
        problem: a PlacementProblem, or a graph (then give ``cluster``).
        methods: method names (default: every default method; GiPH's are skipped without ``giph``).
        seeds: the seeds, or how many (0, 1, ...).
        budget: simulator evaluations per search.
        giph: the GiPH placer (its policy) for the GiPH methods.
        on_run: called as ``on_run(runs done, method, seed)`` before each search (each batch, in parallel).
        executor: a parallel ``mlsysopt.runtime`` executor to run the searches on (the caller closes it); None
            or a serial one: in this process. Every executor gives the same result.
        timeout: seconds of wall clock per search (it ends with the best placement so far).
    """
    problem = PlacementProblem.of(problem, cluster)
    names, skipped = select_methods(methods, giph is not None)
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seed_list:
        raise MlsysoptError("compare needs at least one seed")
    spend = default_budget(problem.graph) if budget is None else int(budget)
    heft_ms = heft_makespan(problem)
    no_policy = "needs a GiPH policy (--policy)"
    result = Comparison(spend, seed_list, heft_ms, problem.cp_min, skipped=dict.fromkeys(skipped, no_policy))
    result.execution = problem.execution
    names = _runnable(names, problem, result.skipped)
    pairs = [(name, s) for name in names for s in seed_list]
    if executor is None or executor.workers <= 1:
        done = 0
        for name in names:
            t0 = time.perf_counter()
            result.runs[name] = []
            for s in seed_list:
                if on_run is not None:
                    on_run(done, name, s)
                try:
                    result.runs[name].append(run_method(name, problem, spend, s, giph, timeout=timeout))
                except (SagaFailed, SagaSkipped) as exc:  # saga's bug or limit on this problem: a row, not a crash
                    result.skipped[name] = str(exc)
                done += 1
            result.seconds[name] = time.perf_counter() - t0
            if name in result.skipped:
                del result.runs[name], result.seconds[name]
        record_comparison(result)  # each search a trial of the open run's study (mlsysopt.store)
        return result
    spec = PolicySpec.of(giph) if giph is not None and any(METHODS[m].needs_policy for m in names) else None
    g, c = problem.graph, problem.cluster
    tasks = [
        SearchTask(m, g, c, spend, s, spec if METHODS[m].needs_policy else None, timeout, problem.execution)
        for m, s in pairs
    ]
    outcomes: list[tuple[PlacementResult, float]] = []
    for lo in range(0, len(tasks), executor.workers):  # batches of one task per worker, for progress reports
        if on_run is not None:
            on_run(lo, *pairs[lo])
        outcomes += executor.map(run_search, tasks[lo : lo + executor.workers])
    for name in names:
        result.runs[name], result.seconds[name] = [], 0.0
    for (name, _), (run, seconds) in zip(pairs, outcomes, strict=True):
        if isinstance(run, str):  # a saga scheduler that failed or was skipped in its worker: why
            result.skipped[name] = run
        else:
            result.runs[name].append(run)
        result.seconds[name] += seconds
    for name in list(result.skipped):
        result.runs.pop(name, None)
        result.seconds.pop(name, None)
    record_comparison(result)
    return result


def _runnable(names: list[str], problem: PlacementProblem, skipped: dict[str, str]) -> list[str]:
    """``names`` without the saga schedulers that cannot run on ``problem`` (each added to ``skipped``, with why)."""

    keep = []
    for name in names:
        if name.startswith("saga_") and name[5:] in SAGA_SCHEDULERS:
            try:
                check_runnable(name[5:], problem, _saga_limit())
            except SagaSkipped as exc:
                skipped[name] = str(exc)
                continue
        keep.append(name)
    return keep


def _saga_limit() -> float:

    return TIME_LIMIT_S


def method_summary(runs: list[PlacementResult], heft_makespan: float, seconds: float) -> dict[str, Any]:
    """Mean/min makespan, ratio to HEFT and steps-to-best of one method over seeds, and its mean search curve.

    Args:
        runs: The method's results, one per seed (at least one).
        heft_makespan: HEFT's makespan on the problem (ratios are NaN when it is 0).
        seconds: Wall-clock seconds of all the runs.

    Returns:
        JSON-ready dict: ``valid`` and ``missing_tasks`` (a saga schedule that left tasks out is invalid),
        ``mean_makespan``, ``min_makespan``, ``std_makespan``, ``mean_ratio_to_heft``,
        ``mean_steps_to_best``, per-seed ``steps_to_best``/``makespans``/``evaluations``/``stopped_by``,
        ``seconds``, ``curve`` (see :func:`mean_curve`) and ``info`` when a run reported any.
    """
    ms = np.array([r.makespan for r in runs], dtype=np.float64)
    steps = [r.steps_to_best for r in runs]
    missing = max(int(r.info.get("missing_tasks", 0)) for r in runs)
    return {
        "valid": missing == 0,  # False: a saga schedule that left tasks out (never ranked)
        "missing_tasks": missing,
        "mean_makespan": float(ms.mean()),
        "min_makespan": float(ms.min()),
        "std_makespan": float(ms.std()),
        "mean_ratio_to_heft": float((ms / heft_makespan).mean()) if heft_makespan > 0 else float("nan"),
        "mean_steps_to_best": float(np.mean(steps)),
        "steps_to_best": steps,
        "makespans": ms.tolist(),
        "evaluations": [r.evaluations for r in runs],
        "stopped_by": [r.stopped_by for r in runs],  # per seed: "budget" or "timeout"
        "seconds": seconds,
        "curve": mean_curve([r.history for r in runs]),
        **({"info": [r.info for r in runs]} if any(r.info for r in runs) else {}),
    }


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """Element-wise mean of best-so-far curves of different lengths (each padded with its last value).

    Args:
        curves: Best makespan after each evaluation, one sequence per run; empty ones are ignored.

    Returns:
        The mean curve, as long as the longest input (empty when every input is empty).
    """
    curves = [list(c) for c in curves if len(c)]
    if not curves:
        return []
    n = max(len(c) for c in curves)
    padded = np.array([c + [c[-1]] * (n - len(c)) for c in curves], dtype=np.float64)
    return padded.mean(axis=0).tolist()
