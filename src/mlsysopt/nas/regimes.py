"""The constraints of a search: ``--constraint-mode`` and limits checked and built, and the benchmark's regimes
(hard limits at quantiles of a NAS-Bench-Graph table)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.constraints import MODES, RESOURCES, Constraints, parse_name

if TYPE_CHECKING:
    from mlsysopt.nas.spaces.base import SearchSpace


def check_limits(mode: str, limits: dict[str, float | None]) -> None:
    """Each given limit must be a number > 0 (named by its option) and the mode hard or soft."""
    for name, v in limits.items():
        if parse_name(name) is None:
            raise MlsysoptError(
                f"unknown constraint '{name}' (choose from: {', '.join(RESOURCES)}, or max_<resource> / "
                "min_<resource> for a resource your space reports)"
            )
        if v is not None and not (math.isfinite(v) and v > 0):
            raise MlsysoptError(f"--{name.replace('_', '-')} must be a number > 0, got {v:g}")
    if mode not in MODES:
        raise MlsysoptError(f"unknown --constraint-mode '{mode}' (choose from: {', '.join(MODES)})")


def build_constraints(mode: str, limits: dict[str, float | None]) -> Constraints:
    """``Constraints`` from the limit options (``None`` = no such constraint).

    Args:
        mode: ``"hard"`` or ``"soft"``.
        limits: Constraint name (``max_latency_ms``, ``max_params``, ...) to its limit, > 0 (None: no constraint).

    Returns:
        Constraints: The constraints.

    Raises:
        MlsysoptError: For an unknown mode or a limit that is not a number > 0.
    """
    check_limits(mode, limits)
    return Constraints.from_limits(mode=mode, **limits)


def median_constraints(space: SearchSpace) -> Constraints:
    """Hard limits at a NAS-Bench-Graph table's median latency and median params (the benchmark's constraints).

    Args:
        space: A NAS-Bench-Graph space (it must have ``table_stats``).

    Returns:
        Constraints: Hard ``max_latency_ms`` and ``max_params`` at the table's medians.
    """
    stats = space.table_stats()  # type: ignore[attr-defined]
    return Constraints.from_limits(max_latency_ms=stats["median_latency_ms"], max_params=stats["median_params"])


#: Constraint regimes of the benchmark, as quantiles of a table's (latency, params): "tight" puts both at the lower
#: quartile (~8% of the cells are feasible), "single" only params at the 10th percentile, "median" both at the median.
REGIMES: dict[str, tuple[float | None, float | None]] = {
    "median": (0.5, 0.5),
    "tight": (0.25, 0.25),
    "single": (None, 0.10),
}


def table_constraints(space: SearchSpace, regime: str) -> Constraints:
    """Hard limits at quantiles of a NAS-Bench-Graph table's latency and params (:data:`REGIMES`).

    Args:
        space: A NAS-Bench-Graph space (it must have ``table``).
        regime: ``"median"``, ``"tight"`` (both at the lower quartile) or ``"single"`` (params at the 10th percentile).

    Returns:
        Constraints: Hard limits in ms and parameters.

    Raises:
        MlsysoptError: For an unknown regime.
    """
    if regime not in REGIMES:
        raise MlsysoptError(f"unknown constraint regime '{regime}' (choose from: {', '.join(REGIMES)})")
    lat_q, par_q = REGIMES[regime]
    entries = list(space.table.values())  # type: ignore[attr-defined]
    limits: dict[str, float | None] = {"max_latency_ms": None, "max_params": None}
    if lat_q is not None:
        limits["max_latency_ms"] = float(np.quantile([float(e["latency"]) for e in entries], lat_q)) * 1000.0
    if par_q is not None:
        limits["max_params"] = float(np.quantile([float(e["para"]) for e in entries], par_q)) * 1e6
    return Constraints.from_limits(**limits)
