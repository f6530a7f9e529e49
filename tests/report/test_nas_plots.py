"""NAS plots: Pareto panels per resource and best-so-far curves, for ordinary and degenerate inputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.report.nas import pareto_front, plot_best_so_far, plot_pareto

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _points(n: int, seed: int = 0, group: str = "epnas") -> list[dict]:
    rng = np.random.default_rng(seed)
    pts = []
    for i in range(n):
        res = {"params": float(rng.uniform(1e3, 1e6)), "flops": float(rng.uniform(1e5, 1e8)),
               "latency_ms": float(rng.uniform(0.1, 5)), "intensity": float(rng.uniform(1, 20))}  # fmt: skip
        perf = math.nan if i == 3 else float(rng.uniform(0.5, 0.9))
        pts.append({"perf": perf, "resources": res, "feasible": res["params"] < 5e5, "group": group})
    return pts


def test_pareto_front_keeps_only_non_dominated_points() -> None:
    xs, ys = pareto_front([1, 2, 3, 4, float("nan")], [0.5, 0.4, 0.7, 0.7, 0.9])
    assert (xs, ys) == ([1, 3], [0.5, 0.7])
    xs, ys = pareto_front([1, 2, 3], [0.9, 0.5, 0.6], minimize_x=False)  # higher x is better (intensity)
    assert (xs, ys) == ([1, 3], [0.9, 0.6])
    assert pareto_front([], []) == ([], [])


def test_pareto_with_limits_background_failures_and_several_methods(tmp_path: Path) -> None:
    pts = _points(30) + _points(20, seed=1, group="random")
    limits = {"params": (5e5, "max"), "latency_ms": (3.0, "max"), "intensity": (5.0, "min")}
    chosen = [{"perf": 0.9, "resources": pts[0]["resources"], "group": "epnas"},
              {"perf": 0.8, "resources": pts[40]["resources"], "group": "random"}]  # fmt: skip
    rng = np.random.default_rng(2)
    background = {"perf": rng.uniform(0, 1, 500), "params": rng.uniform(1e3, 1e6, 500)}
    out = plot_pareto(pts, ["params", "flops", "latency_ms", "intensity"], tmp_path / "p.png", limits=limits,
                      chosen=chosen, background=background)  # fmt: skip
    assert out.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    "points",
    [
        [],  # nothing evaluated
        [{"perf": math.nan, "resources": {}, "feasible": False}],  # one failed evaluation, no resources
        [{"perf": 0.7, "resources": {"params": 10.0}, "feasible": True}],  # a single point
        [{"perf": None, "resources": {"params": None}}],  # JSON nulls
    ],
)
def test_pareto_degenerate_inputs(tmp_path: Path, points: list[dict]) -> None:
    out = plot_pareto(points, ["params"], tmp_path / "p.png", limits={"params": (5.0, "max")},
                      chosen={"perf": 0.7, "resources": {"params": 10.0}})  # fmt: skip
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_best_so_far_curves_with_nan_prefix_and_reference(tmp_path: Path) -> None:
    runs = {"epnas": [math.nan, 0.5, 0.7, 0.7, 0.8], "random": [0.4, 0.6], "never": [math.nan, math.nan], "empty": []}
    out = plot_best_so_far(runs, tmp_path / "b.png", reference=0.85)
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert plot_best_so_far({}, tmp_path / "e.png", reference=float("nan")).read_bytes()[:8] == PNG_MAGIC
