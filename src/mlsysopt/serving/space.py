"""The serving configuration space (request- and op-level knobs), the workload, and the SLO.

A :class:`Config` sets five knobs of a served model:

* request level: ``workers`` (concurrent inference sessions, one thread each), ``max_batch`` (largest dynamic
  batch) and ``batch_timeout_ms`` (how long a batch waits for more requests after its first one arrived);
* op level: ``intra_threads`` (ONNX Runtime ``intra_op_num_threads``) and ``inter_threads``
  (``inter_op_num_threads``; 1 means sequential execution, more switches the session to ``ORT_PARALLEL``).

A :class:`Space` is the grid of allowed values per knob. Its *normalized* coordinates put every knob's grid
positions evenly on [0, 1], so "a radius around a configuration" (RRL's region) means the same on every knob.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mlsysopt.errors import InvalidSpace

KNOBS = ("workers", "max_batch", "batch_timeout_ms", "intra_threads", "inter_threads")


@dataclass(frozen=True, order=True)
class Config:
    """One serving configuration: request-level and op-level parallelism."""

    workers: int = 1
    max_batch: int = 1
    batch_timeout_ms: float = 0.0
    intra_threads: int = 1
    inter_threads: int = 1

    @property
    def threads_per_worker(self) -> int:
        """Threads one session can keep busy: the intra-op pool plus the extra inter-op threads."""
        return self.intra_threads + self.inter_threads - 1

    @property
    def threads(self) -> int:
        """Cores the configuration can keep busy at once (its cost)."""
        return self.workers * self.threads_per_worker

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready dict of the five knobs."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> Config:
        """Build from a dict with (a subset of) the five knobs; unknown keys are an error."""
        unknown = sorted(set(data) - set(KNOBS))
        if unknown:
            raise InvalidSpace(f"{where}: unknown knob(s) {', '.join(unknown)} (knobs: {', '.join(KNOBS)})")
        try:
            values = {k: (float(v) if k == "batch_timeout_ms" else int(v)) for k, v in data.items()}
        except (TypeError, ValueError) as exc:
            raise InvalidSpace(f"{where}: knob values must be numbers ({exc})") from None
        cfg = cls(**values)
        cfg.check()
        return cfg

    def check(self, max_threads: int | None = None) -> None:
        """Raise :class:`InvalidSpace` for a knob below its minimum or, given ``max_threads``, above the machine."""
        for name in ("workers", "max_batch", "intra_threads", "inter_threads"):
            if getattr(self, name) < 1:
                raise InvalidSpace(f"knob {name}={getattr(self, name)} must be >= 1")
        if not (math.isfinite(self.batch_timeout_ms) and self.batch_timeout_ms >= 0):
            raise InvalidSpace(f"knob batch_timeout_ms={self.batch_timeout_ms} must be a finite number >= 0")
        if max_threads is not None:
            for name in ("workers", "intra_threads", "inter_threads"):
                if getattr(self, name) > max_threads:
                    raise InvalidSpace(
                        f"knob {name}={getattr(self, name)} exceeds the {max_threads} threads this machine allows"
                    )

    def label(self) -> str:
        """A short human-readable label, e.g. ``w2 b8 t5ms i1 o1``."""
        return (
            f"w{self.workers} b{self.max_batch} t{self.batch_timeout_ms:g}ms "
            f"i{self.intra_threads} o{self.inter_threads}"
        )


@dataclass(frozen=True)
class Workload:
    """An open-loop workload: Poisson arrivals at ``rate`` requests/s, each of ``request_size`` rows."""

    rate: float
    request_size: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise InvalidSpace(f"workload rate {self.rate} must be a positive number of requests per second")
        if self.request_size < 1:
            raise InvalidSpace(f"workload request_size {self.request_size} must be >= 1")

    def features(self) -> np.ndarray:
        """What a tuner's estimator sees of the workload: log rate and log request size."""
        return np.array([math.log(self.rate), math.log(self.request_size)], dtype=np.float64)

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready dict."""
        return {"rate": self.rate, "request_size": self.request_size}


class Space:
    """The grid of allowed values per knob; configurations are enumerated in a fixed order (last knob fastest)."""

    def __init__(
        self,
        workers: Sequence[int] = (1, 2),
        max_batch: Sequence[int] = (1, 2, 4, 8, 16),
        batch_timeout_ms: Sequence[float] = (0.0, 2.0, 5.0),
        intra_threads: Sequence[int] = (1, 2),
        inter_threads: Sequence[int] = (1, 2),
        max_threads: int | None = None,
        max_total_threads: int | None = None,
    ) -> None:
        self.values: dict[str, tuple] = {}
        for name, vals in zip(KNOBS, (workers, max_batch, batch_timeout_ms, intra_threads, inter_threads), strict=True):
            cast = float if name == "batch_timeout_ms" else int
            try:
                clean = tuple(sorted({cast(v) for v in vals}))
            except (TypeError, ValueError):
                raise InvalidSpace(f"knob {name}: values {list(vals)!r} are not numbers") from None
            if not clean:
                raise InvalidSpace(f"knob {name} has no values: the space is empty")
            self.values[name] = clean
        self.max_threads = max_threads
        self.max_total_threads = max_total_threads
        grid = [Config(*combo) for combo in itertools.product(*(self.values[k] for k in KNOBS))]
        for cfg in grid[:1] + grid[-1:]:  # extremes carry every knob's min and max
            cfg.check(max_threads)
        if max_total_threads is not None:
            grid = [c for c in grid if c.threads <= max_total_threads]
        if not grid:
            raise InvalidSpace(f"no configuration uses at most {max_total_threads} threads: the space is empty")
        self._configs = grid
        self._index = {c: i for i, c in enumerate(grid)}
        pos = {k: {v: i for i, v in enumerate(self.values[k])} for k in KNOBS}
        span = np.array([max(len(self.values[k]) - 1, 1) for k in KNOBS], dtype=np.float64)
        self._coords = np.array([[pos[k][getattr(c, k)] for k in KNOBS] for c in grid], dtype=np.float64) / span

    # ------------------------------------------------------------------ enumeration
    def __len__(self) -> int:
        return len(self._configs)

    def __iter__(self) -> Iterator[Config]:
        return iter(self._configs)

    def __contains__(self, config: object) -> bool:
        return config in self._index

    @property
    def size(self) -> int:
        """Number of configurations."""
        return len(self._configs)

    def configs(self) -> list[Config]:
        """All configurations in enumeration order."""
        return list(self._configs)

    def config(self, i: int) -> Config:
        """The ``i``-th configuration."""
        return self._configs[i]

    def index(self, config: Config) -> int:
        """Position of ``config``; :class:`InvalidSpace` if it is not in the space."""
        try:
            return self._index[config]
        except KeyError:
            raise InvalidSpace(f"configuration {config.label()} is not in the space") from None

    # ------------------------------------------------------------------ geometry
    @property
    def coords(self) -> np.ndarray:
        """(size, 5) normalized coordinates of every configuration (grid position / (values - 1))."""
        return self._coords

    def normalized(self, config: Config) -> np.ndarray:
        """Normalized coordinates of one configuration."""
        return self._coords[self.index(config)]

    def region(self, config: Config, radius: float) -> np.ndarray:
        """Indices of the configurations within Euclidean ``radius`` of ``config`` in normalized space."""
        d = np.linalg.norm(self._coords - self.normalized(config), axis=1)
        return np.flatnonzero(d <= radius + 1e-12)

    def neighbors(self, config: Config) -> list[Config]:
        """Configurations one grid step away on exactly one knob (hill climbing's moves)."""
        out = []
        for k in KNOBS:
            vals = self.values[k]
            i = vals.index(getattr(config, k))
            for j in (i - 1, i + 1):
                if 0 <= j < len(vals):
                    cand = Config(**{**config.to_dict(), k: vals[j]})
                    if cand in self._index:
                        out.append(cand)
        return out

    def middle(self) -> Config:
        """The configuration at the middle of every knob's grid (RRL's first measurement)."""
        mid = {k: self.values[k][(len(self.values[k]) - 1) // 2] for k in KNOBS}
        return self.nearest(Config(**mid))

    def default(self, cores: int | None = None) -> Config:
        """ONNX Runtime's out-of-the-box serving: one worker, no batching, intra threads = cores, sequential."""
        intra = cores if cores is not None else max(self.values["intra_threads"])
        want = Config(1, 1, 0.0, intra, 1)
        return self.nearest(want)

    def nearest(self, config: Config) -> Config:
        """The configuration in the space closest to ``config`` knob by knob (then by total distance)."""
        if config in self._index:
            return config
        raw = np.array([[getattr(c, k) for k in KNOBS] for c in self._configs], dtype=np.float64)
        want = np.array([getattr(config, k) for k in KNOBS], dtype=np.float64)
        scale = raw.max(axis=0) - raw.min(axis=0)
        scale[scale == 0] = 1.0
        return self._configs[int(np.argmin(np.abs((raw - want) / scale).sum(axis=1)))]

    def to_dict(self) -> dict:
        """A JSON-ready description of the grid."""
        return {
            **{k: list(v) for k, v in self.values.items()},
            "max_threads": self.max_threads,
            "max_total_threads": self.max_total_threads,
            "size": self.size,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "space") -> Space:
        """Inverse of :meth:`to_dict` (``size`` is ignored); unknown keys are an error."""
        allowed = {*KNOBS, "max_threads", "max_total_threads", "size"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise InvalidSpace(f"{where}: unknown key(s) {', '.join(unknown)}")
        kwargs = {k: v for k, v in data.items() if k != "size"}
        return cls(**kwargs)

    @classmethod
    def for_machine(cls, cores: int, max_batch: Sequence[int] = (1, 2, 4, 8, 16)) -> Space:
        """A sensible grid for a machine with ``cores`` cores: powers of two up to ``cores`` per knob."""
        if cores < 1:
            raise InvalidSpace(f"cores={cores} must be >= 1")
        pow2 = [2**i for i in range(int(math.log2(cores)) + 1)]
        return cls(
            workers=pow2,
            max_batch=max_batch,
            batch_timeout_ms=(0.0, 2.0, 5.0, 10.0),
            intra_threads=pow2,
            inter_threads=[p for p in pow2 if p <= 4],
            max_threads=cores,
            max_total_threads=2 * cores,
        )

    def __repr__(self) -> str:
        grid = ", ".join(f"{k}={list(v)}" for k, v in self.values.items())
        return f"Space({grid}; {self.size} configurations)"
