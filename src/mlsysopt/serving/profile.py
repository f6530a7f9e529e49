"""The service time of one inference batch as a small parametric model, fitted to timings of a served model.

The model of one ``session.run`` over ``rows`` rows with ``intra`` intra-op and ``inter`` inter-op threads::

    ms = a_ms + c_ms * rows * amdahl(f_intra, intra) * amdahl(f_inter, inter)
         + intra_ms * (intra - 1) + inter_ms * (inter - 1)
    amdahl(f, n) = (1 - f) + f / n

``a_ms`` is the per-batch overhead, ``c_ms`` the single-thread cost of one row, ``f_intra``/``f_inter`` the
fractions of that cost the intra-op pool / parallel graph execution can spread over threads (Amdahl's law), and
``intra_ms``/``inter_ms`` the per-batch cost of each extra intra-op / inter-op thread (waking and joining it;
``inter > 1`` also switches ONNX Runtime to its parallel executor, whose scheduling costs land in ``inter_ms``).
Six parameters: a profile fits from ~20 timings.

Calibrated to the engine (what the simulator uses): the measured timings themselves (``table``) wherever they
cover a configuration (the same intra/inter threads, rows within the measured range: linear interpolation between
measured rows), the parametric model only beyond; and ``dispatch_ms``, the per-batch overhead of the engine
around ``session.run`` (queue hand-off, waking a worker, concatenating rows, the load generator's pipe),
calibrated from a low-rate engine run where no request waits for another (:func:`dispatch_overhead`).

A profile describes one machine (``cores``). Measured on a small machine, it can be *extrapolated* to a bigger
one with :meth:`ServiceProfile.scaled`: thread counts beyond the measured ones then follow Amdahl's law, which is
an extrapolation, not a measurement (real speedups flatten sooner: memory bandwidth, caches, NUMA).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.io import read_json, write_json_atomic

SOURCES = ("measured", "extrapolated", "synthetic")
PARAMS = ("a_ms", "c_ms", "f_intra", "f_inter", "intra_ms", "inter_ms")
FACTS = ("flops", "n_params", "input_bytes")  # optional model facts (0 = unknown)
OVERHEADS = ("dispatch_ms", "handoff_ms", "wake_ms")  # the engine's own costs, calibrated (0 = not calibrated)
_FRACTIONS = ("f_intra", "f_inter")
_MIN_SAMPLES = len(PARAMS)


class TimesBatches(Protocol):
    """What :func:`measure_samples` needs of a served model (``mlsysopt.serving.model.ServedModel`` has it)."""

    def time_batch(self, rows: int, intra: int, inter: int, repeats: int = 5) -> float:
        """Median milliseconds of one ``session.run`` over ``rows`` rows with the given thread counts."""
        ...


@dataclass(frozen=True)
class ServiceSample:
    """One timing: a batch of ``rows`` rows with ``intra``/``inter`` threads took ``ms`` milliseconds.

    Args:
        rows: Rows in the batch, >= 1.
        intra: Intra-op threads, >= 1.
        inter: Inter-op threads, >= 1 (1 = sequential executor).
        ms: Median time of one ``session.run`` in ms, > 0.
    """

    rows: int
    intra: int
    inter: int
    ms: float


def _amdahl(f: float | np.ndarray, n: float | np.ndarray) -> float | np.ndarray:
    return (1.0 - f) + f / n


def _predict(p: np.ndarray, rows: np.ndarray, intra: np.ndarray, inter: np.ndarray) -> np.ndarray:
    a, c, fi, fo, ti, to = p
    return a + c * rows * _amdahl(fi, intra) * _amdahl(fo, inter) + ti * (intra - 1) + to * (inter - 1)


@dataclass(frozen=True)
class ServiceProfile:
    """Service time (ms) of one batch as a function of rows, intra-op and inter-op threads on a ``cores`` machine.

    Args:
        a_ms: Per-batch overhead (ms), >= 0.
        c_ms: Single-thread cost of one row (ms), > 0.
        f_intra: Fraction of the row cost the intra-op pool parallelizes, in [0, 1].
        f_inter: Fraction of the row cost parallel graph execution parallelizes, in [0, 1].
        intra_ms: Per-batch cost of each extra intra-op thread (ms), >= 0.
        inter_ms: Per-batch cost of each extra inter-op thread (ms), >= 0.
        cores: Cores of the machine described, >= 1.
        source: ``"measured"``, ``"extrapolated"`` or ``"synthetic"``.
        model: Name of the profiled model ("" if unnamed).
        dispatch_ms: Calibrated per-batch engine overhead around ``session.run`` (ms, 0 if not calibrated).
        handoff_ms: Calibrated arrival-to-queue delay (ms, latency only, occupies no worker).
        wake_ms: Calibrated extra delay before a batch whose worker sat idle (ms).
        table: Measured timings as ``(rows, intra, inter, ms)`` tuples, used where they cover a point.
        measured_threads: Most intra-op threads timed (0: none).
        flops: FLOPs of one row (0: unknown).
        n_params: Parameter count of the model (0: unknown).
        input_bytes: Bytes of one row of inputs (0: unknown).

    Raises:
        InvalidSpace: If a field is missing, negative, non-finite, a fraction above 1, ``c_ms`` <= 0, ``cores`` is
            not a whole number >= 1 or ``source`` is unknown.
    """

    a_ms: float
    c_ms: float
    f_intra: float
    f_inter: float
    intra_ms: float
    inter_ms: float
    cores: int
    source: str = "measured"
    model: str = ""
    dispatch_ms: float = 0.0  # per-batch engine overhead around session.run (calibrated, 0 if not)
    handoff_ms: float = 0.0  # arrival -> in the server's queue (load generator, pipe, receiving thread): latency only
    wake_ms: float = 0.0  # extra before a batch whose worker sat idle (thread wake-up, cold session run)
    table: tuple[tuple[int, int, int, float], ...] = ()  # measured (rows, intra, inter, ms)
    measured_threads: int = 0  # the most intra-op threads timed (0: none, e.g. synthetic)
    flops: float = 0.0  # the model's FLOPs for one row (0: unknown), a feature of priors across models
    n_params: float = 0.0  # the model's parameters (0: unknown)
    input_bytes: float = 0.0  # bytes of one row of inputs (0: unknown)

    def __post_init__(self) -> None:
        _check_fields(asdict(self), where="service profile")
        object.__setattr__(self, "table", tuple(tuple(t) for t in self.table))
        lookup: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for rows, intra, inter, ms in self.table:
            lookup.setdefault((int(intra), int(inter)), []).append((int(rows), float(ms)))
        object.__setattr__(self, "_lookup", {k: sorted(v) for k, v in lookup.items()})

    def model_ms(self, rows: int, intra: int, inter: int) -> float:
        """The parametric model's milliseconds for one batch (no table, no dispatch overhead)."""
        if rows < 1 or intra < 1 or inter < 1:
            raise InvalidSpace(f"service_ms needs rows, intra, inter >= 1 (got {rows}, {intra}, {inter})")
        return float(_predict(self.params, np.float64(rows), np.float64(intra), np.float64(inter)))

    def covers(self, rows: int, intra: int, inter: int) -> bool:
        """Whether the measured table covers this point (same threads, rows within the measured range)."""
        pts = self._lookup.get((int(intra), int(inter)))  # type: ignore[attr-defined]
        return bool(pts) and pts[0][0] <= rows <= pts[-1][0]

    def service_ms(self, rows: int, intra: int, inter: int) -> float:
        """Milliseconds of one ``session.run`` of ``rows`` rows: the measured table where it covers, else the model."""
        if rows < 1 or intra < 1 or inter < 1:
            raise InvalidSpace(f"service_ms needs rows, intra, inter >= 1 (got {rows}, {intra}, {inter})")
        if self.covers(rows, intra, inter):
            pts = self._lookup[(int(intra), int(inter))]  # type: ignore[attr-defined]
            return float(np.interp(rows, [p[0] for p in pts], [p[1] for p in pts]))
        return self.model_ms(rows, intra, inter)

    def batch_ms(self, rows: int, intra: int, inter: int) -> float:
        """What one batch costs a simulated worker: :meth:`service_ms` plus the per-batch dispatch overhead."""
        return self.service_ms(rows, intra, inter) + self.dispatch_ms

    def with_table(self, samples: Sequence[ServiceSample], dispatch_ms: float | None = None) -> ServiceProfile:
        """This profile calibrated to the engine: ``samples`` as its timings table (and a dispatch overhead)."""
        table = tuple((s.rows, s.intra, s.inter, s.ms) for s in samples)
        threads = max((s.intra for s in samples), default=0)
        disp = self.dispatch_ms if dispatch_ms is None else float(dispatch_ms)
        return replace(self, table=table, measured_threads=threads, dispatch_ms=disp)

    def warnings(self) -> list[str]:
        """What makes this profile doubtful: a degenerate fit, or an extrapolation > 4x past the measured threads."""
        out = []
        varied_intra = len({t[1] for t in self.table}) > 1
        varied_inter = len({t[2] for t in self.table}) > 1
        if self.table and self.a_ms < 1e-6 * self.c_ms:
            out.append(f"degenerate fit: per-batch overhead a_ms = {self.a_ms:.2g} ms (at its bound 0)")
        for name, varied in (("f_intra", varied_intra), ("f_inter", varied_inter)):
            value = getattr(self, name)
            if varied and (value < 1e-6 or value > 1 - 1e-6):
                out.append(
                    f"degenerate fit: parallel fraction {name} = {value:.2g} (at its bound): the timings show no "
                    "thread speed-up (a busy machine?)"
                )
        if self.measured_threads and self.cores > 4 * self.measured_threads:
            out.append(
                f"extrapolation: a {self.cores}-core profile from timings of at most {self.measured_threads} intra-op "
                f"threads ({self.cores / self.measured_threads:.0f}x past what was measured; Amdahl's law, not a "
                "measurement)"
            )
        return out

    @property
    def params(self) -> np.ndarray:
        """The six fitted parameters in :data:`PARAMS` order."""
        return np.array([getattr(self, k) for k in PARAMS], dtype=np.float64)

    def scaled(self, cores: int) -> ServiceProfile:
        """The same parameters describing a ``cores``-core machine (Amdahl extrapolation beyond measured threads).

        A measured profile becomes ``extrapolated``; a synthetic one stays ``synthetic``.
        """
        if cores == self.cores:
            return self
        source = "synthetic" if self.source == "synthetic" else "extrapolated"
        return replace(self, cores=cores, source=source)

    @classmethod
    def synthetic(cls, cores: int = 32) -> ServiceProfile:
        """A plausible mid-size CNN on a CPU, for studying tuners without any measurement.

        1 ms per batch (framework call, allocation), 0.6 ms per row on one thread, 90% of the per-row work
        parallel over intra-op threads (convolutions), 30% over inter-op threads (independent branches),
        0.05 ms per extra intra-op thread and 0.1 ms per extra inter-op thread (the parallel executor).
        """
        return cls(1.0, 0.6, 0.9, 0.3, 0.05, 0.1, cores=cores, source="synthetic", model="synthetic-cnn")

    def fit_error(self, samples: Sequence[ServiceSample]) -> float:
        """Median relative error |predicted - measured| / measured over ``samples``."""
        if not samples:
            raise InvalidSpace("fit_error needs at least one sample")
        rows, intra, inter, ms = _arrays(samples)
        return float(np.median(np.abs(_predict(self.params, rows, intra, inter) - ms) / ms))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the parameters, cores, source, model name, dispatch overhead and timings table."""
        d = asdict(self)
        d["table"] = [list(t) for t in self.table]
        return d

    def save(self, path: str | Path) -> Path:
        """Write the profile as JSON atomically."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> ServiceProfile:
        """Read a profile written by :meth:`save`; :class:`InvalidSpace` naming the file (and key) if it is bad."""
        path = Path(path)
        return cls.from_dict(read_json(path, InvalidSpace), where=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "service profile") -> ServiceProfile:
        """Inverse of :meth:`to_dict`; :class:`InvalidSpace` naming ``where`` and the key if a field is bad."""
        _check_fields(data, where=where)
        kwargs = {k: float(data[k]) for k in PARAMS}
        return cls(
            **kwargs, cores=int(data["cores"]), source=data.get("source", "measured"), model=data.get("model", ""),
            table=tuple(tuple(t) for t in data.get("table", ())), measured_threads=int(data.get("measured_threads", 0)),
            **{k: float(data.get(k, 0.0)) for k in (*FACTS, *OVERHEADS)},
        )  # fmt: skip


