"""One serving configuration (:class:`Config`): the six knobs of a served model and Ray Serve's seventh.

Request level: ``instances``, ``max_batch``, ``batch_timeout_ms`` and, on Ray Serve, ``max_ongoing``; op level:
``intra_threads``, ``inter_threads`` and ``execution_mode`` (:mod:`mlsysopt.serving.space` says what each means and
how a :class:`~mlsysopt.serving.space.Space` of them is enumerated).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.workload import as_float, as_int

#: Longest batch timeout (ms): the 10 s a measurement window of the real engine may last.
MAX_BATCH_TIMEOUT_MS = 10_000.0
KNOBS = (
    "instances", "max_batch", "batch_timeout_ms", "intra_threads", "inter_threads", "execution_mode", "max_ongoing"
)  # fmt: skip
#: the knobs every engine has (``max_ongoing`` is Ray Serve's only: a space has it only when given its values)
BASE_KNOBS = KNOBS[:6]
#: Ray Serve's default ``max_ongoing_requests`` (since Ray 2.32)
SERVE_DEFAULT_ONGOING = 5
#: Most requests one replica may admit at once: Triton Model Analyzer's largest concurrency; more only hides overload
MAX_ONGOING = 1024
INT_KNOBS = tuple(k for k in KNOBS if k != "batch_timeout_ms")
EXECUTION_MODES = {0: "seq", 1: "par"}


def cast_knob(name: str, value: object, where: str) -> float | int:
    """``value`` as knob ``name``'s type (a float for ``batch_timeout_ms``, else an int); :class:`InvalidSpace`
    naming ``where`` otherwise."""
    return as_float(value, where) if name == "batch_timeout_ms" else as_int(value, where)


@dataclass(frozen=True, order=True)
class Config:
    """One serving configuration: request-level and op-level parallelism.

    Args:
        instances: Concurrent inference sessions (one worker thread each), >= 1.
        max_batch: Largest dynamic batch in rows, >= 1 (1 = no batching).
        batch_timeout_ms: How long (ms) a batch waits for more requests after its first arrived, in [0, 10000].
        intra_threads: ONNX Runtime intra-op threads per session, >= 1.
        inter_threads: ONNX Runtime inter-op threads per session, >= 1 (used only in parallel mode).
        execution_mode: 0 = sequential (``ORT_SEQUENTIAL``), 1 = parallel (``ORT_PARALLEL``).
        max_ongoing: Requests one Ray Serve replica admits at once, in [1, 1024] (None: not set, see :attr:`ongoing`;
            the other engines ignore it).

    Note:
        The constructor does not validate; :meth:`check` and :meth:`from_dict` raise :class:`InvalidSpace`.
    """

    instances: int = 1
    max_batch: int = 1
    batch_timeout_ms: float = 0.0
    intra_threads: int = 1
    inter_threads: int = 1
    execution_mode: int = 0
    max_ongoing: int | None = None

    @property
    def ongoing(self) -> int:
        """Ray Serve's ``max_ongoing_requests``: ``max_ongoing``, or when not set max(Ray Serve's default 5, 2 x max
        batch), so that a replica admits a batch while one runs."""
        if self.max_ongoing is not None:
            return self.max_ongoing
        return max(SERVE_DEFAULT_ONGOING, 2 * self.max_batch)

    @property
    def parallel(self) -> bool:
        """Whether ONNX Runtime runs the graph with its parallel executor (which uses the inter-op threads)."""
        return self.execution_mode == 1

    @property
    def effective_inter(self) -> int:
        """Inter-op threads that actually run: ``inter_threads`` in parallel mode, else 1."""
        return self.inter_threads if self.parallel else 1

    @property
    def threads_per_instance(self) -> int:
        """Threads one session can keep busy: the intra-op pool plus the extra inter-op threads it uses."""
        return self.intra_threads + self.effective_inter - 1

    @property
    def threads(self) -> int:
        """Cores the configuration can keep busy at once (its cost)."""
        return self.instances * self.threads_per_instance

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready dict of the knobs (``max_ongoing`` only when set: files of the other engines are unchanged)."""
        d = asdict(self)
        if d["max_ongoing"] is None:
            del d["max_ongoing"]
        return d

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> Config:
        """Build from a dict with (a subset of) the knobs; unknown keys, 1.5 or true for an integer knob are errors."""
        if not isinstance(data, dict):
            raise InvalidSpace(f"{where}: expected an object of knobs, got {type(data).__name__}")
        unknown = sorted(set(data) - set(KNOBS))
        if unknown:
            raise InvalidSpace(f"{where}: unknown knob(s) {', '.join(unknown)} (knobs: {', '.join(KNOBS)})")
        values = {k: cast_knob(k, v, f"{where}: knob {k}") for k, v in data.items()}
        cfg = cls(**values)  # type: ignore[arg-type]
        try:
            cfg.check()
        except InvalidSpace as exc:
            raise InvalidSpace(f"{where}: {exc}") from None
        return cfg

    def check(self, max_threads: int | None = None) -> None:
        """Raise :class:`InvalidSpace` for a knob below its minimum or, given ``max_threads``, above the machine."""
        for name in ("instances", "max_batch", "intra_threads", "inter_threads"):
            if getattr(self, name) < 1:
                raise InvalidSpace(f"knob {name}={getattr(self, name)} must be >= 1")
        if self.max_ongoing is not None and not 1 <= self.max_ongoing <= MAX_ONGOING:
            raise InvalidSpace(
                f"knob max_ongoing={self.max_ongoing} must be in [1, {MAX_ONGOING}] (requests one replica admits)"
            )
        if self.execution_mode not in EXECUTION_MODES:
            raise InvalidSpace(f"knob execution_mode={self.execution_mode} must be 0 (sequential) or 1 (parallel)")
        if not (math.isfinite(self.batch_timeout_ms) and self.batch_timeout_ms >= 0):
            raise InvalidSpace(f"knob batch_timeout_ms={self.batch_timeout_ms} must be a finite number >= 0")
        if self.batch_timeout_ms > MAX_BATCH_TIMEOUT_MS:
            raise InvalidSpace(
                f"knob batch_timeout_ms={self.batch_timeout_ms:g} is above the limit of {MAX_BATCH_TIMEOUT_MS:g} ms "
                "(a batch may not wait longer than a measurement window lasts)"
            )
        if max_threads is not None:
            for name in ("instances", "intra_threads", "inter_threads"):
                if getattr(self, name) > max_threads:
                    raise InvalidSpace(
                        f"knob {name}={getattr(self, name)} exceeds the {max_threads} threads this machine allows"
                    )

    def label(self) -> str:
        """A short human-readable label, e.g. ``n2 b8 t5ms i1 o1 seq`` (`` q16``: max ongoing 16, when set)."""
        return (
            f"n{self.instances} b{self.max_batch} t{self.batch_timeout_ms:g}ms "
            f"i{self.intra_threads} o{self.inter_threads} {EXECUTION_MODES.get(self.execution_mode, '?')}"
            + ("" if self.max_ongoing is None else f" q{self.max_ongoing}")
        )
