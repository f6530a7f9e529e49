"""The serving library's entry points: the resumable tuning run and its plots (profiles: ``serving.profiling``).

``mlsysopt serving tune`` (through :class:`mlsysopt.serving.jobs.TuningJob`), the demo and the benchmark all
call these. A tuning run is resumable without any tuner-specific state: tuners are deterministic given their seed
and what they were told, so :class:`ReplayBackend` feeds a restarted tuner the measurements recorded in the run
folder's JSON checkpoint, in order (checking that it asks for the same configurations), and only then measures.

The checkpoint is ``{"measurements": [...], "noise": [...], "confirm": [...]}``: the search's measurements, and
those of the phases around it (:mod:`mlsysopt.serving.confirmation`), each replayed in order by its own
:class:`ReplayBackend` (:class:`PhaseCheckpoint`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.serving.backend import Backend, BackendWrapper, Measurement
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuning import tune

if TYPE_CHECKING:
    from mlsysopt.io import RunDir
    from mlsysopt.serving.tuners.base import Tuner
    from mlsysopt.serving.tuning import Step, TuneResult

TUNING_CHECKPOINT = "checkpoint.json"


class ReplayBackend(BackendWrapper):
    """Answers the first ``len(recorded)`` measurements from a checkpoint, then measures with ``backend``.

    ``on_new`` sees every measurement made after the replay (the job checkpoints it there).

    Args:
        backend: Measures once the recorded measurements are used up.
        recorded: Measurements to answer first, in order.
        on_new: Called with every new (not replayed) measurement (None: not called).
        phase: Name of the phase, used in error messages.

    Raises:
        MlsysoptError: From :meth:`measure`, when a replayed step asks for another configuration or workload than
            the checkpoint recorded.
    """

    def __init__(
        self,
        backend: Backend,
        recorded: Sequence[Measurement],
        on_new: Callable[[Measurement], None] | None = None,
        phase: str = "search",
    ) -> None:
        super().__init__(backend)
        self.recorded = list(recorded)
        self.replayed = 0
        self.new = 0
        self.on_new = on_new
        self.phase = phase

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """The recorded measurement while replaying (it must be of the same configuration), then a real one."""
        if self.replayed < len(self.recorded):
            rec = self.recorded[self.replayed]
            if rec.config != config or rec.workload != workload:
                raise MlsysoptError(
                    f"--resume: {self.phase} step {self.replayed + 1} asked for {config.label()} but the checkpoint "
                    f"recorded {rec.config.label()}; it was written with other settings (same --tuner, --seed, space?)"
                )
            self.replayed += 1
            return rec
        m = self.backend.measure(config, workload, window)
        self.new += 1
        if self.on_new is not None:
            self.on_new(m)
        return m


SEARCH = "measurements"  # the checkpoint key of the search phase
PHASES = (SEARCH, "noise", "confirm")


def recorded_phases(run: RunDir) -> dict[str, list[Measurement]]:
    """The measurements of every phase in the tuning checkpoint of ``run`` (empty when it has no checkpoint)."""
    if not run.has_checkpoint:
        return {p: [] for p in PHASES}
    data = run.load_checkpoint(InvalidRunDir)
    try:
        if not isinstance(data, dict) or SEARCH not in data:
            raise KeyError(SEARCH)
        return {p: [Measurement.from_dict(m) for m in data.get(p, [])] for p in PHASES}
    except (KeyError, TypeError, ValueError, AttributeError, MlsysoptError) as exc:
        raise InvalidRunDir(
            f"--resume: {run.checkpoint} is not a tuning checkpoint ({type(exc).__name__}: {exc})"
        ) from None


def recorded_measurements(run: RunDir) -> list[Measurement]:
    """The search's measurements in the tuning checkpoint of ``run`` (none when it has no checkpoint)."""
    return recorded_phases(run)[SEARCH]


class PhaseCheckpoint:
    """The tuning checkpoint of a run: one list of measurements per phase, saved atomically after each new one."""

    def __init__(self, run: RunDir | None, recorded: dict[str, list[Measurement]] | None = None) -> None:
        self.run = run
        recorded = recorded or {}
        self.recorded = {p: list(recorded.get(p, [])) for p in PHASES}
        self.data: dict[str, list[dict[str, Any]]] = {p: [m.to_dict() for m in v] for p, v in self.recorded.items()}

    def replay(self, phase: str, backend: Backend) -> ReplayBackend:
        """A backend that replays ``phase``'s recorded measurements, then measures and checkpoints new ones."""
        return ReplayBackend(backend, self.recorded[phase], lambda m: self.add(phase, m), phase)

    def add(self, phase: str, m: Measurement) -> None:
        """Record a new measurement of ``phase`` and save the checkpoint."""
        self.data[phase].append(m.to_dict())
        if self.run is not None:
            self.run.save_checkpoint(self.data)

    def drop(self, phase: str) -> None:
        """Forget what ``phase`` recorded (a confirmation of a search that has since gone further)."""
        self.recorded[phase], self.data[phase] = [], []


