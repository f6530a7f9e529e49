"""Limits on every size a serving job allocates or waits for, derived from this machine's memory and from time.

Checked before anything is allocated, each with an error that says the limit and why:

* rows of one batch (``max_batch``, profile ``--rows``): every instance may hold a batch of its inputs and
  intermediate tensors at once, so ``instances x rows x bytes per row`` must fit in half the available memory
  (bytes per row from ONNX shape inference at batch 1: inputs plus every intermediate and output tensor, an upper
  bound since ONNX Runtime reuses buffers); and one batch must fit in a measurement window (``rows x`` the
  measured ms of one row ``<= max_seconds``);
* the per-row input shape (``--input-shape``): one row of inputs must fit in that memory;
* requests per window (``--requests``): at most :data:`MAX_REQUESTS` (about 1 s of simulation, ~20 MB of
  request state);
* the rate: a window lasts at most ``max_seconds`` from its start, so a rate whose window would see fewer than
  :data:`MIN_WINDOW_REQUESTS` arrivals is refused rather than measured on nothing.
"""

from __future__ import annotations

import math

from mlsysopt.errors import InvalidSpace
from mlsysopt.limits import available_memory

MAX_REQUESTS = 100_000
MIN_WINDOW_REQUESTS = 10
MEMORY_FRACTION = 0.5


def memory_budget() -> int:
    """Bytes a serving job may allocate for batches: half the available memory."""
    return int(MEMORY_FRACTION * available_memory())


def gb(n: float) -> str:
    """Bytes as a short human-readable size."""
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def check_requests(requests: int, option: str = "--requests") -> None:
    """Refuse fewer than 1 or more than :data:`MAX_REQUESTS` requests per measurement window."""
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= MAX_REQUESTS:
        raise InvalidSpace(
            f"{option} {requests!r}: a window holds 1 to {MAX_REQUESTS:,} requests (more would keep ~200 bytes of "
            "state per request and ~10 us of simulation each beyond what a window needs)"
        )


def check_rate(rate: float, max_seconds: float, option: str = "--rate") -> None:
    """Refuse a rate whose window (at most ``max_seconds`` from its start) would see too few arrivals."""
    low = MIN_WINDOW_REQUESTS / max_seconds
    if rate < low:
        raise InvalidSpace(
            f"{option} {rate:g} req/s: a measurement window lasts at most {max_seconds:g} s, which would see about "
            f"{rate * max_seconds:.2g} requests; give at least {low:g} req/s ({MIN_WINDOW_REQUESTS} requests per "
            "window)"
        )


def check_row_input(shape_bytes: int, where: str) -> None:
    """Refuse a per-row input larger than the memory budget (before any array is made)."""
    budget = memory_budget()
    if shape_bytes > budget:
        raise InvalidSpace(
            f"{where}: one row of this input shape needs {gb(shape_bytes)}, more than the {gb(budget)} (half the "
            "available memory) a serving job may use"
        )


def max_rows(row_bytes: int, instances: int) -> int:
    """The most rows one batch may have when ``instances`` sessions each hold one (memory only)."""
    return max(1, memory_budget() // max(1, row_bytes * max(1, instances)))


def check_batch_memory(rows: int, row_bytes: int, instances: int, option: str) -> None:
    """Refuse ``rows`` rows per batch when ``instances`` such batches would not fit in the memory budget."""
    limit = max_rows(row_bytes, instances)
    if rows > limit:
        raise InvalidSpace(
            f"{option} {rows:,}: {instances} instance(s) x {rows:,} rows x {gb(row_bytes)} per row (inputs and "
            f"intermediate tensors) = {gb(rows * row_bytes * instances)} in warm-up, more than the "
            f"{gb(memory_budget())} (half the available memory) a serving job may use; at most {limit:,} rows"
        )


def check_batch_time(rows: int, ms_per_row: float, max_seconds: float, option: str) -> None:
    """Refuse ``rows`` rows per batch when one batch (at the measured ms per row) would outlast a window."""
    if ms_per_row <= 0 or not math.isfinite(ms_per_row):
        return
    limit = max(1, int(max_seconds * 1000.0 / ms_per_row))
    if rows > limit:
        raise InvalidSpace(
            f"{option} {rows:,}: one batch would take about {rows * ms_per_row / 1000:.3g} s ({ms_per_row:.3g} ms "
            f"per row measured), longer than a {max_seconds:g} s measurement window; at most {limit:,} rows"
        )
