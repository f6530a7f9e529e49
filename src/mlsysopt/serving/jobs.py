"""The jobs behind ``mlsysopt serving profile | serve`` (and the base of the tuning job): validated, then run.

A job validates every input when it is built (the run folder, knob lists, rates, sizes against the limits, the
model or profile, a resume's checkpoint) and writes nothing; :meth:`run` opens its :class:`~mlsysopt.io.RunDir`
(lock, ``settings.json``) and writes the results. A PyTorch model is exported to a temporary folder while the job
is validated and copied into the run folder once it is open, so a refused input leaves no folder and no file.
Jobs are context managers: leaving one closes its backend (and the load generator process) and removes the
temporary export. :class:`~mlsysopt.serving.tuning_job.TuningJob` is the third job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import RunDir, to_jsonable
from mlsysopt.runtime.ray_executor import check_reachable
from mlsysopt.serving.inputs import MAX_SECONDS, MEASURED, ModelStage, machine_threads, make_backend
from mlsysopt.serving.limits import check_rate, check_requests
from mlsysopt.serving.profiling import calibrate_dispatch, calibrate_outside, check_profile_grid, measure_profile
from mlsysopt.serving.space import Config, Workload, as_int
from mlsysopt.serving.windows import StableBackend
from mlsysopt.store.records import record, serving_trial
from mlsysopt.store.run import RunStore

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend, Measurement
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.profile import ServiceSample


class Job:
    """A command's work: built = validated (nothing written), :meth:`run` = written into ``out``."""

    checkpoint: str | None = None

    def __init__(self, out: Path, resume: bool = False) -> None:
        self.out = Path(out)
        self.resume = resume
        self.stack = ExitStack()
        self.stage: ModelStage | None = None
        # the cheap refusals (a file, a busy folder, a stale or missing checkpoint) before loading anything
        RunDir(self.out, resume=resume, checkpoint=self.checkpoint, sink=RunStore).check()

    def _load_model(self, spec: str, input_shape: tuple[int, ...] | None, **check: Any) -> ServedModel:
        self.stage = ModelStage(spec, input_shape, **check)
        self.stack.callback(self.stage.close)
        return self.stage.model

    def _run_dir(self, settings: dict[str, Any], resumable: tuple[str, ...] = ()) -> RunDir:
        self.settings = settings
        return RunDir(self.out, settings, self.resume, resumable, self.checkpoint, sink=RunStore).check()

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


def check_rates(rates: Sequence[float], real: bool, max_seconds: float = MAX_SECONDS) -> list[Workload]:
    """Workloads of ``rates`` (positive, at most the load generator's pace, not too low for a window).

    The floor is the same on both engines (``real`` is kept for callers): the simulator is fitted to the real
    engine, so a rate it could not measure is no answer of the simulator's either (1e-300 req/s gave "inf ms").
    """
    workloads = [Workload(float(r)) for r in rates]
    if not workloads:
        raise MlsysoptError("--rate lists no rates")
    for w in workloads:
        check_rate(w.rate, max_seconds)
    return workloads


