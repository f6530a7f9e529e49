"""What a serving job is built from: models, service profiles, configuration files, backends and spaces.

Every spec a user gives (``--model``, ``--profile``, ``--config``, knob lists, ``--backend``) is resolved here, once,
for the CLI, the demo and the benchmark alike. A model goes through the one source resolver
(:func:`mlsysopt.graph.importers.source.resolve_source`): an ``.onnx`` file, or a PyTorch source (``zoo:NAME``,
``file.py:factory``, ``module:factory``) exported by :mod:`mlsysopt.serving.export`; either way it is run in
ONNX Runtime at batch 1 and at the largest batch the job uses, within the limits of :mod:`mlsysopt.serving.limits`,
before anything is served. Nothing here writes into a run folder: an export goes to a folder the caller chooses (a
temporary one before the run folder exists, see :class:`ModelStage`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidModel, InvalidSpace, MlsysoptError
from mlsysopt.graph.importers.source import resolve_source
from mlsysopt.io import read_json
from mlsysopt.serving.deploy import config_from_ort_json, config_from_triton
from mlsysopt.serving.export import EXPORTERS, export_served
from mlsysopt.serving.history import histories_from_runs
from mlsysopt.serving.limits import check_batch_memory, check_batch_time
from mlsysopt.serving.presets import DEFAULT_PROFILE, resolve_profile
from mlsysopt.serving.prior import Prior, preset_prior
from mlsysopt.serving.rayserve_config import load_serve_config
from mlsysopt.serving.space import KNOBS, Config, Space

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.profile import ServiceProfile

BACKENDS = ("real", "rayserve", "sim")
#: the engines that serve a real model and measure it (they need --model)
MEASURED = ("real", "rayserve")
#: seconds of arrivals per window of a measured engine (or --requests, whichever comes first)
WINDOW_S = 1.0
#: the command-line option of each knob, for error messages
KNOB_OPTIONS = {
    "instances": "--instances",
    "max_batch": "--max-batch",
    "batch_timeout_ms": "--batch-timeout-ms",
    "intra_threads": "--intra",
    "inter_threads": "--inter",
    "execution_mode": "--execution-mode",
    "max_ongoing": "--max-ongoing",
}
#: the default max-batch grid per backend: the simulator models bigger machines, so bigger batches pay there
DEFAULT_MAX_BATCH = {"real": (1, 2, 4, 8, 16), "rayserve": (1, 2, 4, 8, 16), "sim": (1, 2, 4, 8, 16, 32, 64)}
#: the default max-ongoing-requests grid per backend (Ray Serve's knob only): Ray Serve's default 5, and 16 and 64,
#: which hold a batch of 16 (or 4 batches of 4) rows and 4 batches of 16 while one runs
DEFAULT_MAX_ONGOING: dict[str, tuple[int, ...] | None] = {"real": None, "rayserve": (5, 16, 64), "sim": None}
MAX_SECONDS = 10.0  # the longest a measurement window of the real engine lasts (from its start)


def machine_threads() -> int:
    """Threads this machine allows one knob to use: its CPU count."""
    return os.cpu_count() or 1


def per_row_shape(input_shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The shape of one row from a full example shape (batch dim first), as ``--input-shape`` gives it."""
    if input_shape is None:
        return None
    if len(input_shape) < 2:
        raise InvalidModel(
            f"--input-shape {','.join(map(str, input_shape))}: give the full example input shape, batch dim first "
            "(e.g. 1,3,32,32)"
        )
    return tuple(input_shape[1:])


def check_model(model: ServedModel, largest: int, instances: int, max_seconds: float, option: str) -> None:
    """Run ``model`` at batch 1, check the limits of ``largest`` rows, then run it at ``largest`` rows."""

    if largest > 1:
        model.check_batch(largest)
    ms = model.run_check(1)
    check_batch_memory(largest, model.row_bytes(), instances, option)
    check_batch_time(largest, ms, max_seconds, option)
    if largest > 1:
        model.run_check(largest)