def _check_table(table: object, where: str) -> None:
    if not isinstance(table, (list, tuple)) or len(table) > 100_000:
        raise InvalidSpace(f"{where}: key 'table' must be a list of at most 100,000 [rows, intra, inter, ms] rows")
    for i, row in enumerate(table):
        ok = isinstance(row, (list, tuple)) and len(row) == 4
        ok = ok and all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in row)
        ok = ok and all(float(v).is_integer() and v >= 1 for v in row[:3]) and row[3] > 0
        if not ok:
            raise InvalidSpace(
                f"{where}: table[{i}] must be [rows, intra, inter, ms] (whole numbers >= 1, ms > 0), got {row!r}"
            )


def _check_fields(data: dict[str, Any], where: str) -> None:
    """Raise one :class:`InvalidSpace` naming ``where`` and the key for a missing, unknown or bad field."""
    allowed = {*PARAMS, *FACTS, *OVERHEADS, "cores", "source", "model", "table", "measured_threads"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidSpace(f"{where}: unknown key(s) {', '.join(unknown)} (keys: {', '.join(sorted(allowed))})")
    for key in (*PARAMS, "cores"):
        if key not in data:
            raise InvalidSpace(f"{where}: missing key '{key}'")
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidSpace(f"{where}: key '{key}' must be a finite number, got {value!r}")
        if value < 0:
            raise InvalidSpace(f"{where}: key '{key}' must be >= 0, got {value!r}")
    for key in _FRACTIONS:
        if data[key] > 1:
            raise InvalidSpace(f"{where}: key '{key}' is a parallel fraction and must be <= 1, got {data[key]!r}")
    if data["c_ms"] <= 0:
        raise InvalidSpace(f"{where}: key 'c_ms' (per-row cost) must be > 0, got {data['c_ms']!r}")
    cores = data["cores"]
    if isinstance(cores, bool) or cores != int(cores) or cores < 1 or cores > 1_000_000:
        raise InvalidSpace(f"{where}: key 'cores' must be a whole number >= 1, got {cores!r}")
    if data.get("source", "measured") not in SOURCES:
        raise InvalidSpace(f"{where}: key 'source' must be one of {', '.join(SOURCES)}, got {data['source']!r}")
    if not isinstance(data.get("model", ""), str):
        raise InvalidSpace(f"{where}: key 'model' must be a string, got {data['model']!r}")
    for key in OVERHEADS:
        v = data.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
            raise InvalidSpace(f"{where}: key '{key}' must be a finite number >= 0, got {v!r}")
    for key in FACTS:
        v = data.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= 1e18):
            raise InvalidSpace(f"{where}: key '{key}' must be a number from 0 (unknown) to 1e18, got {v!r}")
    threads = data.get("measured_threads", 0)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise InvalidSpace(f"{where}: key 'measured_threads' must be a whole number >= 0, got {threads!r}")
    _check_table(data.get("table", ()), where)