def run_tuning(
    tuner: Tuner,
    backend: Backend,
    schedule: Sequence[tuple[Workload, int]],
    run: RunDir | None = None,
    on_step: Callable[[Step], None] | None = None,
    until: Callable[[Step], bool] | None = None,
    checkpoint: PhaseCheckpoint | None = None,
) -> tuple[TuneResult, int]:
    """Tune with an atomic checkpoint in ``run`` (open, JSON checkpoint) after every measurement.

    With ``run.resume`` the checkpoint is replayed first. Returns the result and how many measurements were
    replayed from the checkpoint.

    Args:
        tuner: The tuner to run.
        backend: Measures new configurations.
        schedule: ``(workload, measurements)`` pairs, as for :func:`~mlsysopt.serving.tuning.tune`.
        run: Run folder holding the checkpoint (None: no checkpoint file).
        on_step: Called with every step (None: not called).
        until: Stops the run at the first step for which it returns True (None: run the whole schedule).
        checkpoint: Checkpoint to use (None: one built from ``run``, replaying it if ``run.resume``).

    Returns:
        tuple[TuneResult, int]: The result and the number of measurements replayed from the checkpoint.

    Raises:
        MlsysoptError: If the checkpoint does not match the run's asks, or the schedule is invalid.
    """

    if checkpoint is None:
        checkpoint = PhaseCheckpoint(run, recorded_phases(run) if run is not None and run.resume else None)
    replay = checkpoint.replay(SEARCH, backend)
    result = tune(tuner, replay, schedule, on_step=on_step, until=until)
    return result, replay.replayed


def heatmap_values(
    measurements: Sequence[Measurement], objective: Objective, workload: Workload | None = None
) -> dict[tuple[int, int], float]:
    """Best score per (instances, max_batch) over the other knobs, from measurements (of one workload if given).

    Args:
        measurements: The measurements to summarize.
        objective: Scores each measurement.
        workload: Keep only measurements of this workload (None: all).

    Returns:
        dict[tuple[int, int], float]: Lowest finite score per ``(instances, max_batch)``.
    """
    out: dict[tuple[int, int], float] = {}
    for m in measurements:
        if workload is not None and m.workload != workload:
            continue
        key = (m.config.instances, m.config.max_batch)
        score = objective.score(m)
        if math.isfinite(score) and score < out.get(key, math.inf):
            out[key] = score
    return out


def step_points(steps: Sequence[Step], objective: Objective | None = None) -> list[dict[str, float | None]]:
    """What :func:`mlsysopt.serving.figures.plot_steps` draws of a run: value, best so far, workload changes.

    Values are in the objective's unit (ms, cores, req/s); a measurement that missed the SLO is None ("SLO missed").
    """
    value = (lambda x: x) if objective is None else objective.value
    return [
        {
            "value": value(s.score),
            "best": value(s.best_score),
            "shift": float(i > 0 and steps[i - 1].workload != s.workload),
        }
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
    better: str = "lower",
) -> None:
    """The step plot of a run and the heatmap of what it measured under its last workload (the best starred).

    Args:
        result: The tuning run.
        space: The space tuned (its instances and max-batch values are the heatmap's axes).
        steps_png: Output path of the step plot.
        heatmap_png: Output path of the heatmap.
        name: Legend label of the run.
        title: Title of the step plot.
        ylabel: Y-axis label of the step plot.
        slo_ms: SLO line drawn on the step plot (None: none).
        heatmap_title: Title of the heatmap (None: none).
        unit: Unit of the heatmap values.
        better: ``"lower"`` or ``"higher"``: which values the heatmap colours as better.
    """
    # deferred: imports PIL, matplotlib
    from mlsysopt.serving.figures import plot_heatmap, plot_steps

    points = step_points(result.steps, result.objective)
    plot_steps({name: points}, steps_png, slo_ms=slo_ms, ylabel=ylabel, title=title)
    last = result.steps[-1].workload
    measured = [s.measurement for s in result.steps if s.workload == last]
    best = result.best
    plot_heatmap(
        {k: result.objective.value(v) for k, v in heatmap_values(measured, result.objective).items()},
        space.values["instances"],
        space.values["max_batch"],
        heatmap_png,
        measured=[(m.config.instances, m.config.max_batch) for m in measured],
        best=(best.instances, best.max_batch) if best else None,
        title=heatmap_title,
        unit=unit,
        better=better,
    )
