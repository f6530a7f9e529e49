"""Array conversions for the graph IR that refuse, naming the key, what numpy would silently wrap or coerce."""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsysopt.errors import InvalidGraph


def as_int_array(value: Any, dtype: Any, key: str) -> np.ndarray:
    """``value`` as an integer array of ``dtype``; InvalidGraph for non-integers or values that do not fit
    (casting 2**40 to int32 would silently wrap it to 0)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidGraph(f"'{key}' cannot be read as integers: {exc}") from None
    if arr.size == 0:
        return np.ascontiguousarray(arr, dtype=dtype)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise InvalidGraph(f"'{key}' must hold integers, got {arr.dtype} values")
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise InvalidGraph(f"'{key}' must hold integers, got {arr[bad].flat[0].item()!r}")
    info = np.iinfo(dtype)
    low, high = arr.min(), arr.max()
    if low < info.min or high > info.max:
        v = low if low < info.min else high
        raise InvalidGraph(
            f"'{key}' value {v.item()} is out of range (at most {info.max:,} for {np.dtype(dtype).name})"
        )
    return np.ascontiguousarray(arr, dtype=dtype)


def as_typed_array(value: Any, dtype: Any, key: str) -> np.ndarray:
    """``value`` as a contiguous array of ``dtype``; InvalidGraph naming ``key`` when it cannot be converted."""
    try:
        return np.ascontiguousarray(np.asarray(value), dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidGraph(f"'{key}' cannot be read as {np.dtype(dtype).name}: {exc}") from None