def _arrays(samples: Iterable[ServiceSample]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    arr = np.array([(s.rows, s.intra, s.inter, s.ms) for s in samples], dtype=np.float64).reshape(-1, 4)
    if not np.all(np.isfinite(arr)) or np.any(arr[:, :3] < 1) or np.any(arr[:, 3] <= 0):
        raise InvalidSpace("service samples need rows, intra, inter >= 1 and a finite, positive ms")
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


def fit_profile(samples: Sequence[ServiceSample], cores: int, model: str = "") -> ServiceProfile:
    """Robust least-squares fit of the six parameters to timings, on log-ms (relative errors count).

    A knob the samples never vary (e.g. every sample has ``inter=1``) cannot be fitted: its parallel fraction
    and per-thread cost are held at 0 (more threads neither help nor cost, beyond contention). The soft-L1 loss
    keeps a few timings disturbed by other processes (a thread waiting for a busy core) from dragging the fit.

    Args:
        samples: At least six timings, covering at least two batch sizes.
        cores: Cores of the machine the samples were timed on.
        model: Name recorded in the profile.

    Returns:
        ServiceProfile: The fitted profile, with ``source="measured"`` and no timings table.

    Raises:
        InvalidSpace: With fewer than six samples, a single batch size, or a sample with rows/intra/inter < 1 or
            a non-positive or non-finite ms.
    """
    from scipy.optimize import least_squares  # deferred: scipy loads only when a profile is fitted

    if len(samples) < _MIN_SAMPLES:
        raise InvalidSpace(f"fitting a service profile needs at least {_MIN_SAMPLES} samples, got {len(samples)}")
    rows, intra, inter, ms = _arrays(samples)
    if np.unique(rows).size < 2:
        raise InvalidSpace("fitting a service profile needs samples of at least two batch sizes (rows)")
    log_ms = np.log(ms)
    a0 = 0.5 * float(ms.min())
    c0 = max(float(np.median((ms - a0) / rows)), 1e-6)
    x0 = np.array([a0, c0, 0.5, 0.1, 0.01 * a0, 0.01 * a0])
    # parameters of a knob with one value only: fixed at 0
    vary_intra, vary_inter = np.unique(intra).size > 1, np.unique(inter).size > 1
    free = np.array([True, True, vary_intra, vary_inter, vary_intra, vary_inter])
    lower = np.array([0.0, 1e-9, 0.0, 0.0, 0.0, 0.0])[free]
    upper = np.array([np.inf, np.inf, 1.0, 1.0, np.inf, np.inf])[free]
    full = np.zeros(len(PARAMS))

    def residuals(x: np.ndarray) -> np.ndarray:
        full[free] = x
        return np.log(np.maximum(_predict(full, rows, intra, inter), 1e-12)) - log_ms

    res = least_squares(residuals, x0[free], bounds=(lower, upper), x_scale="jac", loss="soft_l1", f_scale=0.1)
    params = np.zeros(len(PARAMS))
    params[free] = res.x
    return ServiceProfile(*(float(v) for v in params), cores=int(cores), source="measured", model=model)


def measure_samples(
    served_model: TimesBatches,
    rows: Sequence[int] = (1, 2, 4, 8, 16, 32),
    intra: Sequence[int] = (1, 2),
    inter: Sequence[int] = (1, 2),
    repeats: int = 5,
    on_sample: Callable[[ServiceSample], None] | None = None,
) -> list[ServiceSample]:
    """Time every (rows, intra, inter) combination with ``served_model.time_batch`` (median of ``repeats``).

    ``inter`` > 1 times ONNX Runtime's parallel executor with that many inter-op threads, 1 the sequential one.

    Args:
        served_model: Anything with ``time_batch(rows, intra, inter, repeats)`` returning ms.
        rows: Batch sizes (rows) to time.
        intra: Intra-op thread counts to time.
        inter: Inter-op thread counts to time.
        repeats: Runs per point; the median is kept.
        on_sample: Called with each sample as soon as it is timed (None: not called).

    Returns:
        list[ServiceSample]: One sample per (intra, inter, rows), rows varying fastest.
    """
    out = []
    for i in intra:
        for o in inter:
            for r in rows:
                ms = float(served_model.time_batch(int(r), int(i), int(o), repeats=repeats))
                out.append(ServiceSample(int(r), int(i), int(o), ms))
                if on_sample is not None:
                    on_sample(out[-1])
    return out
