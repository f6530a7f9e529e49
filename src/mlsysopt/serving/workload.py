"""The workload a served model sees, and the number checks every serving input goes through.

A :class:`Workload` is open-loop Poisson arrivals at a rate, each request of some rows. :func:`as_int` and
:func:`as_float` turn a knob or option value into a number, or refuse it with one line naming where it came from.
(Split from :mod:`mlsysopt.serving.space`, which re-exports ``Workload`` and ``MAX_RATE``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsysopt.errors import InvalidSpace

MAX_RATE = 1e6  # requests/s: the load generator paces arrivals at best ~1 us apart


def as_int(value: object, where: str) -> int:
    """``value`` as an int; a bool, a fraction or a non-number is one :class:`InvalidSpace` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidSpace(f"{where} must be a whole number, got {value!r}")
    if isinstance(value, (float, np.floating)) and not (math.isfinite(value) and float(value).is_integer()):
        raise InvalidSpace(f"{where} must be a whole number, got {value!r}")
    return int(value)


def as_float(value: object, where: str) -> float:
    """``value`` as a finite float; a bool or a non-number is one :class:`InvalidSpace` naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidSpace(f"{where} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise InvalidSpace(f"{where} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Workload:
    """An open-loop workload: Poisson arrivals at ``rate`` requests/s, each of ``request_size`` rows.

    Args:
        rate: Mean arrival rate in requests/s, in (0, 1e6].
        request_size: Rows per request, >= 1.

    Raises:
        InvalidSpace: If ``rate`` is not a positive finite number up to 1e6 req/s or ``request_size`` is not a whole
            number >= 1.
    """

    rate: float
    request_size: int = 1

    def __post_init__(self) -> None:
        rate = self.rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
            raise InvalidSpace(f"workload rate {rate!r} must be a positive number of requests per second")
        if rate > MAX_RATE:
            raise InvalidSpace(
                f"workload rate {rate:g} req/s is above the {MAX_RATE:,.0f} req/s the load generator can pace "
                "(arrivals 1 us apart)"
            )
        as_int(self.request_size, "workload request_size")
        if self.request_size < 1:
            raise InvalidSpace(f"workload request_size {self.request_size} must be >= 1")

    def features(self) -> np.ndarray:
        """What a tuner's estimator sees of the workload: log rate and log request size."""
        return np.array([math.log(self.rate), math.log(self.request_size)], dtype=np.float64)

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready dict."""
        return {"rate": self.rate, "request_size": self.request_size}