class ProfileJob(Job):
    """Time one batch of a model per (rows, intra, inter) here, fit the service-time model, calibrate dispatch.

    Args:
        out: Run folder to write (must not hold another run).
        model: Model source: an ``.onnx`` file, ``zoo:NAME`` or ``file.py:factory``.
        rows: Batch sizes (rows) to time, each >= 1.
        intra: Intra-op thread counts to time, each 1 to the machine's threads.
        inter: Inter-op thread counts to time, each 1 to the machine's threads.
        repeats: Runs per point (median kept), >= 1.
        cores: Also write a profile extrapolated to this many cores, 1 to 4096 (None: none).
        input_shape: Full example input shape, batch dim first (None: the model's own).
        calibrate: Whether to calibrate the engine's dispatch, hand-off and wake-up costs.
        seed: Seed of the calibration runs' arrivals.
        engine: Whose overheads the calibration measures: ``"real"`` (mlsysopt's ONNX Runtime engine, from its own
            timings) or ``"rayserve"`` (Ray Serve over HTTP, seen from outside, after the batch timings; see
            :func:`~mlsysopt.serving.profiling.calibrate_outside`).
        address: Ray cluster of the ``rayserve`` engine (None: a private local instance).
        port: HTTP port of Ray Serve on 127.0.0.1 (None: a free one).

    Raises:
        MlsysoptError: For a bad grid (values < 1, too many threads, fewer than 6 points), bad options, a busy run
            folder, or a model that cannot be loaded or fails its checks.
    """

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
        calibrate: bool = True,
        seed: int = 0,
        engine: str = "real",
        address: str | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(out)
        self.intra, self.inter = list(intra), list(inter)
        self.repeats, self.cores, self.calibrate, self.seed = repeats, cores, calibrate, seed
        self.engine, self.address, self.port = engine, address, port
        with self._validating():
            if engine not in MEASURED:
                raise MlsysoptError(
                    f"--engine {engine}: profile times a real model (choose from: {', '.join(MEASURED)})"
                )
            if (address is not None or port is not None) and engine != "rayserve":
                raise MlsysoptError("--address and --port belong to --engine rayserve")
            if engine == "rayserve" and not calibrate:
                raise MlsysoptError("--engine rayserve calibrates Ray Serve's overhead: drop --no-calibrate")
            if engine == "rayserve":
                check_reachable(address)
            self.rows = [as_int(r, "--rows") for r in rows]
            if min(self.rows) < 1 or repeats < 1 or (cores is not None and not 1 <= cores <= 4096):
                raise MlsysoptError(f"--rows, --repeats {repeats} must be >= 1 and --cores {cores} 1 to 4096")
            self.threads = machine_threads()
            self.points = check_profile_grid(self.rows, self.intra, self.inter, self.threads)
            self.model = self._load_model(model, input_shape, largest=max(self.rows), option="--rows")
            self.run_dir = self._run_dir(
                {
                    "model": model,
                    "input_shape": input_shape,
                    "rows": self.rows,
                    "intra": self.intra,
                    "inter": self.inter,
                    "repeats": repeats,
                    "cores": cores,
                    "calibrate": calibrate,
                    "seed": seed,
                    "engine": engine,
                    "address": address,
                }
            )

    def run(self, on_sample: Callable[[ServiceSample], None] | None = None) -> dict[str, Any]:
        """Measure, fit, calibrate; write profile.json (and profile_<CORES>.json), profile.png, result.json."""
        # deferred: imports PIL, matplotlib
        from mlsysopt.serving.figures import plot_profile

        with self.run_dir as run:
            path = self._keep_model(run)
            prof, samples = measure_profile(
                self.model, self.rows, self.intra, self.inter, self.repeats, self.threads, self.model.path.name,
                on_sample=on_sample,
            )  # fmt: skip
            calibration = None
            if self.calibrate and self.engine == "rayserve":  # started after the timings: Ray idles on these cores
                backend = make_backend(
                    "rayserve", self.model, None, 40, None, self.seed, address=self.address, port=self.port
                )
                with backend:
                    prof, calibration = calibrate_outside(prof, backend)
            elif self.calibrate:
                prof, calibration = calibrate_dispatch(self.model, prof, seed=self.seed)
            prof.save(run.file("profile.json"))
            files = ["profile.json"]
            warnings = prof.warnings()
            if self.cores is not None:
                scaled = prof.scaled(self.cores)
                scaled.save(run.file(f"profile_{self.cores}.json"))
                files.append(f"profile_{self.cores}.json")
                warnings += [w for w in scaled.warnings() if w not in warnings]
            plot_profile(prof, samples, run.file("profile.png"))
            result = {
                "command": "serving profile",
                "model": str(path),
                "samples": [s.__dict__ for s in samples],
                "profile": prof.to_dict(),
                "fit_median_rel_error": prof.fit_error(samples),
                "dispatch_calibration": calibration,
                "warnings": warnings,
                "files": [*files, "profile.png"],
            }
            run.write_json("result.json", result)
        return result


