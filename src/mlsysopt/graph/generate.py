"""Seeded synthetic task graphs and device clusters (GiPH / Topcuoglu generators) plus small test fixtures.

Everything here is pure numpy and deterministic in its integer ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidCluster, InvalidGraph, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.limits import check_devices, check_tasks
from mlsysopt.graph.units import units_of as graph_units  # which UNITS preset fits a graph


def layered_dag(
    num_tasks: int = 20,
    alpha: float = 0.2,
    p: float = 0.3,
    compute_avg: float = 1.0,
    compute_beta: float = 0.5,
    bytes_avg: float = 1.0,
    bytes_beta: float = 0.5,
    num_types: int = 5,
    seed: int = 0,
) -> CompGraph:
    """A random layered DAG with exactly ``num_tasks`` tasks, one source and one sink (Topcuoglu/GiPH).

    Height ≈ U(0.8, 1.2)·√v/α layers, layer widths ceil(U(0, 2α√v)); the first and last layers hold the
    single source and sink (both count toward ``num_tasks``). Middle layers are cut off once the task budget
    is spent, or grown proportionally when it is not reached, so the count is exact. Every task gets an edge
    from each task of an earlier layer with probability ``p``, at least one parent in the previous layer and
    at least one child in the next. Compute ~ compute_avg·U(1 ± β/2), edge bytes ~ bytes_avg·U(1 ± β/2),
    hardware type uniform in [0, num_types).

    Args:
        num_tasks: Exact number of tasks (>= 1), source and sink included.
        alpha: Shape parameter (> 0): small values give tall, narrow graphs; large values short, wide ones.
        p: Probability in [0, 1] of an edge from each task of an earlier layer.
        compute_avg: Mean task compute (> 0), in synthetic work units.
        compute_beta: Relative spread of compute, in [0, 2).
        bytes_avg: Mean edge size (>= 0), in synthetic data units.
        bytes_beta: Relative spread of edge sizes, in [0, 2).
        num_types: Number of hardware types (>= 1) tasks are drawn from.
        seed: Integer seed; the graph is deterministic in it.

    Returns:
        The generated graph, its parameters recorded in ``meta``.

    Raises:
        InvalidGraph: If an argument has the wrong type or is out of range, or the drawn values are not finite.
        InvalidOption: If the graph would not fit this machine's memory or time budget.
    """
    _check_int("num_tasks", num_tasks, 1, InvalidGraph)
    _check_int("num_types", num_types, 1, InvalidGraph)
    _check_int("seed", seed, None, InvalidGraph)
    _check_float("alpha", alpha, InvalidGraph, low=0.0, low_open=True)
    _check_float("p", p, InvalidGraph, low=0.0, high=1.0)
    _check_float("compute_avg", compute_avg, InvalidGraph, low=0.0, low_open=True)
    _check_float("bytes_avg", bytes_avg, InvalidGraph, low=0.0)
    _check_beta("compute_beta", compute_beta, InvalidGraph)
    _check_beta("bytes_beta", bytes_beta, InvalidGraph)
    check_tasks(num_tasks, p, "num_tasks")
    rng = np.random.default_rng(seed)
    n = num_tasks

    widths = _layer_widths(n, alpha, rng)
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    for layer in range(1, len(widths)):
        s0, w, wp = int(starts[layer]), int(widths[layer]), int(widths[layer - 1])
        block = rng.random((s0, w)) < p  # rows: every earlier task; cols: this layer's tasks
        orphan = np.flatnonzero(~block[s0 - wp :].any(axis=0))
        block[s0 - wp + rng.integers(wp, size=orphan.size), orphan] = True
        r, c = np.nonzero(block)
        srcs.append(r)
        dsts.append(c + s0)
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int64)

    # tasks outside the last layer without a child get one in the next layer, so the sink is unique
    has_child = np.zeros(n, bool)
    has_child[src] = True
    layer_of = np.repeat(np.arange(len(widths)), widths)
    lonely = np.flatnonzero(~has_child[: n - int(widths[-1])])
    nxt = layer_of[lonely] + 1
    extra_dst = starts[nxt] + (rng.random(lonely.size) * widths[nxt]).astype(np.int64)
    edges = np.stack([np.concatenate([src, lonely]), np.concatenate([dst, extra_dst])], axis=1)
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]

    compute = compute_avg * _spread(rng, compute_beta, n)
    nbytes = bytes_avg * _spread(rng, bytes_beta, len(edges))
    _check_drawn("compute_avg", compute, InvalidGraph, positive=True)
    _check_drawn("bytes_avg", nbytes, InvalidGraph, positive=False)
    hw = rng.integers(num_types, size=n)
    meta = {
        "name": f"layered-n{n}-a{alpha:g}-p{p:g}-s{seed}",
        "generator": "layered_dag",
        "num_tasks": n,
        "alpha": float(alpha),
        "p": float(p),
        "compute_avg": float(compute_avg),
        "compute_beta": float(compute_beta),
        "bytes_avg": float(bytes_avg),
        "bytes_beta": float(bytes_beta),
        "num_types": num_types,
        "seed": seed,
        "layers": len(widths),
    }
    return _task_graph(n, edges, compute, nbytes, hw, meta)


def _layer_widths(n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Layer widths summing to ``n``: a width-1 source layer, middle layers, a width-1 sink layer."""
    if n <= 2:
        return np.ones(n, np.int64)
    root = math.sqrt(n)
    height = max(3, round(rng.uniform(0.8, 1.2) * root / alpha))
    mid = np.maximum(1, np.ceil(rng.uniform(0.0, 2.0 * alpha * root, size=height - 2))).astype(np.int64)
    budget = n - 2
    total = int(mid.sum())
    if total > budget:
        keep = int(np.searchsorted(np.cumsum(mid), budget)) + 1
        mid = mid[:keep]
        mid[-1] -= int(mid.sum()) - budget
    elif total < budget:
        mid = mid + rng.multinomial(budget - total, mid / total)
    return np.concatenate([[1], mid, [1]]).astype(np.int64)


