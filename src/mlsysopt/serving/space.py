"""The serving configuration space (request- and op-level knobs), the workload, and equivalent configurations.

A :class:`Config` sets six knobs of a served model (Triton's and ONNX Runtime's names in brackets), and a seventh
that only Ray Serve has:

* request level: ``instances`` (concurrent inference sessions, one thread each; Triton's instance count),
  ``max_batch`` (largest dynamic batch; ``max_batch_size``) and ``batch_timeout_ms`` (how long a batch waits for
  more requests after its first one arrived; dynamic batching's ``max_queue_delay_microseconds``); on Ray Serve also
  ``max_ongoing`` (``max_ongoing_requests``: the requests one replica admits at once; the rest wait in Ray Serve's
  router). None (the default) means "not a knob here": the home engine and the simulator have one shared queue and
  no per-instance admission, and Ray Serve gets :attr:`Config.ongoing` = max(5, 2 x max batch);
* op level: ``intra_threads`` (``intra_op_num_threads``), ``inter_threads`` (``inter_op_num_threads``) and
  ``execution_mode`` (0 = ``ORT_SEQUENTIAL``, 1 = ``ORT_PARALLEL``; ONNX Runtime uses the inter-op threads only in
  parallel mode).

Equivalent configurations are one configuration (:meth:`Space.canonical`): at max batch 1 no batch ever waits, so
every batch timeout is the smallest one; in sequential mode the inter-op threads are unused, so they are the
smallest value; and the parallel executor with a single inter-op thread runs one node at a time, which is
sequential execution; a space without the ``max_ongoing`` knob reads every value of it as "not set". A
:class:`Space` enumerates only these canonical configurations (every tuner sees the reduced
space); ``raw_size`` is the size of the full grid. Normalized coordinates put every knob's grid positions evenly
on [0, 1], so "a radius around a configuration" (RRL's region) means the same on every knob.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.config import BASE_KNOBS as BASE_KNOBS  # re-exported: the configuration lived here
from mlsysopt.serving.config import EXECUTION_MODES as EXECUTION_MODES
from mlsysopt.serving.config import INT_KNOBS as INT_KNOBS
from mlsysopt.serving.config import KNOBS as KNOBS
from mlsysopt.serving.config import MAX_BATCH_TIMEOUT_MS as MAX_BATCH_TIMEOUT_MS
from mlsysopt.serving.config import MAX_ONGOING as MAX_ONGOING
from mlsysopt.serving.config import SERVE_DEFAULT_ONGOING as SERVE_DEFAULT_ONGOING
from mlsysopt.serving.config import Config as Config
from mlsysopt.serving.config import cast_knob
from mlsysopt.serving.workload import MAX_RATE as MAX_RATE  # re-exported: the workload lived here
from mlsysopt.serving.workload import Workload as Workload
from mlsysopt.serving.workload import as_int


class Space:
    """The grid of allowed values per knob, reduced to canonical configurations (enumerated, last knob fastest).

    Args:
        instances: Allowed instance counts (each >= 1).
        max_batch: Allowed largest batch sizes in rows (each >= 1).
        batch_timeout_ms: Allowed batch timeouts in ms (each in [0, 10000]).
        intra_threads: Allowed intra-op thread counts (each >= 1).
        inter_threads: Allowed inter-op thread counts (each >= 1).
        execution_mode: Allowed execution modes (0 = sequential, 1 = parallel).
        max_ongoing: Allowed Ray Serve ``max_ongoing_requests`` (each in [1, 1024]); None: not a knob of this space
            (every configuration has it unset, and the normalized coordinates have the six other knobs only).
        max_threads: Upper bound on ``instances``, ``intra_threads`` and ``inter_threads`` (None: no bound).
        max_total_threads: Drop configurations whose :attr:`Config.threads` exceeds this (None: keep all).
        op_levels: The (``intra_threads``, ``execution_mode``) pairs allowed, e.g. what a cost model kept
            (``serving tune --cost-model``); None: every pair of the two knobs' values. A grid of knob values cannot
            leave one pair out (kept ``i1 par`` and ``i2 seq`` would bring ``i2 par`` back); this can. Checked on the
            canonical configurations, so ``i1 o1 par`` counts as ``i1 seq``.

    Raises:
        InvalidSpace: If a knob's values are not a list, are empty or out of range, a pair of ``op_levels`` is not
            a pair of the knobs' values, or no configuration is left.
    """

    def __init__(
        self,
        instances: Sequence[int] = (1, 2),
        max_batch: Sequence[int] = (1, 2, 4, 8, 16),
        batch_timeout_ms: Sequence[float] = (0.0, 2.0, 5.0),
        intra_threads: Sequence[int] = (1, 2),
        inter_threads: Sequence[int] = (1, 2),
        execution_mode: Sequence[int] = (0, 1),
        max_ongoing: Sequence[int] | None = None,
        max_threads: int | None = None,
        max_total_threads: int | None = None,
        op_levels: Sequence[Sequence[int]] | None = None,
    ) -> None:
        self.values: dict[str, tuple] = {}
        given = (instances, max_batch, batch_timeout_ms, intra_threads, inter_threads, execution_mode, max_ongoing)
        #: the knobs of this space, in :data:`KNOBS` order (``max_ongoing`` only when given)
        self.knobs = KNOBS if max_ongoing is not None else BASE_KNOBS
        for name, vals in zip(self.knobs, given, strict=False):
            if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence):
                raise InvalidSpace(f"knob {name}: values must be a list, got {vals!r}")
            clean = tuple(sorted({cast_knob(name, v, f"knob {name}") for v in vals}))
            if not clean:
                raise InvalidSpace(f"knob {name} has no values: the space is empty")
            self.values[name] = clean
        self.values.setdefault("max_ongoing", (None,))
        self.max_threads = max_threads
        self.max_total_threads = max_total_threads
        grid = [Config(*combo) for combo in itertools.product(*(self.values[k] for k in KNOBS))]
        for cfg in grid[:1] + grid[-1:]:  # extremes carry every knob's min and max
            cfg.check(max_threads)
        if max_total_threads is not None:
            grid = [c for c in grid if c.threads <= max_total_threads]
        if not grid:
            raise InvalidSpace(f"no configuration uses at most {max_total_threads} threads: the space is empty")
        self.raw_size = len(grid)
        self._configs = list(dict.fromkeys(self.canonical(c) for c in grid))
        self.op_levels = None if op_levels is None else self._check_op_levels(op_levels)
        if self.op_levels is not None:
            self._configs = [c for c in self._configs if (c.intra_threads, c.execution_mode) in self.op_levels]
            if not self._configs:
                raise InvalidSpace(f"op_levels {self._op_text()}: no configuration of the space is left")
        self._index = {c: i for i, c in enumerate(self._configs)}
        pos = {k: {v: i for i, v in enumerate(self.values[k])} for k in self.knobs}
        span = np.array([max(len(self.values[k]) - 1, 1) for k in self.knobs], dtype=np.float64)
        raw = [[pos[k][getattr(c, k)] for k in self.knobs] for c in self._configs]
        self._coords = np.array(raw, dtype=np.float64).reshape(-1, len(self.knobs)) / span

    def _check_op_levels(self, pairs: Sequence[Sequence[int]]) -> tuple[tuple[int, int], ...]:
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or not pairs:
            raise InvalidSpace(
                f"op_levels: expected a non-empty list of [intra_threads, execution_mode], got {pairs!r}"
            )
        out = set()
        for pair in pairs:
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise InvalidSpace(f"op_levels: {pair!r} is not an [intra_threads, execution_mode] pair")
            intra = as_int(pair[0], "op_levels: intra_threads")
            mode = as_int(pair[1], "op_levels: execution_mode")
            if intra not in self.values["intra_threads"] or mode not in self.values["execution_mode"]:
                raise InvalidSpace(
                    f"op_levels: [{intra}, {mode}] is not a pair of the space's values (intra_threads "
                    f"{list(self.values['intra_threads'])}, execution_mode {list(self.values['execution_mode'])})"
                )
            out.add((intra, mode))
        return tuple(sorted(out))

    def _op_text(self) -> str:
        return ", ".join(f"i{i} {EXECUTION_MODES[m]}" for i, m in self.op_levels or ())

    # ------------------------------------------------------------------ equivalence
    def canonical(self, config: Config) -> Config:
        """The one configuration that stands for every configuration equivalent to ``config``.

        At max batch 1 the timeout never matters (the smallest timeout of the grid stands for all); in sequential
        mode the inter-op threads are unused (the smallest inter-op value stands for all); parallel mode with one
        inter-op thread is sequential execution (when the grid has sequential mode). Without the ``max_ongoing``
        knob every value of it is "not set"; with it, "not set" is the value Ray Serve gets (:attr:`Config.ongoing`).
        """
        change: dict[str, float | None] = {}
        if "max_ongoing" not in self.knobs and config.max_ongoing is not None:
            change["max_ongoing"] = None
        elif "max_ongoing" in self.knobs and config.max_ongoing is None:
            change["max_ongoing"] = config.ongoing
        if config.max_batch == 1:
            change["batch_timeout_ms"] = self.values["batch_timeout_ms"][0]
        parallel = config.parallel
        if parallel and config.inter_threads == 1 and 0 in self.values["execution_mode"]:
            change["execution_mode"], parallel = 0, False
        if not parallel:
            change["inter_threads"] = self.values["inter_threads"][0]
        return replace(config, **change) if change else config

    @property
    def reduction(self) -> dict[str, float]:
        """How much the equivalences shrank the grid: raw size, size, and the fraction removed."""
        return {"raw_size": self.raw_size, "size": self.size, "removed_fraction": 1.0 - self.size / self.raw_size}

    # ------------------------------------------------------------------ enumeration
    def __len__(self) -> int:
        return len(self._configs)

    def __iter__(self) -> Iterator[Config]:
        return iter(self._configs)

    def __contains__(self, config: object) -> bool:
        return config in self._index

    @property
    def size(self) -> int:
        """Number of distinct (canonical) configurations."""
        return len(self._configs)

    def configs(self) -> list[Config]:
        """All configurations in enumeration order."""
        return list(self._configs)

    def config(self, i: int) -> Config:
        """The ``i``-th configuration."""
        return self._configs[i]

    def index(self, config: Config) -> int:
        """Position of ``config`` (or of its canonical form); :class:`InvalidSpace` if it is not in the space."""
        i = self._index.get(config)
        if i is None:
            i = self._index.get(self.canonical(config))
        if i is None:
            raise InvalidSpace(f"configuration {config.label()} is not in the space")
        return i

    # ------------------------------------------------------------------ geometry
    @property
    def coords(self) -> np.ndarray:
        """(size, knobs) normalized coordinates of every configuration (grid position / (values - 1))."""
        return self._coords

    def normalized(self, config: Config) -> np.ndarray:
        """Normalized coordinates of one configuration."""
        return self._coords[self.index(config)]

    def region(self, config: Config, radius: float) -> np.ndarray:
        """Indices of the configurations within Euclidean ``radius`` of ``config`` in normalized space."""
        d = np.linalg.norm(self._coords - self.normalized(config), axis=1)
        return np.flatnonzero(d <= radius + 1e-12)

    def neighbors(self, config: Config) -> list[Config]:
        """Distinct configurations one grid step away on exactly one knob (hill climbing's moves)."""
        config = self.canonical(config)
        out: list[Config] = []
        for k in self.knobs:
            vals = self.values[k]
            i = vals.index(getattr(config, k))
            for j in (i - 1, i + 1):
                if 0 <= j < len(vals):
                    cand = self.canonical(replace(config, **{k: vals[j]}))
                    if cand != config and cand in self._index and cand not in out:
                        out.append(cand)
        return out

    def middle(self) -> Config:
        """The configuration at the middle of every knob's grid (RRL's first measurement)."""
        mid = {k: self.values[k][(len(self.values[k]) - 1) // 2] for k in self.knobs}
        return self.nearest(Config(**mid))

    def default(self, cores: int | None = None) -> Config:
        """ONNX Runtime's out-of-the-box serving: one instance, no batching, intra threads = cores, sequential."""
        intra = cores if cores is not None else max(self.values["intra_threads"])
        return self.nearest(Config(1, 1, 0.0, intra, 1, 0))

    def nearest(self, config: Config) -> Config:
        """The configuration in the space closest to ``config`` knob by knob (then by total distance)."""
        config = self.canonical(config)
        if config in self._index:
            return config
        raw = np.array([[getattr(c, k) for k in self.knobs] for c in self._configs], dtype=np.float64)
        want = np.array([getattr(config, k) for k in self.knobs], dtype=np.float64)
        scale = raw.max(axis=0) - raw.min(axis=0)
        scale[scale == 0] = 1.0
        return self._configs[int(np.argmin(np.abs((raw - want) / scale).sum(axis=1)))]

    def to_dict(self) -> dict:
        """A JSON-ready description of the grid, with its raw and reduced sizes."""
        return {
            **{k: list(self.values[k]) for k in self.knobs},
            "max_threads": self.max_threads,
            "max_total_threads": self.max_total_threads,
            **({} if self.op_levels is None else {"op_levels": [list(p) for p in self.op_levels]}),
            "size": self.size,
            "raw_size": self.raw_size,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "space") -> Space:
        """Inverse of :meth:`to_dict` (``size``/``raw_size`` are ignored); unknown keys are an error."""
        allowed = {*KNOBS, "max_threads", "max_total_threads", "op_levels", "size", "raw_size"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise InvalidSpace(f"{where}: unknown key(s) {', '.join(unknown)}")
        kwargs = {k: v for k, v in data.items() if k not in ("size", "raw_size")}
        return cls(**kwargs)

    @classmethod
    def for_machine(
        cls, cores: int, max_batch: Sequence[int] = (1, 2, 4, 8, 16), max_ongoing: Sequence[int] | None = None
    ) -> Space:
        """A sensible grid for a machine with ``cores`` cores: powers of two up to ``cores`` per thread knob, the
        given max batches and (Ray Serve) max ongoing requests."""
        if cores < 1:
            raise InvalidSpace(f"cores={cores} must be >= 1")
        pow2 = [2**i for i in range(int(math.log2(cores)) + 1)]
        return cls(
            instances=pow2,
            max_batch=max_batch,
            batch_timeout_ms=(0.0, 2.0, 5.0, 10.0),
            intra_threads=pow2,
            inter_threads=[p for p in pow2 if p <= 4],
            execution_mode=(0, 1),
            max_ongoing=max_ongoing,
            max_threads=cores,
            max_total_threads=2 * cores,
        )

    def __repr__(self) -> str:
        grid = ", ".join(f"{k}={list(self.values[k])}" for k in self.knobs)
        if self.op_levels is not None:
            grid += f", op_levels=[{self._op_text()}]"
        return f"Space({grid}; {self.size} configurations of {self.raw_size})"