class ServeJob(Job):
    """Serve a model with one configuration on the real engine at each rate: the latency-throughput curve.

    Args:
        out: Run folder to write.
        config: The configuration to serve with.
        rates: Arrival rates to measure, in req/s.
        model: Model source: an ``.onnx`` file, ``zoo:NAME`` or ``file.py:factory``.
        input_shape: Full example input shape, batch dim first (None: the model's own).
        requests: Requests per measurement window.
        slo_ms: p99 SLO in ms, > 0 (None: none).
        seed: Seed of the arrival schedules.
        stability: Keyword arguments of :class:`StableBackend` (``count``, ``tolerance``, ``max_windows``).
        engine: ``"real"`` (ONNX Runtime here) or ``"rayserve"`` (Ray Serve over HTTP).
        window_s: Seconds of arrivals per window, or ``requests``, whichever comes first (None: ``requests``).
        address: Ray cluster of the ``rayserve`` engine (None: a private local instance).
        port: HTTP port of Ray Serve on 127.0.0.1 (None: a free one).

    Raises:
        MlsysoptError: For bad rates, request counts, SLO or configuration, a busy run folder, or a model that cannot
            be loaded or fails its checks.
    """

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
        stability: dict[str, float] | None = None,
        engine: str = "real",
        window_s: float | None = None,
        address: str | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(out)
        self.config = config
        self.slo_ms = slo_ms
        with self._validating():
            check_requests(requests)
            if engine not in MEASURED:
                raise MlsysoptError(f"--engine {engine}: serve runs a real model (choose from: {', '.join(MEASURED)})")
            if address is not None and engine != "rayserve":
                raise MlsysoptError(f"--address {address}: only --engine rayserve runs on a Ray cluster")
            if slo_ms is not None and not slo_ms > 0:
                raise InvalidSpace(f"--slo-ms {slo_ms} must be a positive number of milliseconds")
            self.workloads = check_rates(rates, real=True)
            config.check(machine_threads())
            served = self._load_model(model, input_shape, largest=config.max_batch, instances=config.instances)
            engine_ = make_backend(
                engine, served, None, requests, slo_ms, seed, window_s=window_s, address=address, port=port
            )
            self.backend: Backend = self.stack.enter_context(StableBackend(engine_, **(stability or {})))
            self.run_dir = self._run_dir(
                {
                    "model": model,
                    "input_shape": input_shape,
                    "config": config.to_dict(),
                    "rates": [w.rate for w in self.workloads],
                    "requests": requests,
                    "slo_ms": slo_ms,
                    "seed": seed,
                    "stability": self.backend.settings(),  # type: ignore[attr-defined]
                    "engine": engine,
                    "window_s": window_s,
                }
            )

    def run(self, on_measure: Callable[[Measurement], None] | None = None) -> list[Measurement]:
        """Measure at every rate in turn (windows until stable); write result.json and curve.png."""
        # deferred: imports PIL, matplotlib
        from mlsysopt.serving.figures import plot_curve

        with self.run_dir as run:
            self._keep_model(run)
            rows = []
            for w in self.workloads:
                rows.append(self.backend.measure(self.config, w))
                record(serving_trial(rows[-1].to_dict(), rows[-1].p99_ms, len(rows) - 1, "serve"), "minimize")
                if on_measure is not None:
                    on_measure(rows[-1])
            plot_curve(rows, run.file("curve.png"), slo_ms=self.slo_ms, title=f"serving {self.config.label()}")
            run.write_json(
                "result.json",
                to_jsonable(
                    {
                        "command": "serving serve",
                        "backend": self.backend.describe(),
                        "slo_ms": self.slo_ms,
                        "saturation": "throughput below 95% of the offered rate, a dropped request, or a growing queue",
                        "measurements": [m.to_dict() for m in rows],
                        "curve": [curve_point(m, self.slo_ms) for m in rows],
                        "plots": ["curve.png"],
                    }
                ),
            )
        return rows


def state(m: Measurement, slo_ms: float | None) -> str:
    """A measurement's health in words: ``ok``, ``saturated`` or ``SLO missed``."""
    if m.saturated:
        return "saturated"
    if slo_ms is not None and not m.p99_ms <= slo_ms:
        return "SLO missed"
    return "ok"


def curve_point(m: Measurement, slo_ms: float | None) -> dict[str, Any]:
    """One point of the latency-throughput curve: offered and achieved rate, latencies with intervals, state."""
    return {
        "offered_rps": m.workload.rate,
        "throughput": m.throughput,
        "throughput_ci": m.ci.get("throughput"),
        "mean_ms": m.mean_ms,
        "mean_ci": m.ci.get("mean_ms"),
        "p99_ms": m.p99_ms,
        "p99_ci": m.ci.get("p99_ms"),
        "windows": m.windows,
        "stable": m.stable,
        "state": state(m, slo_ms),
    }
