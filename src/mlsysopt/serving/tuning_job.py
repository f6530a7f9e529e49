"""The job behind ``mlsysopt serving tune``: noise, search, confirmation, report (each phase checkpointed).

1. **Noise**: single windows of the default configuration (:func:`~mlsysopt.serving.confirmation.measure_noise`).
2. **Search**: the tuner over the reduced space, every measurement a stable one (windows until they agree,
   :class:`~mlsysopt.serving.windows.StableBackend`; for the throughput objective a rate search per configuration,
   :class:`~mlsysopt.serving.capacity.CapacityBackend`), until ``budget`` measurements per rate or ``timeout``
   seconds of wall clock.
3. **Confirmation** per rate: the top ``confirm_top`` candidates and the default, interleaved for
   ``confirm_rounds`` rounds; the pick is the best confirmed median (:func:`~mlsysopt.serving.confirmation.confirm`).
4. **Report**: ``result.json`` (search-time and confirmed values, the answer per rate, noise, how much the
   equivalences shrank the space), ``steps.png``, ``heatmap.png``, ``confirm.png``, and the pick as ONNX Runtime
   session options (``ort_session_options.json``) and a Triton model configuration (``config.pbtxt``).

Every measurement of every phase goes into ``checkpoint.json`` as it is made; ``--resume`` replays them in order.
A resume may raise ``--budget`` (and ``--timeout``) at a single rate, never lower it below what was recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import to_jsonable
from mlsysopt.serving.capacity import CapacityBackend
from mlsysopt.serving.confirmation import confirm, measure_noise
from mlsysopt.serving.deploy import ort_session_json, triton_config
from mlsysopt.serving.experiment import SEARCH, TUNING_CHECKPOINT, PhaseCheckpoint, plot_tuning, recorded_phases
from mlsysopt.serving.inputs import DEFAULT_PROFILE, check_backend, make_backend, resolve_profile, tuning_space
from mlsysopt.serving.jobs import Job, check_rates
from mlsysopt.serving.limits import check_requests
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Workload
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.windows import StableBackend

if TYPE_CHECKING:
    from mlsysopt.io import RunDir
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.confirmation import Confirmation
    from mlsysopt.serving.tuning import Step, TuneResult

MAX_BUDGET = 100_000


class TuningJob(Job):
    """Search the configuration space of a served model (real engine or simulator), then confirm the pick."""

    checkpoint = TUNING_CHECKPOINT

    def __init__(
        self,
        out: Path,
        rates: Sequence[float] = (80.0,),
        budget: int = 30,
        tuner: str = "rrl",
        objective: Objective | None = None,
        engine: str = "real",
        model: str | None = None,
        profile: str | None = None,
        input_shape: tuple[int, ...] | None = None,
        requests: int = 200,
        knobs: Mapping[str, Sequence[float] | None] | None = None,
        seed: int = 0,
        resume: bool = False,
        timeout: float | None = None,
        confirm_top: int = 3,
        confirm_rounds: int = 3,
        noise_windows: int = 5,
        stability: dict[str, float] | None = None,
    ) -> None:
        super().__init__(out, resume)
        self.objective = objective or Objective()
        self.tuner_name, self.kind = tuner, engine
        self.confirm_top, self.confirm_rounds, self.noise_windows = confirm_top, confirm_rounds, noise_windows
        with self._validating():
            self.budget = int(budget)
            if not 1 <= self.budget <= MAX_BUDGET:
                raise MlsysoptError(f"--budget {budget} must be 1 to {MAX_BUDGET:,} measurements per rate")
            if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
                raise MlsysoptError(f"--timeout {timeout} must be a positive number of seconds")
            self.timeout = timeout
            if confirm_top < 1 or confirm_rounds < 1 or noise_windows < 2:
                raise MlsysoptError(
                    f"--confirm-top {confirm_top} and --confirm-rounds {confirm_rounds} must be >= 1, "
                    f"--noise-windows {noise_windows} >= 2"
                )
            check_requests(requests)
            self.workloads = check_rates(rates, real=engine == "real")
            check_backend(engine, model)
            if engine == "real" and profile is not None:
                raise InvalidSpace(
                    f"--profile {profile}: a profile is for --engine sim; the real engine measures --model"
                )
            space_probe = tuning_space(engine, _cores(engine, profile), knobs)
            served = None
            if engine == "real":
                most = {
                    "largest": max(space_probe.values["max_batch"]),
                    "instances": max(space_probe.values["instances"]),
                    "timeout": timeout,  # bounds a user's factory too
                }
                served = self._load_model(model, input_shape, **most)  # type: ignore[arg-type]
            prof = resolve_profile(DEFAULT_PROFILE if profile is None else profile) if engine == "sim" else None
            window = make_backend(engine, served, prof, requests, self.objective.slo_ms, seed)
            self.window_backend: Backend = self.stack.enter_context(window)
            stable = StableBackend(window, **(stability or {}))
            self.stable = stable
            self.backend: Backend = stable
            if self.objective.kind == "throughput":
                self.backend = CapacityBackend(stable, self.objective.slo_ms)  # type: ignore[arg-type]
            self.space = tuning_space(engine, window.cores, knobs)
            self.tuner = get_tuner(tuner, self.space, self.objective, seed=seed)
            settings = {
                "tuner": tuner,
                "rates": [w.rate for w in self.workloads],
                "budget": self.budget,
                "timeout": timeout,
                "objective": self.objective.to_dict(),
                "space": self.space.to_dict(),
                "engine": engine,
                "model": model,
                "input_shape": input_shape,
                "profile": profile,
                "requests": requests,
                "seed": seed,
                "confirm_top": confirm_top,
                "confirm_rounds": confirm_rounds,
                "noise_windows": noise_windows,
                "stability": stable.settings(),
            }
            # one rate: --resume may extend the budget or the timeout; several: the schedule itself depends on it
            self.run_dir = self._run_dir(settings, ("budget", "timeout") if len(self.workloads) == 1 else ())
            self.recorded = recorded_phases(self.run_dir) if resume else {}
            done = len(self.recorded.get(SEARCH, []))
            if done > self.budget * len(self.workloads):
                raise MlsysoptError(
                    f"--resume --budget {self.budget}: the checkpoint already holds {done} search measurements; "
                    f"resume with --budget {done} or more (nothing was changed)"
                )

    @property
    def schedule(self) -> list[tuple[Workload, int]]:
        """``budget`` measurements at each rate in turn."""
        return [(w, self.budget) for w in self.workloads]

    @property
    def total(self) -> int:
        """Measurements in the whole run: noise windows, the search, the confirmation rounds."""
        per_confirm = (self.confirm_top + 1) * self.confirm_rounds
        return self.noise_windows + (self.budget + per_confirm) * len(self.workloads)

    def describe(self) -> str:
        """The backend, the size of the space (and of the grid before equivalences) and the tuner, in one line."""
        return (
            f"{self.backend.describe()}; {self.space.size} configurations ({self.space.raw_size} before merging "
            f"equivalent ones); tuner {self.tuner_name}"
        )

    def run(self, on_step: Callable[[Step], None] | None = None, on_measure: Callable[[str], None] | None = None):
        """Noise, search, confirmation (all checkpointed; replayed on resume), then the report. Returns the report."""
        from mlsysopt.serving.experiment import run_tuning

        with self.run_dir as run:
            self._keep_model(run)
            ck = PhaseCheckpoint(run, self.recorded)
            t0 = time.perf_counter()
            default = self.space.default(self.window_backend.cores)
            ping = (lambda phase: lambda _m: on_measure(phase)) if on_measure else (lambda phase: None)
            noise = measure_noise(
                ck.replay("noise", self.window_backend), default, self.workloads[0], self.noise_windows, ping("noise")
            )
            t_search = time.perf_counter()

            def until(s: Step) -> bool:
                return self.timeout is not None and time.perf_counter() - t_search > self.timeout

            stored = self._stored(on_step)
            result, replayed = run_tuning(self.tuner, self.backend, self.schedule, run, stored, until, ck)
            if replayed < len(result.steps):
                ck.drop("confirm")  # the search went further: its old confirmation does not stand
            search_s = time.perf_counter() - t_search
            confirmer = ck.replay("confirm", self.backend)
            confirmations = []
            for ans in result.per_rate:
                scores = {c: self.objective.score(m) for c, m in ans.measured.items()}
                confirmations.append(
                    confirm(
                        confirmer, ans.ranked(self.objective)[: self.confirm_top], default, ans.workload,
                        self.objective, self.confirm_rounds, scores, ping("confirm"),
                    )
                )  # fmt: skip
            report = self._report(run, result, confirmations, noise, replayed, time.perf_counter() - t0, search_s)
        return report

    def _stored(self, on_step: Callable[[Step], None] | None) -> Callable[[Step], None]:
        """``on_step`` that first records the step's measurement in the run's study (:mod:`mlsysopt.store`);
        replayed steps of a resumed run are recorded once (a step's index is its key)."""
        from mlsysopt.store.records import record, serving_trial

        def stored(s: Step) -> None:
            record(serving_trial(s.measurement.to_dict(), s.score, s.index), "minimize")
            if on_step is not None:
                on_step(s)

        return stored

    def _report(
        self,
        run: RunDir,
        result: TuneResult,
        confirmations: list[Confirmation],
        noise: dict[str, Any],
        replayed: int,
        seconds: float,
        search_s: float,
    ) -> dict[str, Any]:
        from mlsysopt.report.serving import plot_confirmation

        obj, last = self.objective, confirmations[-1]
        plot_tuning(
            result, self.space, run.file("steps.png"), run.file("heatmap.png"), name=self.tuner_name,
            title=f"{self.tuner_name} on the {self.kind} engine", ylabel=obj.label, slo_ms=obj.slo_ms,
            heatmap_title=f"search at {result.per_rate[-1].workload.rate:g} req/s: best {obj.label} per "
            "(instances, max batch); blank = not measured or SLO missed", unit=obj.unit,
        )  # fmt: skip
        plot_confirmation(last, obj, run.file("confirm.png"))
        pick = last.pick
        name = self.stage.model.path.stem if self.stage is not None else "model"
        run.write_json("ort_session_options.json", ort_session_json(pick.config))
        (run.file("config.pbtxt")).write_text(triton_config(pick.config, name))
        slo_met = pick.meets_slo
        message = (
            f"confirmed pick at {last.workload.rate:g} req/s: {pick.config.label()}, {obj.describe(pick.value)} "
            f"(95% interval {obj.describe(pick.interval[0])} .. {obj.describe(pick.interval[1])}, median of "
            f"{pick.measurement.windows} windows over {last.rounds} interleaved rounds)"
        )
        if slo_met is False:
            message = f"SLO missed: no confirmed candidate meets p99 <= {obj.slo_ms:g} ms; " + message
        per_rate = []
        for ans, conf in zip(result.per_rate, confirmations, strict=True):
            per_rate.append(
                {
                    "rate": ans.workload.rate,
                    "search_best": ans.best.to_dict(),
                    "search_value": ans.score,
                    "search": obj.describe(ans.score),
                    "confirmed_best": conf.pick.config.to_dict(),
                    "confirmed_value": conf.pick.value,
                    "confirmed_interval": list(conf.pick.interval),
                    "confirmed": obj.describe(conf.pick.value),
                    "slo_met": conf.pick.meets_slo,
                    "measured_configurations": len(ans.measured),
                }
            )
        report = to_jsonable(
            {
                "command": "serving tune",
                "backend": self.backend.describe(),
                "settings": self.settings,
                "seconds": seconds,
                "search_seconds": search_s,
                "stopped": "timeout" if result.stopped == "until" else result.stopped,
                "stopped_by": "timeout" if result.stopped == "until" else result.stopped,  # the name every search uses
                "replayed_from_checkpoint": replayed,
                "noise": noise,
                "space": self.space.reduction,
                "objective": obj.to_dict(),
                "best": pick.config.to_dict(),
                "best_measurement": pick.measurement.to_dict(),
                "confirmed_value": pick.value,
                "confirmed_interval": list(pick.interval),
                "slo_met": slo_met,
                "message": message,
                "per_rate": per_rate,
                "search": {"per_rate": [a.to_dict() for a in result.per_rate], "message": result.message},
                "confirmation": [c.to_dict(obj) for c in confirmations],
                "measurements": [s.measurement.to_dict() for s in result.steps],
                "files": ["steps.png", "heatmap.png", "confirm.png", "ort_session_options.json", "config.pbtxt"],
            }
        )
        run.write_json("result.json", report)
        return report


def _cores(engine: str, profile: str | None) -> int:
    from mlsysopt.serving.inputs import machine_threads

    if engine == "sim":
        return resolve_profile(DEFAULT_PROFILE if profile is None else profile).cores
    return machine_threads()
