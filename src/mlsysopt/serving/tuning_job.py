"""The job behind ``mlsysopt serving tune``: noise, search, confirmation, report (each phase checkpointed).

0. **Task**: the model's service profile (the simulator's profile, or on the real engine a quick probe: batch
   timings at a few sizes and threads and the dispatch overhead, ``task.json``), recorded in ``result.json`` so
   that this run can be a history for a prior of later tunes, and what a prior (``--prior``) is bound to.
1. **Noise**: single windows of the default configuration (:func:`~mlsysopt.serving.confirmation.measure_noise`);
   above CV 0.2 a warning, and the confirmation rounds grow with the noise
   (:func:`~mlsysopt.serving.verdict.rounds_for_noise`).
2. **Search**: the tuner over the reduced space, every measurement a stable one (windows until they agree,
   :class:`~mlsysopt.serving.windows.StableBackend`; for the throughput objective a rate search per configuration,
   :class:`~mlsysopt.serving.capacity.CapacityBackend`), until ``budget`` measurements per rate or ``timeout``
   seconds of wall clock.
3. **Confirmation** per rate: the top ``confirm_top`` candidates and the default, interleaved for
   ``confirm_rounds`` rounds (more when noisy); the pick is the best confirmed median
   (:func:`~mlsysopt.serving.confirmation.confirm`), and the **verdict** compares it with the confirmed default
   (:func:`~mlsysopt.serving.verdict.verdict`: overlapping intervals mean "keep the default").
4. **Report**: ``result.json`` (search-time and confirmed values, the verdict per rate, noise, how much the
   equivalences shrank the space), ``steps.png``, ``heatmap.png``, ``confirm.png``, and the recommended
   configuration as ONNX Runtime session options (``ort_session_options.json``) and a Triton model configuration
   (``config.pbtxt``) — none when the SLO is missed, unless ``export_anyway``.

Every measurement of every phase goes into ``checkpoint.json`` as it is made; ``--resume`` replays them in order.
A resume may raise ``--budget`` (and ``--timeout``) at a single rate, never lower it below what was recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import read_json
from mlsysopt.serving.capacity import CapacityBackend
from mlsysopt.serving.confirmation import confirm, measure_noise
from mlsysopt.serving.cost_model import DEFAULT_TOLERANCE, check_cost_model, check_tolerance, op_level_shortlist
from mlsysopt.serving.experiment import SEARCH, TUNING_CHECKPOINT, PhaseCheckpoint, recorded_phases, run_tuning
from mlsysopt.serving.inputs import (
    DEFAULT_PROFILE,
    MAX_SECONDS,
    MEASURED,
    WINDOW_S,
    check_backend,
    make_backend,
    resolve_prior,
    resolve_profile,
    tuning_space,
)
from mlsysopt.serving.jobs import Job, check_rates
from mlsysopt.serving.limits import check_requests
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Workload
from mlsysopt.serving.tuner_rule import AUTO, budget_class, resolve_tuner
from mlsysopt.serving.tuners import get_tuner
from mlsysopt.serving.tuning_phases import machine_cores, phase_sizes, probe_profile
from mlsysopt.serving.tuning_report import tune_report
from mlsysopt.serving.verdict import rounds_for_noise
from mlsysopt.serving.windows import StableBackend
from mlsysopt.store.records import record, serving_trial

if TYPE_CHECKING:
    from mlsysopt.io import RunDir
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.tuning import Step

MAX_BUDGET = 100_000
WARM_TUNERS = ("rrl", "gp", "tpe")  # the tuners a prior warm-starts
TASK_FILE = "task.json"  # the task's profile (a probe of the real engine), kept for --resume


class TuningJob(Job):
    """Search the configuration space of a served model (real engine or simulator), then confirm the pick.

    Args:
        out: Run folder to write.
        rates: Arrival rates (req/s) tuned in turn.
        budget: Search measurements per rate, 1 to 100000.
        tuner: Tuner name (see :func:`get_tuner`), or ``auto`` (the default, as on the command line): the rule's
            tuner for the budget's class and whether a prior is given (:mod:`mlsysopt.serving.tuner_rule`; on
            ``--resume``, the tuner the run started with).
        objective: What to minimize (None: mean latency).
        engine: ``"real"`` (ONNX Runtime), ``"rayserve"`` (Ray Serve over HTTP) or ``"sim"`` (simulator).
        model: Model source for a measured engine (``.onnx``, ``zoo:NAME``, ``file.py:factory``).
        profile: Service profile spec for the simulator (None: ``synthetic:32``); refused with a measured engine.
        input_shape: Full example input shape, batch dim first (None: the model's own).
        requests: Most requests per measurement window.
        knobs: Knob value lists replacing the default grid (None: the default grid).
        seed: Seed of the tuner and the arrivals.
        resume: Continue the run in ``out`` from its checkpoint.
        timeout: Wall-clock limit of the search in seconds (None: none).
        confirm_top: Top candidates re-measured in the confirmation, >= 1 (None: scaled to the budget,
            :func:`phase_sizes`).
        confirm_rounds: Interleaved confirmation rounds, >= 1 (None: 3, grown with the noise up to the budget).
        noise_windows: Windows of the noise phase, >= 2 (None: scaled to the budget).
        stability: Keyword arguments of :class:`StableBackend` (``count``, ``tolerance``, ``max_windows``).
        prior: Prior spec (``preset``, a ``.pt`` file or run folders) for ``rrl``, ``gp`` or ``tpe`` (None: cold).
        export_anyway: Export the deployment files even when the pick does not beat the default.
        cost_model: Cost-model run folder that narrows the op-level knobs (real engine only; None: not used).
        cost_model_tolerance: Keep op-level settings predicted within this fraction of the best, 0 to 10.
        window_s: Seconds of arrivals per window of a measured engine (or ``requests``, whichever comes first;
            None: always ``requests``).
        address: Ray cluster of the ``rayserve`` engine (None: a private local instance).
        port: HTTP port of Ray Serve on 127.0.0.1 (None: a free one).
        warm: A prior comes later (``--warm-start``): ``auto`` then picks among the warm-started tuners.

    Raises:
        MlsysoptError: For any input out of range or inconsistent (e.g. a profile with the real engine, a prior for
            a tuner that takes none, a resume whose checkpoint exceeds the budget).
    """

    checkpoint = TUNING_CHECKPOINT

    def __init__(
        self,
        out: Path,
        rates: Sequence[float] = (80.0,),
        budget: int = 30,
        tuner: str = "auto",
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
        confirm_top: int | None = None,
        confirm_rounds: int | None = None,
        noise_windows: int | None = None,
        stability: dict[str, float] | None = None,
        prior: str | None = None,
        export_anyway: bool = False,
        cost_model: str | None = None,
        cost_model_tolerance: float = DEFAULT_TOLERANCE,
        window_s: float | None = WINDOW_S,
        address: str | None = None,
        port: int | None = None,
        warm: bool = False,
    ) -> None:
        super().__init__(out, resume)
        self.objective = objective or Objective()
        self.tuner_auto = tuner == "auto"
        tuner, self.tuner_knobs = self._resolve_tuner(out, tuner, budget, warm or prior is not None, resume)
        self.tuner_name, self.kind = tuner, engine
        self.export_anyway = export_anyway
        self.seed = seed
        with self._validating():
            self.budget = int(budget)
            if not 1 <= self.budget <= MAX_BUDGET:
                raise MlsysoptError(f"--budget {budget} must be 1 to {MAX_BUDGET:,} measurements per rate")
            self.rounds_given = confirm_rounds is not None
            asked = {"confirm_top": confirm_top, "confirm_rounds": confirm_rounds, "noise_windows": noise_windows}
            sizes = phase_sizes(self.budget, confirm_top, confirm_rounds, noise_windows)
            self.confirm_top, self.confirm_rounds, self.noise_windows = sizes
            if window_s is not None and not (math.isfinite(window_s) and 0 < window_s <= MAX_SECONDS):
                raise MlsysoptError(f"--window-s {window_s} must be more than 0 and at most {MAX_SECONDS:g} seconds")
            if address is not None and engine != "rayserve":
                raise MlsysoptError(f"--address {address}: only --engine rayserve runs on a Ray cluster")
            if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
                raise MlsysoptError(f"--timeout {timeout} must be a positive number of seconds")
            self.timeout = timeout
            check_requests(requests)
            self.workloads = check_rates(rates, real=engine in MEASURED)
            check_backend(engine, model)
            if engine in MEASURED and profile is not None:
                raise InvalidSpace(
                    f"--profile {profile}: a profile is for --engine sim; the {engine} engine measures --model"
                )
            cost_model_tolerance = check_tolerance(cost_model_tolerance)
            oracle = None if cost_model is None else check_cost_model(cost_model, engine)
            probe_cores = machine_cores(engine, profile)
            space_probe = tuning_space(engine, probe_cores, knobs)
            served = None
            if engine in MEASURED:
                most = {
                    "largest": max(space_probe.values["max_batch"]),
                    "instances": max(space_probe.values["instances"]),
                    "timeout": timeout,  # bounds a user's factory too
                }
                served = self._load_model(model, input_shape, **most)  # type: ignore[arg-type]
            prof = resolve_profile(DEFAULT_PROFILE if profile is None else profile) if engine == "sim" else None
            window = make_backend(
                engine, served, prof, requests, self.objective.slo_ms, seed, window_s=window_s if served else None,
                address=address, port=port,
            )  # fmt: skip
            self.window_backend: Backend = self.stack.enter_context(window)
            stable = StableBackend(window, **(stability or {}))
            self.stable = stable
            self.backend: Backend = stable
            if self.objective.kind == "throughput":
                self.backend = CapacityBackend(stable, self.objective.slo_ms)  # type: ignore[arg-type]
            # the probe's grid when the window's machine is the one probed (always for sim): a 32-core grid is
            # ~0.05 s to build
            self.space = space_probe if window.cores == probe_cores else tuning_space(engine, window.cores, knobs)
            self.shortlist = None
            if oracle is not None:  # the op-level knobs narrowed to what the cost model predicts fast
                path = served.path  # type: ignore[union-attr]
                self.shortlist = op_level_shortlist(oracle, path, self.space, window.cores, cost_model_tolerance)
                narrowed = {**(knobs or {}), **self.shortlist.knobs}
                self.space = tuning_space(engine, window.cores, narrowed, op_levels=self.shortlist.kept)
            self.profile = prof
            self.prior = None
            if prior is not None:
                if tuner not in WARM_TUNERS:
                    raise MlsysoptError(f"--prior: tuner '{tuner}' takes no prior (these do: {', '.join(WARM_TUNERS)})")
                self.prior = resolve_prior(prior)
            # cold until run(): a prior (--prior here, or --warm-start's histories through self.tuner.warm_start)
            # is bound to the task's profile there, and the tuner rebuilt with it
            self.tuner = get_tuner(tuner, self.space, self.objective, seed=seed, **self.tuner_knobs)
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
                **asked,  # as given (None: scaled to the budget); "phases" holds what they came to
                "phases": dict(zip(("confirm_top", "confirm_rounds", "noise_windows"), sizes, strict=True)),
                "stability": stable.settings(),
                "window_s": window_s if served else None,
                "prior": prior,
                "export_anyway": export_anyway,
            }
            if self.tuner_knobs:  # only then (the rule's variant): earlier run folders resume as they were
                settings["tuner_knobs"] = self.tuner_knobs
            if cost_model is not None:  # only then: earlier run folders resume with the settings they wrote
                settings |= {"cost_model": cost_model, "cost_model_tolerance": cost_model_tolerance}
            # one rate: --resume may extend the budget or the timeout; several: the schedule itself depends on it
            resumable = ("budget", "timeout", "phases") if len(self.workloads) == 1 else ()
            self.run_dir = self._run_dir(settings, resumable)
            self.recorded = recorded_phases(self.run_dir) if resume else {}
            if resume:  # a larger budget on resume keeps the phases the run started with
                started = read_json(self.run_dir.path / "settings.json", MlsysoptError).get("phases")
                if isinstance(started, dict):
                    self.confirm_top = int(started["confirm_top"])
                    self.confirm_rounds = int(started["confirm_rounds"])
                    self.noise_windows = int(started["noise_windows"])
                    self.settings["phases"] = self.run_dir.settings["phases"] = started
            done = len(self.recorded.get(SEARCH, []))
            if done > self.budget * len(self.workloads):
                raise MlsysoptError(
                    f"--resume --budget {self.budget}: the checkpoint already holds {done} search measurements; "
                    f"resume with --budget {done} or more (nothing was changed)"
                )

    @staticmethod
    def _resolve_tuner(out: Path, tuner: str, budget: int, warm: bool, resume: bool) -> tuple[str, dict]:
        """``tuner`` (no knobs), or for ``auto`` the rule's and its knobs (on ``--resume``: those the run started
        with)."""
        if tuner != AUTO:
            return tuner, {}
        started = out / "settings.json"
        if resume and started.is_file():
            recorded = read_json(started, MlsysoptError)
            if isinstance(recorded.get("tuner"), str):
                knobs = recorded.get("tuner_knobs")
                return recorded["tuner"], dict(knobs) if isinstance(knobs, dict) else {}
        return resolve_tuner(tuner, int(budget), warm) if int(budget) >= 1 else ("rrl", {})

    @property
    def schedule(self) -> list[tuple[Workload, int]]:
        """``budget`` measurements at each rate in turn."""
        return [(w, self.budget) for w in self.workloads]

    @property
    def total(self) -> int:
        """Measurements in the whole run: noise windows, the search, the confirmation rounds (as asked, then as the
        noise set them)."""
        per_confirm = (self.confirm_top + 1) * getattr(self, "rounds", self.confirm_rounds)
        return self.noise_windows + (self.budget + per_confirm) * len(self.workloads)

    def describe(self) -> str:
        """The backend, the size of the space (and of the grid before equivalences) and the tuner, in one line."""
        return (
            f"{self.backend.describe()}; {self.space.size} configurations ({self.space.raw_size} before merging "
            f"equivalent ones); tuner {self.tuner_name}{self._why_tuner()}"
        )

    def _why_tuner(self) -> str:
        """Why ``auto`` ran this tuner (empty for a tuner the user named)."""
        if not self.tuner_auto:
            return ""
        how = " picking by expected improvement over the prior" if self.tuner_knobs.get("acquisition") == "ei" else ""
        return f"{how} (the default for a {budget_class(self.budget)} budget, best on the tuning presets)"

    def run(
        self,
        on_step: Callable[[Step], None] | None = None,
        on_measure: Callable[[str], None] | None = None,
        on_total: Callable[[int], None] | None = None,
    ):
        """Task, noise, search, confirmation (all checkpointed; replayed on resume), then the report.

        Args:
            on_step: Called with each search step.
            on_measure: Called with the phase's name after each measurement of any phase.
            on_total: Called with the run's measurement count once the noise fixed the confirmation rounds.
        """
        with self.run_dir as run:
            self._keep_model(run)
            ck = PhaseCheckpoint(run, self.recorded)
            t0 = time.perf_counter()
            task = self._task(run)
            prior = self.prior if self.prior is not None else getattr(self.tuner, "pending_prior", None)
            bound = prior.bind(task) if prior is not None else None
            if bound is not None:
                self.tuner = get_tuner(
                    self.tuner_name, self.space, self.objective, seed=self.seed, prior=bound, **self.tuner_knobs
                )
            default = self.space.default(self.window_backend.cores)
            ping = (lambda phase: lambda _m: on_measure(phase)) if on_measure else (lambda phase: None)
            noise = measure_noise(
                ck.replay("noise", self.window_backend), default, self.workloads[0], self.noise_windows, ping("noise")
            )
            self.rounds = rounds_for_noise(self.confirm_rounds, noise.get("cv_mean_ms"))
            if not self.rounds_given:  # noise adds rounds, but never more than the budget's worth
                self.rounds = min(self.rounds, max(self.confirm_rounds, self.budget))
            if on_total is not None:
                on_total(self.total)
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
                        self.objective, self.rounds, scores, ping("confirm"),
                    )
                )  # fmt: skip
            report = tune_report(
                self, run, result, confirmations, noise, replayed, time.perf_counter() - t0, search_s, task, bound
            )
        return report

    def _task(self, run: RunDir) -> ServiceProfile:
        """The task's profile: the simulator's, or a probe of the real engine (kept in task.json for --resume)."""
        if self.profile is not None:
            return self.profile
        path = run.file(TASK_FILE)
        if self.resume and path.is_file():
            return ServiceProfile.load(path)
        probe = probe_profile(self.stage.model, self.window_backend.cores, self.seed)  # type: ignore[union-attr]
        probe.save(path)
        return probe

    def _stored(self, on_step: Callable[[Step], None] | None) -> Callable[[Step], None]:
        """``on_step`` that first records the step's measurement in the run's study (:mod:`mlsysopt.store`);
        replayed steps of a resumed run are recorded once (a step's index is its key)."""

        def stored(s: Step) -> None:
            record(serving_trial(s.measurement.to_dict(), s.score, s.index), "minimize")
            if on_step is not None:
                on_step(s)

        return stored
