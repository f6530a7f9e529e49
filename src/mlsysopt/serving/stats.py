"""Statistics of repeated measurement windows: 95% confidence intervals, perf_analyzer's stability rule, noise.

* :func:`mean_ci` — Student-t interval of the mean over independent windows (each window's value is one sample).
* :func:`median_ci` — a distribution-free interval of the median from order statistics (binomial), used for the
  confirmed values, which are medians over interleaved rounds.
* :func:`stable` — perf_analyzer's rule: the last ``count`` windows lie within ``tolerance`` (relative to their
  mean) of each other on every watched quantity (mean latency, p99 latency, throughput).
* :func:`cv` — coefficient of variation, the machine noise of repeated windows of one configuration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95


def _finite(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean of ``values``; (v, v) for one value, (inf, inf) when none is finite.

    Args:
        values: One value per independent window; None or non-finite values make the interval (inf, inf).
        confidence: Coverage of the interval, in (0, 1).

    Returns:
        tuple[float, float]: The interval ``(lo, hi)``.
    """
    from scipy.stats import t  # deferred: scipy loads only for a confidence interval

    x = _finite(values)
    if x.size < len(values) or x.size == 0:
        return (math.inf, math.inf)
    m = float(x.mean())
    if x.size == 1:
        return (m, m)
    half = float(t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return (m - half, m + half)


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Order-statistic interval of the median: the widest-coverage pair (x_(k), x_(n+1-k)) with >= ``confidence``.

    With fewer than 6 values no pair reaches 95% and the interval is [min, max] (coverage 1 - 2^(1-n)).

    Args:
        values: The samples (e.g. one per confirmation round); None or non-finite values make it (inf, inf).
        confidence: Minimum coverage of the interval, in (0, 1).

    Returns:
        tuple[float, float]: The interval ``(lo, hi)`` of order statistics.
    """
    from scipy.stats import binom  # deferred: scipy loads only for a confidence interval

    x = np.sort(_finite(values))
    if x.size < len(values) or x.size == 0:
        return (math.inf, math.inf)
    n = x.size
    k = 1  # 1-based: the largest k with P(k <= B <= n - k) >= confidence, B ~ Binomial(n, 1/2)
    for cand in range(1, n // 2 + 1):
        if binom.cdf(n - cand, n, 0.5) - binom.cdf(cand - 1, n, 0.5) >= confidence:
            k = cand
    return (float(x[k - 1]), float(x[n - k]))


def spread(values: Sequence[float]) -> float:
    """(max - min) / mean of ``values``; inf if any is not finite or the mean is 0."""
    x = _finite(values)
    if x.size < len(values) or x.size == 0:
        return math.inf
    m = float(x.mean())
    return float((x.max() - x.min()) / m) if m > 0 else (0.0 if x.max() == x.min() else math.inf)


def stable(series: Sequence[Sequence[float]], count: int = 3, tolerance: float = 0.10) -> bool:
    """Whether the last ``count`` values of every series lie within ``tolerance`` of their mean (perf_analyzer)."""
    if any(len(s) < count for s in series):
        return False
    for s in series:
        x = _finite(list(s)[-count:])
        if x.size < count:
            return False
        m = float(x.mean())
        if m > 0 and float(np.abs(x - m).max()) > tolerance * m:
            return False
    return True


def cv(values: Sequence[float]) -> float:
    """Coefficient of variation (sample standard deviation / mean); inf when undefined."""
    x = _finite(values)
    if x.size < 2 or x.size < len(values) or x.mean() <= 0:
        return math.inf
    return float(x.std(ddof=1) / x.mean())