def resolve_model(
    spec: str,
    workdir: Path,
    input_shape: tuple[int, ...] | None = None,
    largest: int = 16,
    instances: int = 1,
    max_seconds: float = MAX_SECONDS,
    option: str = "--max-batch",
    exporters: Sequence[str] | None = None,
    timeout: float | None = None,
) -> tuple[ServedModel, dict[str, Any]]:
    """A checked, servable model from any source (``input_shape``: the full example shape, batch dim first).

    A PyTorch source is exported into ``workdir`` (a user's factory in a child process bounded by ``timeout``).
    Returns the model and how it was made (``exporter``, ``failed``).

    Args:
        spec: Model source: an ``.onnx`` file, ``zoo:NAME``, ``file.py:factory`` or ``module:factory``.
        workdir: Folder a PyTorch source is exported into.
        input_shape: Full example input shape, batch dim first (None: the model's own shape).
        largest: Largest batch (rows) the model is checked at.
        instances: Concurrent sessions the memory check assumes.
        max_seconds: Longest measurement window (s); a batch of ``largest`` rows must fit in it.
        option: Command-line option named in limit errors.
        exporters: PyTorch exporters to try in order (None: all known).
        timeout: Seconds a user's factory may take in its child process (None: no limit).

    Returns:
        tuple[ServedModel, dict[str, Any]]: The checked model and how it was made (``exporter``, ``failed``).

    Raises:
        InvalidModel: If the source is a graph rather than a model, cannot be loaded or exported, or fails its checks.
    """
    # deferred: imports onnxruntime
    from mlsysopt.serving.model import ServedModel

    src = resolve_source(spec)

    def check(model: ServedModel) -> None:
        check_model(model, int(largest), int(instances), max_seconds, option)

    if src.kind == "onnx":
        model = ServedModel(src.path, per_row_shape(input_shape))  # type: ignore[arg-type]
        check(model)
        return model, {"exporter": None, "failed": {}, "path": str(src.path)}
    if src.kind == "pytorch":
        return export_served(src, Path(workdir), check, input_shape, tuple(exporters or EXPORTERS), timeout)
    raise InvalidModel(
        f"'{spec}' is a {src.kind} source (a graph, not a model): serving needs an .onnx file or a PyTorch model "
        "(zoo:NAME, file.py:factory or module:factory)"
    )


class ModelStage:
    """A model loaded before the run folder exists; a PyTorch export lives in a temporary folder until :meth:`keep`.

    A refused model (bad file, unknown zoo name, a batch axis the job needs but the model lacks, a batch beyond the
    limits) therefore leaves nothing behind, and the run folder receives the exported ``.onnx`` only once it is open.
    """

    def __init__(self, spec: str, input_shape: tuple[int, ...] | None = None, **check: Any) -> None:
        self.spec = spec
        self._tmp: tempfile.TemporaryDirectory | None = tempfile.TemporaryDirectory(prefix="mlsysopt-model-")
        try:
            self.model, self.info = resolve_model(spec, Path(self._tmp.name), input_shape, **check)
        except BaseException:
            self.close()
            raise
        if self.info["exporter"] is None:  # a file of the user's: nothing to keep
            self.close()

    def keep(self, folder: Path) -> Path:
        """Copy an exported model into ``folder`` (a model file given by the user stays where it is)."""
        if self._tmp is None:
            return self.model.path
        return Path(shutil.copy2(self.model.path, Path(folder) / self.model.path.name))

    def close(self) -> None:
        """Remove the temporary folder of an exported model."""
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def load_config(path: Path) -> Config:
    """Knobs from any file a tune writes, or a plain ``{"instances": 2, ...}`` JSON object.

    * a tune's ``result.json``: the configuration its verdict chose (``recommended``: the default when the verdict
      says "keep the default"; ``best`` in files written before verdicts);
    * ``ort_session_options.json``: the session options plus its ``serving`` knobs;
    * ``config.pbtxt`` (Triton) and ``rayserve/serve_config.yaml`` (Ray Serve).

    Args:
        path: The file.

    Returns:
        Config: The validated configuration.

    Raises:
        InvalidSpace: If the file cannot be read or holds unknown knobs or bad values.
    """
    where = f"--config {path}"
    if path.suffix in (".yaml", ".yml"):
        return load_serve_config(path)
    if path.suffix == ".pbtxt":
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidSpace(f"{where}: cannot read it ({type(exc).__name__})") from None
        return config_from_triton(text, where)
    data = read_json(path, InvalidSpace)
    if not isinstance(data, dict):
        raise InvalidSpace(f"{where}: expected an object of knobs, got {type(data).__name__}")
    if isinstance(data.get("verdict"), dict) and data["verdict"].get("decision") == "SLO missed":
        raise InvalidSpace(
            f"{where}: that tune found no configuration meeting its SLO (verdict 'SLO missed'), so it recommends "
            "none; give the knobs (--instances, --max-batch, ...) or a looser SLO"
        )
    if isinstance(data.get("recommended"), dict):
        data = data["recommended"]
    elif isinstance(data.get("best"), dict):
        data = data["best"]
    elif "intra_op_num_threads" in data:  # ort_session_options.json
        return config_from_ort_json(data, where)
    return Config.from_dict(data, where=where)


