"""The serving library's entry points: the resumable tuning run, its plots, and the measured service profile.

``mlsysopt serving tune`` (through :class:`mlsysopt.serving.jobs.TuningJob`), the demo and the benchmark all
call these. A tuning run is resumable without any tuner-specific state: tuners are deterministic given their seed
and what they were told, so :class:`ReplayBackend` feeds a restarted tuner the measurements recorded in the run
folder's JSON checkpoint, in order (checking that it asks for the same configurations), and only then measures.

The checkpoint is ``{"measurements": [...]}``: a later phase of a tuning job (e.g. re-measuring the top
candidates to confirm the pick) keeps its own measurements under its own key beside them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.serving.backend import Backend, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload

if TYPE_CHECKING:
    from mlsysopt.io import RunDir
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample, TimesBatches
    from mlsysopt.serving.tuners.base import Tuner
    from mlsysopt.serving.tuning import Step, TuneResult

TUNING_CHECKPOINT = "checkpoint.json"
MIN_PROFILE_POINTS = 6


class ReplayBackend(Backend):
    """Answers the first ``len(recorded)`` measurements from a checkpoint, then measures with ``backend``."""

    def __init__(self, backend: Backend, recorded: Sequence[Measurement]) -> None:
        self.backend = backend
        self.recorded = list(recorded)
        self.replayed = 0
        self.cores = backend.cores

    def measure(self, config: Config, workload: Workload) -> Measurement:
        """The recorded measurement while replaying (it must be of the same configuration), then a real one."""
        if self.replayed < len(self.recorded):
            rec = self.recorded[self.replayed]
            if rec.config != config or rec.workload != workload:
                raise MlsysoptError(
                    f"--resume: step {self.replayed + 1} asked for {config.label()} but the checkpoint recorded "
                    f"{rec.config.label()}; it was written with other settings (same --tuner, --seed, space?)"
                )
            self.replayed += 1
            return rec
        return self.backend.measure(config, workload)

    def describe(self) -> str:
        """The wrapped backend's description."""
        return self.backend.describe()

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()


def recorded_measurements(run: RunDir) -> list[Measurement]:
    """The measurements in the tuning checkpoint of ``run`` (none when it has no checkpoint)."""
    if not run.has_checkpoint:
        return []
    data = run.load_checkpoint(InvalidRunDir)
    try:
        return [Measurement.from_dict(m) for m in data["measurements"]]
    except (KeyError, TypeError, ValueError, MlsysoptError) as exc:
        raise InvalidRunDir(
            f"--resume: {run.checkpoint} is not a tuning checkpoint ({type(exc).__name__}: {exc})"
        ) from None


def run_tuning(
    tuner: Tuner,
    backend: Backend,
    schedule: Sequence[tuple[Workload, int]],
    run: RunDir | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> tuple[TuneResult, int]:
    """Tune with an atomic checkpoint in ``run`` (open, JSON checkpoint) after every measurement.

    With ``run.resume`` the checkpoint is replayed first. Returns the result and how many measurements were
    replayed from the checkpoint.
    """
    from mlsysopt.serving.tuning import tune

    recorded = recorded_measurements(run) if run is not None and run.resume else []
    replay = ReplayBackend(backend, recorded)
    done: list[dict[str, Any]] = [m.to_dict() for m in recorded]

    def step(s: Step) -> None:
        if len(done) <= s.index:  # a new measurement, not one replayed from the checkpoint
            done.append(s.measurement.to_dict())
            if run is not None:
                run.save_checkpoint({"measurements": done})
        if on_step is not None:
            on_step(s)

    result = tune(tuner, replay, schedule, on_step=step)
    return result, len(recorded)


def heatmap_values(
    measurements: Sequence[Measurement], objective: Objective, workload: Workload | None = None
) -> dict[tuple[int, int], float]:
    """Best score per (workers, max_batch) over the other knobs, from measurements (of one workload if given)."""
    out: dict[tuple[int, int], float] = {}
    for m in measurements:
        if workload is not None and m.workload != workload:
            continue
        key = (m.config.workers, m.config.max_batch)
        score = objective.score(m)
        if math.isfinite(score) and score < out.get(key, math.inf):
            out[key] = score
    return out


def step_points(steps: Sequence[Step]) -> list[dict[str, float]]:
    """What :func:`mlsysopt.report.serving.plot_steps` draws of a run: value, best so far, workload changes."""
    return [
        {"value": s.score, "best": s.best_score, "shift": float(i > 0 and steps[i - 1].workload != s.workload)}
        for i, s in enumerate(steps)
    ]


def plot_tuning(
    result: TuneResult,
    space: Space,
    steps_png: Path,
    heatmap_png: Path,
    name: str,
    title: str,
    ylabel: str,
    slo_ms: float | None = None,
    heatmap_title: str | None = None,
    unit: str = "ms",
) -> None:
    """The step plot of a run and the heatmap of what it measured under its last workload (the best starred)."""
    from mlsysopt.report.serving import plot_heatmap, plot_steps

    plot_steps({name: step_points(result.steps)}, steps_png, slo_ms=slo_ms, ylabel=ylabel, title=title)
    last = result.steps[-1].workload
    measured = [s.measurement for s in result.steps if s.workload == last]
    best = result.best
    plot_heatmap(
        heatmap_values(measured, result.objective),
        space.values["workers"],
        space.values["max_batch"],
        heatmap_png,
        measured=[(m.config.workers, m.config.max_batch) for m in measured],
        best=(best.workers, best.max_batch) if best else None,
        title=heatmap_title,
        unit=unit,
    )


def check_profile_grid(rows: Sequence[int], intra: Sequence[int], inter: Sequence[int], max_threads: int) -> int:
    """Refuse a grid with too few points or more threads than the machine allows; returns the number of points."""
    for n in (*intra, *inter):
        if n > max_threads:
            raise MlsysoptError(f"{n} threads exceeds the {max_threads} this machine allows (--intra/--inter)")
    points = len(rows) * len(intra) * len(inter)
    if points < MIN_PROFILE_POINTS:
        raise MlsysoptError(
            f"a service profile needs at least {MIN_PROFILE_POINTS} points (--rows x --intra x --inter), got {points}"
        )
    return points


def measure_profile(
    model: TimesBatches,
    rows: Sequence[int],
    intra: Sequence[int],
    inter: Sequence[int],
    repeats: int,
    cores: int,
    name: str = "",
) -> tuple[ServiceProfile, list[ServiceSample]]:
    """Time one batch per (rows, intra, inter) on this machine and fit the simulator's service-time model."""
    from mlsysopt.serving.profile import fit_profile, measure_samples

    samples = measure_samples(model, rows=rows, intra=intra, inter=inter, repeats=repeats)
    return fit_profile(samples, cores=cores, model=name), samples
