"""Plumbing the CLI, the demo and the benchmark share: resolving models and profiles, resumable tuning runs.

A tuning run is resumable without any tuner-specific state: tuners are deterministic given their seed and what
they were told, so :class:`ReplayBackend` feeds a restarted tuner the measurements recorded before the kill, in
order (checking that it asks for the same configurations), and only then measures for real.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import write_json_atomic
from mlsysopt.serving.backend import Backend, Measurement, Objective
from mlsysopt.serving.space import Config, Workload

if TYPE_CHECKING:
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.tune import Step, TuneResult
    from mlsysopt.serving.tuners.base import Tuner

ZOO_PREFIX = "zoo:"


def resolve_model(spec: str, workdir: Path, input_shape: tuple[int, ...] | None = None) -> ServedModel:
    """An ONNX file, or ``zoo:NAME`` (a built-in model exported with a dynamic batch axis into ``workdir``)."""
    from mlsysopt.serving.model import ServedModel, export_zoo_onnx

    if spec.startswith(ZOO_PREFIX):
        name = spec[len(ZOO_PREFIX) :]
        path = Path(workdir) / f"{name}.onnx"
        if not path.is_file():
            export_zoo_onnx(name, path)
        return ServedModel(path, input_shape)
    return ServedModel(Path(spec), input_shape)


def resolve_profile(spec: str) -> ServiceProfile:
    """``synthetic`` / ``synthetic:CORES`` (documented parameters, no measurement) or a profile JSON file."""
    from mlsysopt.serving.profile import ServiceProfile

    if spec == "synthetic" or spec.startswith("synthetic:"):
        cores_text = spec.partition(":")[2] or "32"
        try:
            cores = int(cores_text)
        except ValueError:
            raise InvalidSpace(f"--profile {spec}: '{cores_text}' is not a core count (e.g. synthetic:32)") from None
        if cores < 1:
            raise InvalidSpace(f"--profile {spec}: the core count must be >= 1")
        return ServiceProfile.synthetic(cores=cores)
    return ServiceProfile.load(Path(spec))


def measurement_from_dict(data: dict[str, Any]) -> Measurement:
    """Inverse of :meth:`Measurement.to_dict`."""
    d = dict(data)
    d["config"] = Config.from_dict(d["config"])
    d["workload"] = Workload(**d["workload"])
    return Measurement(**d)


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

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()


def load_checkpoint(path: Path, settings: dict[str, Any]) -> list[Measurement]:
    """Measurements recorded in a tuning checkpoint written with the same ``settings`` (else a clear error)."""
    try:
        data = json.loads(Path(path).read_text())
        saved = data["settings"]
        recorded = [measurement_from_dict(m) for m in data["measurements"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MlsysoptError(f"--resume: {path} is not a tuning checkpoint ({type(exc).__name__}: {exc})") from None
    if saved != json.loads(json.dumps(settings)):
        diff = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
        raise MlsysoptError(f"--resume: {path} was written with other settings ({', '.join(diff)} differ)")
    return recorded


def run_tuning(
    tuner: Tuner,
    backend: Backend,
    schedule: Sequence[tuple[Workload, int]],
    checkpoint: Path | None = None,
    settings: dict[str, Any] | None = None,
    resume: bool = False,
    on_step: Callable[[Step], None] | None = None,
) -> tuple[TuneResult, int]:
    """Tune with an atomic checkpoint after every measurement; with ``resume`` replay it first.

    Returns the result and how many measurements were replayed from the checkpoint.
    """
    from mlsysopt.serving.tune import tune

    settings = settings or {}
    recorded: list[Measurement] = []
    if resume:
        if checkpoint is None or not checkpoint.is_file():
            raise MlsysoptError(f"--resume: no checkpoint at {checkpoint} (run without --resume first)")
        recorded = load_checkpoint(checkpoint, settings)
    replay = ReplayBackend(backend, recorded)
    done: list[dict[str, Any]] = [m.to_dict() for m in recorded]

    def step(s: Step) -> None:
        if len(done) <= s.index:  # a new measurement, not one replayed from the checkpoint
            done.append(s.measurement.to_dict())
            if checkpoint is not None:
                write_json_atomic(checkpoint, {"settings": settings, "measurements": done})
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
