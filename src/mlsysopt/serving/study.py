"""Simulator studies: every tuner x seed on the simulated engine, judged by exhaustive tables, on any executor.

:func:`exhaustive_tables` simulates every configuration of the space at each rate (chunks of configurations are
independent tasks); :func:`run_study` runs every (tuner, seed) pair against those tables (each an independent
task, deterministic given its seed) and reports, per tuner, the median measurements until the best-so-far is truly
within 5% of the optimum (``evals_to_5pct``) and, after a fixed number at the first rate, of the second rate's
optimum (``shift``). Both go through :mod:`mlsysopt.runtime` executors, so ``--backend ray`` runs them on a Ray
cluster unchanged, with the same results as serial or a local pool. ``mlsysopt serving study`` (:class:`StudyJob`)
and ``benchmarks/serving.py`` call these. The numbers are simulated (a SimPy model of the engine).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import Executor
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning import evals_to_within, tune

if TYPE_CHECKING:
    from mlsysopt.serving.prior import Prior, TaskPrior

TOL = 0.05
_COLS = ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "throughput", "saturated", "offered_rps")


class TableBackend(Backend):
    """Answers from exhaustive tables of deterministic simulator measurements (rows in the space's order)."""

    def __init__(self, tables: dict[float, np.ndarray], space: Space, cores: int) -> None:
        self.tables = tables
        self.space = space
        self.cores = cores

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """The tabled measurement of ``config`` at ``workload``'s rate."""
        row = self.tables[workload.rate][self.space.index(config)]
        v = dict(zip(_COLS, row.tolist(), strict=True))
        return Measurement(
            config=config, workload=workload, mean_ms=v["mean_ms"], p50_ms=v["p50_ms"], p95_ms=v["p95_ms"],
            p99_ms=v["p99_ms"], throughput=v["throughput"], violation_rate=None, mean_queue=0.0, max_queue=0,
            n_requests=0, completed=0, dropped=0, saturated=bool(v["saturated"]), wall_s=0.0,
            offered_rps=v["offered_rps"],
        )  # fmt: skip


def table_chunk(args: tuple[ServiceProfile, list[Config], Workload, int, int]) -> np.ndarray:
    """Task: simulate ``configs`` at one workload; rows of :data:`_COLS`."""
    # deferred: imports simpy
    from mlsysopt.serving.simulator import SimulatedEngine

    profile, configs, workload, n_requests, seed = args
    sim = SimulatedEngine(profile, n_requests=n_requests, seed=seed)
    rows = []
    for c in configs:
        m = sim.measure(c, workload)
        rows.append([m.mean_ms, m.p50_ms, m.p95_ms, m.p99_ms, m.throughput, float(m.saturated), m.offered_rps])
    return np.array(rows, dtype=np.float64).reshape(-1, len(_COLS))


def exhaustive_tables(
    profile: ServiceProfile, space: Space, rates: Sequence[float], n_requests: int, executor: Executor, seed: int = 0
) -> dict[float, np.ndarray]:
    """Every configuration of ``space`` simulated at every rate, split into one task per chunk of configurations.

    Args:
        profile: Service profile the simulator runs.
        space: The configurations to simulate.
        rates: Arrival rates in req/s.
        n_requests: Requests per simulated window.
        executor: Runs the chunks (local processes or Ray).
        seed: Seed of the arrivals.

    Returns:
        dict[float, np.ndarray]: Per rate, one row per configuration (space order) with ``mean_ms``, ``p50_ms``,
        ``p95_ms``, ``p99_ms``, ``throughput``, ``saturated`` (0/1) and ``offered_rps``.

    Shapes:
        value: (space.size, 7) float64
    """
    configs = space.configs()
    parts = max(1, executor.workers * 2)
    chunks = [configs[i::parts] for i in range(parts)]
    items = [(profile, ch, Workload(r), n_requests, seed) for r in rates for ch in chunks]
    results = executor.map(table_chunk, items)
    tables = {}
    for k, r in enumerate(rates):
        table = np.zeros((space.size, len(_COLS)))
        for j, ch in enumerate(chunks):
            idx = [space.index(c) for c in ch]
            table[idx] = results[k * parts + j]
        tables[float(r)] = table
    return tables


class SerialTables:
    """Exhaustive tables simulated in this process (small studies, the demo), their backend and true scores."""

    def __init__(
        self, profile: ServiceProfile, space: Space, rates: Sequence[float], n_requests: int = 400, seed: int = 0
    ) -> None:
        self.profile, self.space = profile, space
        configs = space.configs()
        self.tables = {float(r): table_chunk((profile, configs, Workload(r), n_requests, seed)) for r in rates}

    def backend(self) -> TableBackend:
        """A backend answering from the tables."""
        return TableBackend(self.tables, self.space, self.profile.cores)

    def scores(self, rate: float, objective: Objective) -> list[float]:
        """The true score of every configuration (space order) at ``rate``."""
        backend = self.backend()
        return [objective.score(backend.measure(c, Workload(rate))) for c in self.space]


WARM = "_warm"  # a tuner label ending in it: the tuner given the study's prior (e.g. ``rrl_warm``, ``gp_warm``)
WARM_LABELS = ("rrl_warm", "gp_warm", "tpe_warm")
#: tuners that keep what they learned when the workload changes (the others start over; their ``shift`` is run
#: at rate B from a fresh start, which is what they do after any number of measurements at A)
CARRY_OVER = ("rrl",)


def tuner_name(label: str) -> tuple[str, bool]:
    """``rrl_warm`` -> (``rrl``, True); ``gp`` -> (``gp``, False); a ``:TAG`` naming a variant is dropped."""
    label = label.partition(":")[0]
    return (label[: -len(WARM)], True) if label.endswith(WARM) else (label, False)


def study_run(args: tuple) -> dict[str, Any]:
    """Task: one (tuner, seed): measurements to within 5% at rate A, and at rate B after ``pre`` at A."""

    label, seed, tables, space, objective, ra, rb, cap, pre, cores, prior, knobs = args
    backend = TableBackend(tables, space, cores)
    truth = {r: [objective.score(backend.measure(c, Workload(r))) for c in space] for r in tables}
    opt = {r: min(v) for r, v in truth.items()}
    wa, wb = Workload(ra), Workload(rb)
    with torch_threads(1):
        t0 = time.process_time()
        first = _evals_until(label, seed, space, objective, backend, [(wa, cap)], truth[ra], opt[ra], 0, prior, knobs)
        t1 = time.process_time()
        if tuner_name(label)[0] in CARRY_OVER:
            sched, start = [(wa, pre), (wb, cap)], pre
        else:  # it starts over when the workload changes: what it measured at A cannot matter at B
            sched, start = [(wb, cap)], 0
        shift = _evals_until(label, seed, space, objective, backend, sched, truth[rb], opt[rb], start, prior, knobs)
    return {
        "tuner": label,
        "seed": seed,
        "evals_to_5pct": first,
        "shift": shift,
        "tuner_cpu_s_per_measurement": (t1 - t0) / max(first or cap, 1),
    }


def _evals_until(
    label: str,
    seed: int,
    space: Space,
    objective: Objective,
    backend: Backend,
    schedule: list[tuple[Workload, int]],
    truth: list[float],
    opt: float,
    start: int,
    prior: TaskPrior | None = None,
    knobs: dict[str, Any] | None = None,
) -> int | None:

    def score(c: Config) -> float:
        return truth[space.index(c)]

    def reached(s: Any) -> bool:  # stop the run as soon as the number is known
        return s.index >= start and evals_to_within([s], score, opt, TOL) == 1

    name, warm = tuner_name(label)
    extra = {**(knobs or {}), **({"prior": prior} if warm else {})}
    res = tune(get_tuner(name, space, objective, seed=seed, **extra), backend, schedule, until=reached)
    return evals_to_within(res.steps, score, opt, TOL, start)


def _optimum(tables: dict[float, np.ndarray], space: Space, objective: Objective, rate: float) -> float:
    table = TableBackend(tables, space, 1)
    return float(min(objective.score(table.measure(c, Workload(rate))) for c in space))


def default_rates(profile: ServiceProfile) -> tuple[float, float]:
    """Rate A keeps 40% of the cores busy with single-row single-thread batches; rate B = 1.5 x A."""
    a = round(0.4 * profile.cores * 1000.0 / profile.service_ms(1, 1, 1), -1) or 10.0
    return a, round(1.5 * a, -1) or 15.0


def run_study(
    profile: ServiceProfile,
    space: Space,
    tuners: Sequence[str],
    seeds: Sequence[int],
    executor: Executor,
    rates: tuple[float, float] | None = None,
    cap: int | None = None,
    pre: int = 60,
    n_requests: int = 400,
    objective: Objective | None = None,
    prior: Prior | None = None,
    knobs: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Exhaustive tables, then every (tuner, seed) run; per tuner the median evals to 5% (a miss counts cap + 1).

    A tuner label ending in ``_warm`` (``rrl_warm``, ``gp_warm``, ``tpe_warm``) gets ``prior`` bound to ``profile``
    (fitted on other models' histories, never on this profile's). ``knobs`` gives a label its tuner's knobs; a
    ``:TAG`` after the label tells variants of one tuner apart (``rrl_warm:a06`` with ``{"warm_alpha": 0.6}``).

    Args:
        profile: Service profile the simulator runs.
        space: The configurations searched.
        tuners: Tuner labels (e.g. ``rrl``, ``gp_warm``, ``rrl_warm:a06``).
        seeds: One run per tuner and seed.
        executor: Runs the tables and the runs.
        rates: Rates A and B in req/s: tune at A, then re-tune at B (None: from the profile).
        cap: Measurements per run at each rate (None: 20% of the space).
        pre: Measurements at rate A before the shift to B (at most ``cap``).
        n_requests: Requests per simulated window.
        objective: What to minimize (None: mean latency).
        prior: Prior for the ``_warm`` tuners (required when one is listed).
        knobs: Tuner knobs per label (None: defaults).

    Returns:
        dict[str, Any]: Study summary: optimum per rate, per-tuner median evaluations to within 5%
        (``evals_to_5pct``, ``shift``), reach fractions, tuner CPU time, and the per-seed rows.

    Raises:
        MlsysoptError: If a warm tuner is listed without a prior.
    """
    objective = objective or Objective("latency")
    if any(tuner_name(t)[1] for t in tuners) and prior is None:
        raise MlsysoptError(f"tuners {', '.join(t for t in tuners if tuner_name(t)[1])} need a prior (--prior)")
    bound = prior.bind(profile) if prior is not None else None
    ra, rb = rates or default_rates(profile)
    tables = exhaustive_tables(profile, space, (ra, rb), n_requests, executor)
    out = study_tables(tables, space, tuners, seeds, executor, objective, cap, pre, profile.cores, bound, knobs)
    data = f"simulated: SimPy model of the engine, {profile.source} {profile.cores}-core profile"
    return {"data": data, "profile": profile.to_dict(), **out}


def study_tables(
    tables: dict[float, np.ndarray],
    space: Space,
    tuners: Sequence[str],
    seeds: Sequence[int],
    executor: Executor,
    objective: Objective,
    cap: int | None = None,
    pre: int = 60,
    cores: int = 1,
    bound: TaskPrior | None = None,
    knobs: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every (tuner, seed) against exhaustive ``tables`` of two rates (simulated or measured); per tuner the median
    measurements to within 5% of each rate's optimum (a miss counts ``cap`` + 1).

    Args:
        tables: Per rate A and B (in that order), one row per configuration (space order), as
            :func:`exhaustive_tables` returns them.
        space: The configurations.
        tuners: Tuner labels (``_warm`` ones get ``bound``).
        seeds: One run per tuner and seed.
        executor: Runs the (tuner, seed) runs.
        objective: What to minimize.
        cap: Measurements per run at each rate (None: 20% of the space).
        pre: Measurements at rate A before the shift to B (at most ``cap``).
        cores: Cores of the machine the tables are of.
        bound: The prior bound to the task, for the ``_warm`` tuners.
        knobs: Tuner knobs per label (None: defaults).

    Returns:
        dict[str, Any]: Optimum per rate, ``evals_to_5pct``, ``shift``, reach fractions, tuner CPU time, rows.
    """
    ra, rb = list(tables)
    cap = cap or math.ceil(0.2 * space.size)
    pre = min(pre, cap)
    warm, extra = {n: bound if tuner_name(n)[1] else None for n in tuners}, knobs or {}
    common = (tables, space, objective, ra, rb, cap, pre, cores)
    jobs = [(n, s, *common, warm[n], extra.get(n, {})) for n in tuners for s in seeds]
    rows = executor.map(study_run, jobs)
    out: dict[str, Any] = {
        "space_size": space.size,
        "space_raw_size": space.raw_size,
        "rates": [ra, rb],
        "optimum": {str(r): _optimum(tables, space, objective, r) for r in (ra, rb)},
        "cap": cap,
        "pre": pre,
        "seeds": len(seeds),
        "evals_to_5pct": {},
        "shift": {},
        "reached": {},
        "shift_reached": {},
        "tuner_cpu_s_per_measurement": {},
        "per_seed": rows,
        "executor": executor.describe(),
    }
    for name in tuners:
        mine = [r for r in rows if r["tuner"] == name]
        for key, reached_key in (("evals_to_5pct", "reached"), ("shift", "shift_reached")):
            vals = [r[key] if r[key] is not None else cap + 1 for r in mine]
            out[key][name] = statistics.median(vals)
            out[reached_key][name] = sum(r[key] is not None for r in mine) / len(mine)
        out["tuner_cpu_s_per_measurement"][name] = statistics.median(r["tuner_cpu_s_per_measurement"] for r in mine)
    return out
