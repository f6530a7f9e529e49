"""``serving study`` on a measured engine: exhaustive tables measured here (ONNX Runtime or Ray Serve), tuners replayed.

Every configuration of the grid is measured at both rates (stable windows, grouped by CPUs per replica so that Ray
Serve restarts replicas only when ``num_cpus`` changes), each measurement kept in ``checkpoint.json`` as it is made
(``--resume`` continues); then every tuner x seed runs against the measured tables as the simulator study's do
(:func:`~mlsysopt.serving.study.study_tables`): measurements to within 5% of each rate's measured optimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import to_jsonable
from mlsysopt.runtime import make_executor
from mlsysopt.serving.inputs import MAX_SECONDS, MEASURED, WINDOW_S, machine_threads, make_backend, tuning_space
from mlsysopt.serving.jobs import Job, check_rates
from mlsysopt.serving.limits import check_requests
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING, Config, Space
from mlsysopt.serving.study import study_tables
from mlsysopt.serving.tuners import TUNERS
from mlsysopt.serving.windows import StableBackend

CHECKPOINT = "checkpoint.json"
#: the most configurations x rates a measured study measures (each is seconds of real serving)
MAX_MEASUREMENTS = 2_000
_COLS = ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "throughput", "saturated", "offered_rps")


def measurement_order(space: Space) -> list[Config]:
    """The space's configurations grouped by CPUs per replica, then replicas and batch (fewest replica restarts)."""
    return sorted(space, key=lambda c: (c.threads_per_instance, c.instances, c.max_batch, c.batch_timeout_ms))