def random_cluster(
    num_devices: int = 20,
    num_types: int = 5,
    speed_avg: float = 1.0,
    speed_beta: float = 0.5,
    bandwidth_avg: float = 1.0,
    bandwidth_beta: float = 0.5,
    delay_avg: float = 0.1,
    q: float = 0.5,
    seed: int = 0,
) -> DeviceCluster:
    """A random heterogeneous cluster (GiPH): symmetric links, every type covered, every device useful.

    Speed ~ speed_avg·U(1 ± β/2); 1/bandwidth ~ (1/bandwidth_avg)·U(1 ± β/2); delay ~ U(0, 2·delay_avg).
    Each device supports each type with probability ``q``; a type no device drew is given to one random
    device, and a device that drew no type is given one random type.

    Args:
        num_devices: Number of devices (>= 1).
        num_types: Number of hardware types (>= 1).
        speed_avg: Mean device speed (> 0), in synthetic work units per time unit.
        speed_beta: Relative spread of speeds, in [0, 2).
        bandwidth_avg: Mean link bandwidth (> 0), in synthetic data units per time unit.
        bandwidth_beta: Relative spread of inverse bandwidths, in [0, 2).
        delay_avg: Mean link delay (>= 0), in synthetic time units.
        q: Probability in [0, 1] that a device supports a given type.
        seed: Integer seed; the cluster is deterministic in it.

    Returns:
        A cluster in ``synthetic`` units.

    Raises:
        InvalidCluster: If an argument has the wrong type or is out of range, or the drawn values are not finite.
        InvalidOption: If the cluster would not fit this machine's memory.
    """
    _check_int("num_devices", num_devices, 1, InvalidCluster)
    _check_int("num_types", num_types, 1, InvalidCluster)
    _check_int("seed", seed, None, InvalidCluster)
    _check_float("speed_avg", speed_avg, InvalidCluster, low=0.0, low_open=True)
    _check_float("bandwidth_avg", bandwidth_avg, InvalidCluster, low=0.0, low_open=True)
    _check_float("delay_avg", delay_avg, InvalidCluster, low=0.0)
    _check_float("q", q, InvalidCluster, low=0.0, high=1.0)
    _check_beta("speed_beta", speed_beta, InvalidCluster)
    _check_beta("bandwidth_beta", bandwidth_beta, InvalidCluster)
    check_devices(num_devices, 1, "num_devices")
    rng = np.random.default_rng(seed)
    d = num_devices

    speed = speed_avg * _spread(rng, speed_beta, d)
    inv_bw = _symmetric(rng, d, lambda k: _spread(rng, bandwidth_beta, k) / bandwidth_avg)
    delay = _symmetric(rng, d, lambda k: rng.uniform(0.0, 2.0 * delay_avg, size=k))
    with np.errstate(divide="ignore", over="ignore"):
        bandwidth = 1.0 / inv_bw
    _check_drawn("speed_avg", speed, InvalidCluster, positive=True)
    _check_drawn("bandwidth_avg", bandwidth[~np.eye(d, dtype=bool)], InvalidCluster, positive=True)
    _check_drawn("delay_avg", delay, InvalidCluster, positive=False)

    supports = rng.random((d, num_types)) < q
    idle = np.flatnonzero(~supports.any(axis=1))
    supports[idle, rng.integers(num_types, size=idle.size)] = True
    uncovered = np.flatnonzero(~supports.any(axis=0))
    supports[rng.integers(d, size=uncovered.size), uncovered] = True
    return DeviceCluster(speed, supports, bandwidth, delay, units="synthetic")


