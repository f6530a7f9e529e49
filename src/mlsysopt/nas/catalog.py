"""The search spaces as a table (``mlsysopt nas spaces``): what each holds, how it is evaluated, its data."""

from __future__ import annotations

import inspect
import math
import time
from typing import Any

from mlsysopt.nas.spaces import NASBENCH_GRAPH_DATASETS, get_space

SOURCES = {
    "nasbench-graph": "real tables shipped by the nas-bench-graph package",
    "digits": "scikit-learn's bundled 8x8 digit images (1,797), trained for real",
    "cifar10": "an image folder you give (train/<class>/, test/<class>/), trained for real",
}


def _cnn_archs(ops: int, widths: int, max_blocks: int) -> int:
    """Distinct CNN architectures of 1..max_blocks blocks (each block: two ops and a width)."""
    per_block = ops * ops * widths
    return sum(per_block**b for b in range(1, max_blocks + 1))


def space_catalog() -> dict[str, Any]:
    """``{"rows", "cnn_ops", "cnn_widths", "resources", "sources", "load_s"}``: one row per space (tables read).

    Returns:
        dict[str, Any]: ``rows`` (one per space: ``space``, ``archs``, ``blocks``, median latency and params,
        ``evaluation``), ``cnn_ops``, ``cnn_widths``, ``resources`` per space family, ``sources`` and ``load_s``
        (seconds spent reading the tables).
    """
    from mlsysopt.models.cnn_cell import OPS  # deferred: mlsysopt.models.cnn_cell imports torch
    from mlsysopt.nas.spaces.cnn import CnnSpace  # deferred: mlsysopt.nas.spaces.cnn imports torch

    defaults = {k: p.default for k, p in inspect.signature(CnnSpace.__init__).parameters.items()}
    widths, max_blocks = tuple(defaults["widths"]), int(defaults["max_blocks"])
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for d in NASBENCH_GRAPH_DATASETS:
        sp = get_space(f"nasbench-graph:{d}")
        st = sp.table_stats()  # type: ignore[attr-defined]
        rows.append({
            "space": sp.name,
            "archs": int(st["n_archs"]),
            "blocks": f"{sp.min_blocks}-{sp.max_blocks}",
            "median_latency_ms": st["median_latency_ms"],
            "median_params": st["median_params"],
            "evaluation": "table look-up",
        })  # fmt: skip
    load_s = time.perf_counter() - t0
    n = _cnn_archs(len(OPS), len(widths), max_blocks)
    for name in ("digits", "cifar10:/folder"):
        rows.append({"space": name, "archs": n, "blocks": f"1-{max_blocks}", "median_latency_ms": math.nan,
                     "median_params": math.nan, "evaluation": "training"})  # fmt: skip
    return {
        "rows": rows,
        "cnn_ops": list(OPS),
        "cnn_widths": list(widths),
        "resources": {
            "nasbench-graph": ["params", "latency_ms"],
            "cnn": ["params", "flops", "latency_ms", "intensity"],
        },
        "sources": SOURCES,
        "load_s": load_s,
    }
