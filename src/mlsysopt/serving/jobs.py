"""The jobs behind ``mlsysopt serving profile | tune | serve``: validated first, then run into a run folder.

A job validates every input when it is built (the run folder, knob lists, rates, the model or profile, the
space, the tuner, a resume's checkpoint) and writes nothing; :meth:`run` opens its :class:`~mlsysopt.io.RunDir`
(lock, ``settings.json``) and writes the results. A zoo model is exported to a temporary folder while the job is
validated and copied into the run folder once it is open, so a refused input leaves no folder and no file. Jobs
are context managers: leaving one closes its backend and removes the temporary export.

A tuning job runs in phases: the search (:func:`~mlsysopt.serving.experiment.run_tuning`, checkpointed after every
measurement), then the report (plots, ``result.json``); further phases go between them in :meth:`TuningJob.run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir
from mlsysopt.serving.experiment import (
    TUNING_CHECKPOINT,
    check_profile_grid,
    measure_profile,
    plot_tuning,
    recorded_measurements,
    run_tuning,
)
from mlsysopt.serving.inputs import (
    DEFAULT_PROFILE,
    ModelStage,
    check_backend,
    machine_threads,
    make_backend,
    resolve_profile,
    tuning_space,
)
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Workload
from mlsysopt.serving.tuners import get_tuner

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend, Measurement
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.tuning import Step, TuneResult


class Job:
    """A command's work: built = validated (nothing written), :meth:`run` = written into ``out``."""

    checkpoint: str | None = None

    def __init__(self, out: Path, resume: bool = False) -> None:
        self.out = Path(out)
        self.resume = resume
        self.stack = ExitStack()
        self.stage: ModelStage | None = None
        # the cheap refusals (a file, a busy folder, a stale or missing checkpoint) before loading anything
        RunDir(self.out, resume=resume, checkpoint=self.checkpoint).check()

    def _load_model(self, spec: str, input_shape: tuple[int, ...] | None) -> ServedModel:
        self.stage = ModelStage(spec, input_shape)
        self.stack.callback(self.stage.close)
        return self.stage.model

    def _run_dir(self, settings: dict[str, Any], resumable: tuple[str, ...] = ()) -> RunDir:
        self.settings = settings
        return RunDir(self.out, settings, self.resume, resumable, self.checkpoint).check()

    def _keep_model(self, run: RunDir) -> Path | None:
        return None if self.stage is None else self.stage.keep(run.path)

    def close(self) -> None:
        """Close the backend and remove a temporary model export."""
        self.stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _validating(self) -> Iterator[None]:
        """Close what was opened so far (backend, temporary export) when a check fails."""
        try:
            yield
        except BaseException:
            self.close()
            raise


