"""What a serving job is built from: models, service profiles, configuration files, backends and spaces.

Every spec a user gives (``--model``, ``--profile``, ``--config``, knob lists, ``--backend``) is resolved here, once,
for the CLI, the demo and the benchmark alike. Nothing here writes into a run folder: a zoo model is exported to
a folder the caller chooses (a temporary one before the run folder exists, see :class:`ModelStage`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.io import read_json
from mlsysopt.serving.space import KNOBS, Config, Space

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.profile import ServiceProfile

ZOO_PREFIX = "zoo:"
BACKENDS = ("real", "sim")
#: the command-line option of each knob, for error messages
KNOB_OPTIONS = {
    "workers": "--workers",
    "max_batch": "--max-batch",
    "batch_timeout_ms": "--timeout-ms",
    "intra_threads": "--intra",
    "inter_threads": "--inter",
}
#: the default max-batch grid per backend: the simulator models bigger machines, so bigger batches pay there
DEFAULT_MAX_BATCH = {"real": (1, 2, 4, 8, 16), "sim": (1, 2, 4, 8, 16, 32, 64)}
DEFAULT_PROFILE = "synthetic:32"


def machine_threads() -> int:
    """Threads this machine allows one knob to use: its CPU count."""
    return os.cpu_count() or 1


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


class ModelStage:
    """A model loaded before the run folder exists; a zoo model is exported to a temporary folder until :meth:`keep`.

    A refused model (bad file, a zoo name that does not exist, a batch axis the job needs but the model lacks)
    therefore leaves nothing behind, and the run folder receives the exported ``.onnx`` only once it is open.
    """

    def __init__(self, spec: str, input_shape: tuple[int, ...] | None = None) -> None:
        self.spec = spec
        self._tmp = tempfile.TemporaryDirectory(prefix="mlsysopt-model-") if spec.startswith(ZOO_PREFIX) else None
        try:
            self.model = resolve_model(spec, Path(self._tmp.name if self._tmp else "."), input_shape)
        except BaseException:
            self.close()
            raise

    def keep(self, folder: Path) -> Path:
        """Copy an exported zoo model into ``folder`` (a model file given by the user stays where it is)."""
        if self._tmp is None:
            return self.model.path
        return Path(shutil.copy2(self.model.path, Path(folder) / self.model.path.name))

    def close(self) -> None:
        """Remove the temporary folder of an exported zoo model."""
        if self._tmp is not None:
            self._tmp.cleanup()


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


def load_config(path: Path) -> Config:
    """Knobs from a JSON file: a tune ``result.json`` (its ``best``) or a plain ``{"workers": 2, ...}`` object."""
    data = read_json(path, InvalidSpace)
    if isinstance(data.get("best"), dict):
        data = data["best"]
    return Config.from_dict(data, where=f"--config {path}")


def check_backend(kind: str, model: object | None) -> None:
    """Refuse an unknown backend kind, or the real backend without a model."""
    if kind not in BACKENDS:
        raise MlsysoptError(f"unknown --backend '{kind}' (choose from: {', '.join(BACKENDS)})")
    if kind == "real" and model is None:
        raise MlsysoptError("--backend real needs --model (an .onnx file or zoo:cnn)")


def make_backend(
    kind: str,
    model: ServedModel | None = None,
    profile: ServiceProfile | None = None,
    requests: int = 200,
    slo_ms: float | None = None,
    seed: int = 0,
) -> Backend:
    """The real ONNX Runtime engine serving ``model``, or the simulator driven by ``profile`` (default synthetic).

    The one place a job's backend is built: another way of measuring (e.g. a load generator in its own process)
    is another :class:`~mlsysopt.serving.backend.Backend` here, and every job gets it unchanged.
    """
    check_backend(kind, model)
    if kind == "real":
        from mlsysopt.serving.engine import Engine

        return Engine(model, n_requests=requests, slo_ms=slo_ms, max_threads=machine_threads(), seed=seed)
    from mlsysopt.serving.simulator import SimulatedEngine

    return SimulatedEngine(profile or resolve_profile(DEFAULT_PROFILE), n_requests=requests, slo_ms=slo_ms, seed=seed)


def build_space(base: Space, knobs: Mapping[str, Sequence[float] | None]) -> Space:
    """``base`` with the given knob value lists replacing its values (None keeps a knob's values)."""
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise InvalidSpace(f"unknown knob(s) {', '.join(unknown)} (knobs: {', '.join(KNOBS)})")
    values = dict(base.values)
    for knob, given in knobs.items():
        if given is not None:
            if not given:
                raise InvalidSpace(f"{KNOB_OPTIONS[knob]} lists no values: the space would be empty")
            values[knob] = tuple(given)
    return Space(**values, max_threads=base.max_threads, max_total_threads=base.max_total_threads)


def tuning_space(kind: str, cores: int, knobs: Mapping[str, Sequence[float] | None] | None = None) -> Space:
    """The default grid of a ``cores``-core machine for backend ``kind``, with the given knob lists replacing it."""
    return build_space(Space.for_machine(cores, DEFAULT_MAX_BATCH[kind]), knobs or {})