def _symmetric(rng: np.random.Generator, d: int, draw: Any) -> np.ndarray:
    """A symmetric (d, d) matrix with zero diagonal whose upper triangle is ``draw(count)``."""
    mat = np.zeros((d, d))
    iu = np.triu_indices(d, k=1)
    mat[iu] = draw(iu[0].size)
    return mat + mat.T


def _spread(rng: np.random.Generator, beta: float, size: int) -> np.ndarray:
    """``size`` draws of U(1 − β/2, 1 + β/2)."""
    return rng.uniform(1.0 - beta / 2.0, 1.0 + beta / 2.0, size=size)


# ---------------------------------------------------------------------- fixtures
def chain(n: int, compute: float = 1.0, nbytes: float = 1.0) -> CompGraph:
    """``t0 -> t1 -> ... -> t{n-1}``."""
    _check_int("n", n, 1, InvalidGraph)
    edges = [(i, i + 1) for i in range(n - 1)]
    return _fixture("chain", n, edges, compute, nbytes)


def fork(n: int, compute: float = 1.0, nbytes: float = 1.0) -> CompGraph:
    """One source ``t0`` feeding ``n - 1`` independent children (no join)."""
    _check_int("n", n, 2, InvalidGraph)
    edges = [(0, i) for i in range(1, n)]
    return _fixture("fork", n, edges, compute, nbytes)


def fork_join(n: int, compute: float = 1.0, nbytes: float = 1.0) -> CompGraph:
    """Source ``t0`` -> ``n - 2`` parallel branches -> sink ``t{n-1}``."""
    _check_int("n", n, 3, InvalidGraph)
    edges = [(0, i) for i in range(1, n - 1)] + [(i, n - 1) for i in range(1, n - 1)]
    return _fixture("fork_join", n, edges, compute, nbytes)


def diamond(compute: float = 1.0, nbytes: float = 1.0) -> CompGraph:
    """The 4-task diamond ``t0 -> {t1, t2} -> t3``."""
    g = fork_join(4, compute, nbytes)
    g.meta["name"] = "diamond"
    return g


def homogeneous_cluster(
    num_devices: int,
    speed: float = 1.0,
    bandwidth: float = 1.0,
    delay: float = 0.0,
    num_types: int = 1,
) -> DeviceCluster:
    """Identical devices that support every type, joined by identical links."""
    _check_int("num_devices", num_devices, 1, InvalidCluster)
    _check_int("num_types", num_types, 1, InvalidCluster)
    d = num_devices
    return DeviceCluster(
        np.full(d, float(speed)),
        np.ones((d, num_types), bool),
        np.full((d, d), float(bandwidth)),
        np.full((d, d), float(delay)),
    )


def _fixture(kind: str, n: int, edges: Sequence[tuple[int, int]], compute: float, nbytes: float) -> CompGraph:
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    return _task_graph(
        n,
        e,
        np.full(n, float(compute)),
        np.full(len(e), float(nbytes)),
        np.zeros(n, np.int64),
        {"name": kind},
    )


def _task_graph(
    n: int, edges: np.ndarray, compute: np.ndarray, nbytes: np.ndarray, hw: np.ndarray, meta: dict[str, Any]
) -> CompGraph:
    """A CompGraph of ``task`` nodes named t0..t{n-1}; flops = compute, bytes_in/out summed over edges."""
    features = {
        "compute": compute,
        "flops": compute,
        "bytes_out": np.bincount(edges[:, 0], weights=nbytes, minlength=n),
        "bytes_in": np.bincount(edges[:, 1], weights=nbytes, minlength=n),
    }
    return CompGraph.build([f"t{i}" for i in range(n)], ["task"] * n, features, edges, nbytes, hw, meta)