def check_backend(kind: str, model: object | None) -> None:
    """Refuse an unknown backend kind, or a measured engine (real, rayserve) without a model."""
    if kind not in BACKENDS:
        raise MlsysoptError(f"unknown --engine '{kind}' (choose from: {', '.join(BACKENDS)})")
    if kind in MEASURED and model is None:
        raise MlsysoptError(f"--engine {kind} needs --model (an .onnx file, zoo:NAME or file.py:factory)")


def make_backend(
    kind: str,
    model: ServedModel | None = None,
    profile: ServiceProfile | None = None,
    requests: int = 200,
    slo_ms: float | None = None,
    seed: int = 0,
    max_seconds: float = MAX_SECONDS,
    window_s: float | None = None,
    address: str | None = None,
    port: int | None = None,
    log: str | None = None,
) -> Backend:
    """One measurement window: the ONNX Runtime engine or Ray Serve serving ``model``, or the simulator of ``profile``.

    Jobs wrap it in :class:`~mlsysopt.serving.windows.StableBackend` (windows until stable).

    Args:
        kind: ``"real"`` (ONNX Runtime engine), ``"rayserve"`` (Ray Serve over HTTP) or ``"sim"`` (SimPy simulator).
        model: The model to serve; required for ``"real"`` and ``"rayserve"``.
        profile: Service profile for ``"sim"`` (None: the ``synthetic:32`` profile).
        requests: Requests offered per window (most, with ``window_s``).
        slo_ms: p99 SLO in ms used for the violation rate (None: none).
        seed: Seed of the arrival schedules.
        max_seconds: Longest window of a measured engine (s).
        window_s: A window of a measured engine ends after this many seconds of arrivals or ``requests``,
            whichever comes first (None: always ``requests``).
        address: Ray cluster for ``"rayserve"`` (None: a private local instance; ``auto`` or ``HOST:PORT``).
        port: HTTP port of Ray Serve on 127.0.0.1 (None: a free one).
        log: File for Ray's own output (``"rayserve"``; None: a temporary file).

    Returns:
        Backend: A single-window backend.

    Raises:
        MlsysoptError: For an unknown ``kind``, a measured engine without a model, or Ray Serve not starting.
    """
    check_backend(kind, model)
    if kind == "real":
        # deferred: imports onnxruntime
        from mlsysopt.serving.engine import Engine

        return Engine(
            model, n_requests=requests, max_seconds=max_seconds, slo_ms=slo_ms, max_threads=machine_threads(),
            seed=seed, window_s=window_s,
        )  # type: ignore[arg-type]  # fmt: skip
    if kind == "rayserve":
        # deferred: mlsysopt.serving.rayserve imports torch, onnxruntime
        from mlsysopt.serving.rayserve import RayServeEngine  # Ray starts only for this engine

        return RayServeEngine(
            model, n_requests=requests, max_seconds=max_seconds, window_s=window_s, slo_ms=slo_ms,
            max_threads=machine_threads(), seed=seed, address=address, port=port, log=log,
        )  # type: ignore[arg-type]  # fmt: skip
    # deferred: imports simpy
    from mlsysopt.serving.simulator import SimulatedEngine

    return SimulatedEngine(profile or resolve_profile(DEFAULT_PROFILE), n_requests=requests, slo_ms=slo_ms, seed=seed)