class ProfileJob(Job):
    """Time one batch of a model per (rows, intra, inter) here and fit the simulator's service-time model."""

    def __init__(
        self,
        out: Path,
        model: str = "zoo:cnn",
        rows: Sequence[int] = (1, 2, 4, 8, 16, 32),
        intra: Sequence[int] = (1, 2),
        inter: Sequence[int] = (1, 2),
        repeats: int = 5,
        cores: int | None = None,
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(out)
        self.rows, self.intra, self.inter = list(rows), list(intra), list(inter)
        self.repeats, self.cores = repeats, cores
        with self._validating():
            if repeats < 1 or (cores is not None and cores < 1):
                raise MlsysoptError(f"--repeats {repeats} and --cores {cores} must be >= 1")
            self.threads = machine_threads()
            self.points = check_profile_grid(self.rows, self.intra, self.inter, self.threads)
            self.model = self._load_model(model, input_shape)
            self.model.check_batch(max(self.rows))
            self.run_dir = self._run_dir(
                {
                    "model": model,
                    "input_shape": input_shape,
                    "rows": self.rows,
                    "intra": self.intra,
                    "inter": self.inter,
                    "repeats": repeats,
                    "cores": cores,
                }
            )

    def run(self) -> dict[str, Any]:
        """Measure, fit, and write profile.json (profile_<CORES>.json with ``cores``), profile.png, result.json."""
        from mlsysopt.report.serving import plot_profile

        with self.run_dir as run:
            path = self._keep_model(run)
            prof, samples = measure_profile(
                self.model, self.rows, self.intra, self.inter, self.repeats, self.threads, self.model.path.name
            )
            prof.save(run.file("profile.json"))
            files = ["profile.json"]
            if self.cores is not None:
                prof.scaled(self.cores).save(run.file(f"profile_{self.cores}.json"))
                files.append(f"profile_{self.cores}.json")
            plot_profile(prof, samples, run.file("profile.png"))
            result = {
                "command": "serving profile",
                "model": str(path),
                "samples": [s.__dict__ for s in samples],
                "profile": prof.to_dict(),
                "fit_median_rel_error": prof.fit_error(samples),
                "files": [*files, "profile.png"],
            }
            run.write_json("result.json", result)
        return result


class TuningJob(Job):
    """Search the configuration space of a served model (real engine or simulator) for the objective's best."""

    checkpoint = TUNING_CHECKPOINT

    def __init__(
        self,
        out: Path,
        rates: Sequence[float] = (80.0,),
        budget: int = 30,
        tuner: str = "rrl",
        objective: Objective | None = None,
        backend: str = "real",
        model: str | None = None,
        profile: str | None = None,
        input_shape: tuple[int, ...] | None = None,
        requests: int = 200,
        knobs: Mapping[str, Sequence[float] | None] | None = None,
        seed: int = 0,
        resume: bool = False,
    ) -> None:
        super().__init__(out, resume)
        self.objective = objective or Objective()
        self.tuner_name, self.kind, self.budget = tuner, backend, int(budget)
        with self._validating():
            if self.budget < 1:
                raise MlsysoptError(f"--budget {budget} must be >= 1")
            self.workloads = [Workload(float(r)) for r in rates]
            if not self.workloads:
                raise MlsysoptError("--rate lists no rates")
            check_backend(backend, model)
            served = self._load_model(model, input_shape) if backend == "real" else None  # type: ignore[arg-type]
            prof = resolve_profile(profile or DEFAULT_PROFILE) if backend == "sim" else None
            engine = make_backend(backend, served, prof, requests, self.objective.slo_ms, seed)
            self.backend: Backend = self.stack.enter_context(engine)
            self.space = tuning_space(backend, self.backend.cores, knobs)
            self.tuner = get_tuner(tuner, self.space, self.objective, seed=seed)
            settings = {
                "tuner": tuner,
                "rates": [w.rate for w in self.workloads],
                "budget": self.budget,
                "objective": self.objective.to_dict(),
                "space": self.space.to_dict(),
                "backend": backend,
                "model": model,
                "input_shape": input_shape,
                "profile": profile,
                "requests": requests,
                "seed": seed,
            }
            # one rate: --resume may extend the budget; several: the schedule itself depends on it
            self.run_dir = self._run_dir(settings, ("budget",) if len(self.workloads) == 1 else ())
            self.recorded = recorded_measurements(self.run_dir) if resume else []

    @property
    def schedule(self) -> list[tuple[Workload, int]]:
        """``budget`` measurements at each rate in turn."""
        return [(w, self.budget) for w in self.workloads]

    @property
    def total(self) -> int:
        """Measurements in the whole run."""
        return self.budget * len(self.workloads)

    def describe(self) -> str:
        """The backend, the size of the space and the tuner, in one line."""
        return f"{self.backend.describe()}; {self.space.size} configurations; tuner {self.tuner_name}"

    def run(self, on_step: Callable[[Step], None] | None = None) -> TuneResult:
        """Search (checkpointed; replayed on resume), then write result.json, steps.png and heatmap.png."""
        with self.run_dir as run:
            self._keep_model(run)
            t0 = time.perf_counter()
            result, replayed = run_tuning(self.tuner, self.backend, self.schedule, run, on_step)
            seconds = time.perf_counter() - t0
            self._report(run, result, replayed, seconds)
        return result

    def _report(self, run: RunDir, result: TuneResult, replayed: int, seconds: float) -> None:
        obj, last = self.objective, self.workloads[-1]
        ylabel = f"{obj.stat} latency (ms)" if obj.kind == "latency" else "cost (cores; >1000 = SLO missed)"
        plot_tuning(
            result, self.space, run.file("steps.png"), run.file("heatmap.png"), name=self.tuner_name,
            title=f"{self.tuner_name} on {self.kind} backend", ylabel=ylabel, slo_ms=obj.slo_ms,
            heatmap_title=f"measured at {last.rate:g} req/s: best {ylabel} per (workers, max batch)",
            unit="ms" if obj.kind == "latency" else "cores",
        )  # fmt: skip
        best, bm = result.best, result.best_measurement
        run.write_json(
            "result.json",
            {
                "command": "serving tune",
                "backend": self.backend.describe(),
                "settings": self.settings,
                "seconds": seconds,
                "replayed_from_checkpoint": replayed,
                "best": best.to_dict() if best else None,
                "best_measurement": bm.to_dict() if bm else None,
                "slo_met": result.slo_met,
                "message": result.message,
                "measurements": [s.measurement.to_dict() for s in result.steps],
                "plots": ["steps.png", "heatmap.png"],
            },
        )


class ServeJob(Job):
    """Serve a model with one configuration on the real engine under Poisson load at each rate."""

    def __init__(
        self,
        out: Path,
        config: Config,
        rates: Sequence[float] = (50.0,),
        model: str = "zoo:cnn",
        input_shape: tuple[int, ...] | None = None,
        requests: int = 500,
        slo_ms: float | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(out)
        self.config = config
        with self._validating():
            self.workloads = [Workload(float(r)) for r in rates]
            config.check(machine_threads())
            served = self._load_model(model, input_shape)
            served.check_batch(config.max_batch)
            self.backend: Backend = self.stack.enter_context(make_backend("real", served, None, requests, slo_ms, seed))
            self.run_dir = self._run_dir(
                {
                    "model": model,
                    "input_shape": input_shape,
                    "config": config.to_dict(),
                    "rates": [w.rate for w in self.workloads],
                    "requests": requests,
                    "slo_ms": slo_ms,
                    "seed": seed,
                }
            )

    def run(self, on_measure: Callable[[Measurement], None] | None = None) -> list[Measurement]:
        """Measure at every rate in turn and write result.json."""
        with self.run_dir as run:
            self._keep_model(run)
            rows = []
            for w in self.workloads:
                rows.append(self.backend.measure(self.config, w))
                if on_measure is not None:
                    on_measure(rows[-1])
            run.write_json(
                "result.json",
                {
                    "command": "serving serve",
                    "backend": self.backend.describe(),
                    "measurements": [m.to_dict() for m in rows],
                },
            )
        return rows
