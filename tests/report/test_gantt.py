"""plot_gantt: writes a PNG atomically for small and large schedules, colours by op or hardware type."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsysopt.errors import InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import random_placement
from mlsysopt.graph.simulator import simulate
from mlsysopt.report.figures import save_figure, time_unit
from mlsysopt.report.gantt import plot_gantt

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _random_graph(n: int, seed: int = 0) -> CompGraph:
    rng = np.random.default_rng(seed)
    edges = [(i, j) for i in range(n) for j in {int(v) for v in rng.integers(i + 1, n + 3, size=2)} if j < n]
    ops = [("conv", "relu", "add", "linear", "softmax")[i % 5] for i in range(n)]
    return CompGraph.build(
        [f"t{i}" for i in range(n)],
        ops,
        {"compute": rng.uniform(0.5, 2.0, n)},
        edges,
        edge_bytes=rng.uniform(0, 1, len(edges)),
        hw_type=rng.integers(0, 2, n),
    )


def _cluster(d: int) -> DeviceCluster:
    full = np.ones((d, d))
    return DeviceCluster(np.linspace(1, 2, d), np.ones((d, 2), bool), full, full * 0.01)


@pytest.mark.parametrize(("n", "d"), [(8, 3), (400, 12)])
def test_writes_png(tmp_path: Path, n: int, d: int) -> None:
    g, c = _random_graph(n), _cluster(d)
    sched = simulate(g, c, random_placement(g, c, np.random.default_rng(1)))
    out = plot_gantt(g, c, sched, tmp_path / "sub" / "gantt.png", title="test")
    assert out == tmp_path / "sub" / "gantt.png"
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert [p.name for p in out.parent.iterdir()] == ["gantt.png"]  # no temp file left behind


def test_colour_by_hardware_type_and_svg(tmp_path: Path) -> None:
    g, c = _random_graph(20), _cluster(4)
    sched = simulate(g, c, np.zeros(20, np.int64))
    out = plot_gantt(g, c, sched, tmp_path / "g.svg", color_by="hw_type")
    assert out.read_text().lstrip().startswith("<?xml")
    with pytest.raises(ValueError, match="color_by"):
        plot_gantt(g, c, sched, tmp_path / "x.png", color_by="colour")  # type: ignore[arg-type]


def test_many_op_kinds_and_zero_duration_tasks(tmp_path: Path) -> None:
    n = 30
    g = CompGraph.build(
        [f"n{i}" for i in range(n)],
        [f"op{i}" for i in range(n)],  # more kinds than colours: merged into "(other)"
        {"compute": np.r_[0.0, np.ones(n - 2), 0.0]},
        [(i, i + 1) for i in range(n - 1)],
    )
    c = _cluster(2)
    sched = simulate(g, c, np.zeros(n, np.int64))
    assert plot_gantt(g, c, sched, tmp_path / "g.png").read_bytes()[:8] == PNG_MAGIC


def test_schedule_of_another_graph_is_rejected(tmp_path: Path) -> None:
    g, c = _random_graph(10), _cluster(2)
    sched = simulate(g, c, np.zeros(10, np.int64))
    with pytest.raises(InvalidPlacement):
        plot_gantt(_random_graph(11), c, sched, tmp_path / "g.png")
    assert not (tmp_path / "g.png").exists()


def test_save_figure_failure_leaves_nothing(tmp_path: Path) -> None:
    from mlsysopt.report.figures import new_figure

    fig = new_figure(2, 2)
    fig.add_subplot().plot([0, 1], [0, 1])
    with pytest.raises(ValueError):
        save_figure(fig, tmp_path / "plot.notaformat")
    assert list(tmp_path.iterdir()) == []


def test_time_unit() -> None:
    assert time_unit(5e-5) == (1e6, "µs")
    assert time_unit(0.02) == (1e3, "ms")
    assert time_unit(3.0) == (1.0, "s")
    assert time_unit(0.0) == (1.0, "s")