# ---------------------------------------------------------------------- argument checks
def _check_int(name: str, value: Any, low: int | None, err: type[MlsysoptError]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise err(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise err(f"{name} must be >= {low}, got {value}")


def _check_float(
    name: str,
    value: Any,
    err: type[MlsysoptError],
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise err(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise err(f"{name} must be finite, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise err(f"{name} must be {'>' if low_open else '>='} {low:g}, got {value}")
    if high is not None and value > high:
        raise err(f"{name} must be <= {high:g}, got {value}")


def _check_drawn(name: str, values: np.ndarray, err: type[MlsysoptError], positive: bool) -> None:
    """Refuse an average so extreme that the drawn values (or their sum) are not finite, or underflow to 0."""
    with np.errstate(over="ignore"):
        total = float(values.sum()) if values.size else 0.0
    bad = not np.isfinite(values).all() or not math.isfinite(total) or (positive and (values <= 0).any())
    if bad:
        raise err(
            f"{name} is too extreme: the values drawn from it (or their sum) are not finite positive numbers; "
            "use values well inside the floating-point range (about 1e-300 to 1e300)"
        )


def _check_beta(name: str, value: Any, err: type[MlsysoptError]) -> None:
    _check_float(name, value, err, low=0.0)
    if value >= 2.0:
        raise err(f"{name} must be in [0, 2) so that every draw stays positive, got {value}")


def scaled_cluster(
    graph: CompGraph,
    num_devices: int,
    seed: int,
    speed_scale: float,
    bandwidth_scale: float,
    delay_scale: float,
    speed_beta: float = 1.0,
    q: float = 0.5,
    units: str | None = None,
) -> DeviceCluster:
    """A random heterogeneous cluster for ``graph`` with speeds/bandwidths/delays multiplied into its units.

    The cluster covers every hardware type the graph uses; a type no generated device supports is given to
    the fastest device so that every task stays placeable.
    """
    num_types = int(graph.hw_type.max()) + 1
    base = random_cluster(
        num_devices=num_devices,
        num_types=num_types,
        speed_beta=speed_beta,
        delay_avg=1.0,
        q=q if num_types > 1 else 1.0,
        seed=seed,
    )
    supports = base.supports.copy()
    if num_types == 1:
        supports[:] = True
    supports[int(np.argmax(base.speed)), ~supports.any(axis=0)] = True
    return DeviceCluster(
        base.speed * speed_scale,
        supports,
        base.bandwidth * bandwidth_scale,
        base.delay * delay_scale,
        base.names,
        units,
    )


#: (speed, bandwidth, delay) scales that put a generated cluster into a graph's units.
UNITS: dict[str, tuple[float, float, float]] = {
    "dnn": (2e9, 5e8, 1e-5),  # compute in FLOPs: ~1-3 GFLOP/s devices, ~0.5 GB/s links, ~10 µs latency
    "workflow": (1.0, 1e8, 1e-3),  # compute in seconds at speed 1, files in bytes: ~100 MB/s, ~1 ms
    "synthetic": (1.0, 1.0, 0.1),  # layered_dag units
}


def cluster_for(graph: CompGraph, num_devices: int, seed: int = 0, q: float = 0.5) -> DeviceCluster:
    """A random heterogeneous cluster in the graph's units that can run every task of it.

    Speeds, bandwidths and delays are scaled by :data:`UNITS` for the graph's unit system (:func:`graph_units`).

    Args:
        graph: The graph the cluster is for; every hardware type it uses is covered.
        num_devices: Number of devices (>= 1).
        seed: Integer seed; the cluster is deterministic in it.
        q: Probability in [0, 1] that a device supports a given type (ignored when the graph has one type).

    Returns:
        A cluster whose ``units`` is the graph's unit system.

    Raises:
        InvalidCluster: If ``num_devices``, ``seed`` or ``q`` is out of range.
        InvalidOption: If the cluster would not fit this machine's memory.
    """
    system = graph_units(graph)
    speed, bandwidth, delay = UNITS[system]
    return scaled_cluster(graph, num_devices, seed, speed, bandwidth, delay, q=q, units=system)