class MeasuredStudyJob(Job):
    """Tuners x seeds judged by exhaustive tables measured on a real engine (``serving study --engine real|rayserve``).

    Args:
        out: Run folder to write.
        tuners: Tuner labels (cold tuners; warm ones need a prior and are the simulator study's).
        engine: ``"real"`` or ``"rayserve"``.
        model: Model source (``.onnx``, ``zoo:NAME``, ``file.py:factory``).
        rates: Two rates A,B in req/s.
        seeds: Seeds per tuner.
        slo_ms: p99 SLO in ms (with it, the objective is p99 within the SLO; without, mean latency).
        knobs: Knob value lists replacing the default grid (on ``rayserve``, ``max_ongoing`` is Ray Serve's
            default 5 unless given: a third value would triple the exhaustive tables).
        requests: Most requests per window.
        window_s: Seconds of arrivals per window (or ``requests``, whichever comes first).
        cap_fraction: Measurements per tuner run, as a fraction of the grid.
        seed: First seed (also of the arrivals).
        resume: Continue the measured tables from ``checkpoint.json``.
        address: Ray cluster for ``rayserve`` (None: a private local instance).
        port: Ray Serve's HTTP port (None: a free one).

    Raises:
        MlsysoptError: For an unknown engine or tuner, bad rates, a grid too large to measure, or a busy folder.
    """

    checkpoint = CHECKPOINT

    def __init__(
        self,
        out: Path,
        tuners: Sequence[str],
        engine: str,
        model: str,
        rates: Sequence[float],
        seeds: int = 5,
        slo_ms: float | None = None,
        knobs: Mapping[str, Sequence[float] | None] | None = None,
        requests: int = 400,
        window_s: float | None = WINDOW_S,
        cap_fraction: float = 0.25,
        seed: int = 0,
        resume: bool = False,
        address: str | None = None,
        port: int | None = None,
    ) -> None:

        super().__init__(out, resume)
        with self._validating():
            if engine not in MEASURED:
                raise MlsysoptError(f"--engine {engine}: a measured study runs on {' or '.join(MEASURED)}")
            unknown = [t for t in tuners if t not in TUNERS]
            if unknown or not tuners:
                raise MlsysoptError(
                    f"--tuners: unknown tuner(s) {unknown or '(none)'} for a measured study (choose from: "
                    f"{', '.join(TUNERS)}; warm-started tuners run in the simulator study)"
                )
            if len(rates) != 2:
                raise MlsysoptError(f"--rate {','.join(map(str, rates))}: give two rates A,B (tune at A, then B)")
            self.workloads = check_rates(rates, real=True)
            check_requests(requests)
            if slo_ms is not None and not (math.isfinite(slo_ms) and slo_ms > 0):
                raise MlsysoptError(f"--slo-ms {slo_ms} must be a positive number of milliseconds")
            if engine == "rayserve" and not (knobs or {}).get("max_ongoing"):
                # Ray Serve's default admission only: its three values would triple a table measured exhaustively
                knobs = {**(knobs or {}), "max_ongoing": [SERVE_DEFAULT_ONGOING]}
            self.space = tuning_space(engine, machine_threads(), knobs)
            n = self.space.size * len(self.workloads)
            if n > MAX_MEASUREMENTS:
                raise MlsysoptError(
                    f"the grid has {self.space.size:,} configurations x 2 rates = {n:,} measurements, more than a "
                    f"measured study takes ({MAX_MEASUREMENTS:,}); narrow it with --instances/--max-batch/--intra/..."
                )
            self.objective = Objective("latency", slo_ms, "p99") if slo_ms is not None else Objective("latency")
            self.tuners, self.seeds = list(tuners), list(range(seed, seed + seeds))
            self.cap = max(1, math.ceil(cap_fraction * self.space.size))
            served = self._load_model(model, None, largest=max(self.space.values["max_batch"]),
                                      instances=max(self.space.values["instances"]))  # fmt: skip
            window = make_backend(
                engine, served, None, requests, slo_ms, seed, MAX_SECONDS, window_s, address=address, port=port
            )
            self.engine = engine
            self.stable = StableBackend(self.stack.enter_context(window))
            settings = {
                "command": "serving study", "engine": engine, "model": model, "tuners": self.tuners, "seeds": seeds,
                "seed": seed, "rates": [w.rate for w in self.workloads], "slo_ms": slo_ms,
                "space": self.space.to_dict(), "requests": requests, "window_s": window_s, "cap": self.cap,
            }  # fmt: skip
            self.run_dir = self._run_dir(settings)

    @property
    def measurements(self) -> int:
        """Measurements the tables take (every configuration at both rates)."""
        return self.space.size * len(self.workloads)

    def describe(self) -> str:
        """What the study measures, in one line."""
        return (
            f"{self.stable.describe()}; {self.space.size} configurations x 2 rates measured, then "
            f"{len(self.tuners)} tuners x {len(self.seeds)} seeds replayed on the tables"
        )

    def run(self, on_measure: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Measure the tables (checkpointed), replay the tuners, write result.json and study.png."""
        # deferred: imports PIL, matplotlib
        from mlsysopt.serving.figures import plot_study

        with self.run_dir as run:
            self._keep_model(run)
            tables = self._tables(run, on_measure)
            with make_executor("local", 1, None) as ex:
                result = study_tables(tables, self.space, self.tuners, self.seeds, ex, self.objective, self.cap)
            result = {
                "command": "serving study",
                "data": f"measured here: {self.stable.describe()}",
                "engine": self.engine,
                "objective": self.objective.to_dict(),
                "tables": {str(r): dict(zip(_COLS, t.T.tolist(), strict=True)) for r, t in tables.items()},
                "configs": [c.label() for c in self.space],
                **result,
            }
            plot_study(result, run.file("study.png"))
            run.write_json("result.json", to_jsonable(result))
        return result

    def _tables(self, run: Any, on_measure: Callable[[str], None] | None) -> dict[float, np.ndarray]:
        done: dict[str, list[float]] = {}
        if self.resume and run.checkpoint.is_file():
            saved = run.read_json(CHECKPOINT).get("rows", {})  # an infinite latency was written as null
            done = {k: [math.inf if v is None else v for v in row] for k, row in saved.items()}
        tables = {}
        for w in self.workloads:
            rows = np.zeros((self.space.size, len(_COLS)))
            for c in measurement_order(self.space):
                key = f"{w.rate:g}|{c.label()}"
                if key not in done:
                    m = self.stable.measure(c, w)
                    done[key] = [m.mean_ms, m.p50_ms, m.p95_ms, m.p99_ms, m.throughput, float(m.saturated),
                                 m.offered_rps]  # fmt: skip
                    run.write_json(CHECKPOINT, to_jsonable({"rows": done}))
                    if on_measure is not None:
                        on_measure(f"{w.rate:g} req/s: {c.label()}")
                rows[self.space.index(c)] = done[key]
            tables[w.rate] = rows
        return tables