def build_space(
    base: Space, knobs: Mapping[str, Sequence[float] | None], op_levels: Sequence[Sequence[int]] | None = None
) -> Space:
    """``base`` with the given knob value lists replacing its values (None keeps a knob's values).

    Args:
        base: The space whose values and thread limits are kept.
        knobs: Knob name to its new list of values (None keeps the knob's values).
        op_levels: The (intra_threads, execution_mode) pairs allowed (:class:`Space`; None: every pair).

    Returns:
        Space: The new space.

    Raises:
        InvalidSpace: For an unknown knob, an empty value list, or values the space refuses.
    """
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise InvalidSpace(f"unknown knob(s) {', '.join(unknown)} (knobs: {', '.join(KNOBS)})")
    values = {k: base.values[k] for k in base.knobs}
    for knob, given in knobs.items():
        if given is not None:
            if not given:
                raise InvalidSpace(f"{KNOB_OPTIONS[knob]} lists no values: the space would be empty")
            values[knob] = tuple(given)
    if all(given is None for given in knobs.values()) and op_levels is None:
        return base  # nothing replaced: the same grid (a 32-core one takes ~0.02 s to rebuild)
    return Space(**values, max_threads=base.max_threads, max_total_threads=base.max_total_threads, op_levels=op_levels)


def tuning_space(
    kind: str,
    cores: int,
    knobs: Mapping[str, Sequence[float] | None] | None = None,
    op_levels: Sequence[Sequence[int]] | None = None,
) -> Space:
    """The default grid of a ``cores``-core machine for backend ``kind``, with the given knob lists replacing it.

    Args:
        kind: Backend kind, ``"real"``, ``"rayserve"`` or ``"sim"`` (picks the default max-batch grid; only
            ``"rayserve"`` has the ``max_ongoing`` knob).
        cores: Cores of the machine, >= 1.
        knobs: Knob value lists replacing the defaults (None or a None value: keep the default).
        op_levels: The (intra_threads, execution_mode) pairs allowed (a cost model's shortlist; None: every pair).

    Returns:
        Space: The grid to tune over.

    Raises:
        InvalidSpace: If ``cores`` < 1, for an unknown knob, ``max_ongoing`` on an engine without it, or for bad
            values.
    """
    knobs = knobs or {}
    if knobs.get("max_ongoing") is not None and DEFAULT_MAX_ONGOING[kind] is None:
        raise InvalidSpace(
            f"knob max_ongoing is Ray Serve's (requests a replica admits): --engine {kind} has one shared queue and "
            "no such knob; use --engine rayserve"
        )
    base = Space.for_machine(cores, DEFAULT_MAX_BATCH[kind], DEFAULT_MAX_ONGOING[kind])
    return build_space(base, knobs, op_levels)


def resolve_prior(spec: str) -> Prior:
    """A prior across models from ``--prior``: ``preset`` (shipped, fitted on the tuning profiles' histories), a
    ``.pt`` file written by :meth:`Prior.save`, or comma-separated earlier ``serving tune`` run folders (each a
    history; a folder of run folders gives all of them), fitted here."""
    spec = spec.strip()
    if not spec:
        raise MlsysoptError("--prior is empty: give 'preset', a prior .pt file or earlier run folders")
    if spec == "preset":
        return preset_prior()
    if spec.endswith(".pt"):
        return Prior.load(Path(spec))
    return Prior().fit(histories_from_runs([p for p in spec.split(",") if p.strip()]))
