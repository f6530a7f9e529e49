"""Units: what a graph's numbers mean, the unit labels every table and plot prints, and plausibility checks.

The simulator only divides (``compute / speed``, ``bytes / bandwidth``, ``+ delay``), so a graph and a cluster
must agree on units. Each graph is in one of three unit systems, picked from its importer
(:func:`units_of`):

=========  =====================  ===================  =============  ===================  =================
system     compute                speed                edge bytes     bandwidth            delay, time
=========  =====================  ===================  =============  ===================  =================
dnn        FLOP                   FLOP/s               B              B/s                  s
workflow   s on the reference     x reference device   B              B/s                  s
synthetic  work units             work units / t.u.    data units     data units / t.u.    time units (t.u.)
=========  =====================  ===================  =============  ===================  =================

A cluster records the system it was built for (``units`` in its JSON); simulating a graph on a cluster of
another system is allowed but warned about, as is a result no real system produces (SLR above
:data:`MAX_PLAUSIBLE_SLR`).
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Protocol

from mlsysopt.errors import MlsysoptWarning

if TYPE_CHECKING:
    from mlsysopt.graph.ir import CompGraph


class DeviceCluster(Protocol):
    """What the checks here read of a :class:`~mlsysopt.graph.cluster.DeviceCluster` (which imports this module)."""

    units: str | None
    overhead: Any


#: Unit labels of each system, by quantity.
UNIT_LABELS: dict[str, dict[str, str]] = {
    "dnn": {"compute": "FLOP", "speed": "FLOP/s", "bytes": "B", "bandwidth": "B/s", "delay": "s", "time": "s"},
    "workflow": {
        "compute": "s at speed 1",
        "speed": "x reference device",
        "bytes": "B",
        "bandwidth": "B/s",
        "delay": "s",
        "time": "s",
    },
    "synthetic": {
        "compute": "work units",
        "speed": "work units/time unit",
        "bytes": "data units",
        "bandwidth": "data units/time unit",
        "delay": "time units",
        "time": "time units",
    },
}
UNIT_SYSTEMS: tuple[str, ...] = tuple(UNIT_LABELS)

#: Schedule length ratios above this are reported as implausible (no real placement is 1000x its lower bound).
MAX_PLAUSIBLE_SLR = 1000.0
#: Makespans above this (seconds, real-unit systems only) are reported as implausible: a year.
MAX_PLAUSIBLE_SECONDS = 365 * 24 * 3600.0


def units_of(graph: CompGraph) -> str:
    """The unit system of a graph (``dnn``, ``workflow`` or ``synthetic``), from its importer (``meta['source']``).

    Args:
        graph: The graph to classify.

    Returns:
        ``"dnn"`` for torch.fx/ONNX imports, ``"workflow"`` for WfCommons, otherwise ``"synthetic"``.
    """
    source = str(graph.meta.get("source", ""))
    if source in ("torch.fx", "onnx"):
        return "dnn"
    if source == "wfcommons":
        return "workflow"
    return "synthetic"


def unit(system: str | None, quantity: str) -> str:
    """The label of ``quantity`` (compute, speed, bytes, bandwidth, delay, time) in ``system``."""
    return UNIT_LABELS.get(system or "synthetic", UNIT_LABELS["synthetic"])[quantity]


def mismatch(graph: CompGraph, cluster: DeviceCluster) -> str | None:
    """Why ``cluster`` does not fit ``graph``'s units (one sentence), or None when it does or is unknown."""
    graph_system, cluster_system = units_of(graph), cluster.units
    if cluster_system is None or cluster_system == graph_system:
        return None
    return (
        f"the graph is in {graph_system} units (compute in {unit(graph_system, 'compute')}, data in "
        f"{unit(graph_system, 'bytes')}) but the cluster was built for {cluster_system} units (speed in "
        f"{unit(cluster_system, 'speed')}): times will be meaningless; build one with --devices N or "
        "--cluster preset:NAME"
    )


def warn_mismatch(graph: CompGraph, cluster: DeviceCluster) -> None:
    """Warn (:class:`~mlsysopt.errors.MlsysoptWarning`) when ``cluster`` is in other units than ``graph``."""
    why = mismatch(graph, cluster)
    if why is not None:
        warnings.warn(why, MlsysoptWarning, stacklevel=2)


def implausible(graph: CompGraph, cluster: DeviceCluster, makespan: float, cp_min: float) -> list[str]:
    """Sentences saying why a simulated result cannot be real (empty when it is plausible): an SLR above
    :data:`MAX_PLAUSIBLE_SLR`, a makespan above a year, a DNN's dispatch overhead left out or counted once for a
    layer kept whole (``meta["kept_whole"]`` of the torch.fx importer), a cluster in other units than the graph.

    Args:
        graph: The simulated graph.
        cluster: The cluster it was simulated on.
        makespan: The simulated makespan, in the graph's time unit (seconds for real-unit systems).
        cp_min: The CP_MIN lower bound, in the same unit.

    Returns:
        One sentence per problem found; an empty list when the result is plausible.
    """
    system = units_of(graph)
    found = []
    ratio = makespan / cp_min if cp_min > 0 else math.inf if makespan > 0 else 1.0
    if ratio > MAX_PLAUSIBLE_SLR:
        found.append(
            f"SLR {ratio:,.0f} (makespan / CP_MIN) is implausible for {system} units: data transfers dominate by "
            "orders of magnitude; check that the cluster's bandwidths and delays are in "
            f"{unit(system, 'bandwidth')} and {unit(system, 'delay')}"
        )
    if system != "synthetic" and makespan > MAX_PLAUSIBLE_SECONDS:
        found.append(
            f"makespan {makespan:.3g} s is more than a year: the cluster's speeds are probably not in "
            f"{unit(system, 'speed')}"
        )
    if system == "dnn" and not (cluster.overhead > 0).any() and graph.num_nodes > 1:
        found.append(
            f"makespan {makespan:.3g} s counts FLOPs only: the cluster gives no per-task overhead, so every "
            "operator's dispatch or kernel launch (a few µs each, which dominate small models) is left out; give "
            "the cluster an 'overhead' per device (seconds) or use a preset"
        )
    whole = graph.meta.get("kept_whole") or {}
    if whole and (cluster.overhead > 0).any():
        ops = sum(int(layer["ops"]) for layer in whole.values())
        named = ", ".join(f"{layer['module']} '{name}' ({layer['ops']} ops)" for name, layer in list(whole.items())[:3])
        found.append(
            f"{len(whole)} layer(s) PyTorch runs as many ops are one task each here, as a device map places whole "
            f"module calls: {named}{', ...' if len(whole) > 3 else ''}. Each pays the per-task overhead once, not per "
            f"op, so the makespan can be up to {(ops - len(whole)) * float(cluster.overhead.max()):.3g} s short; "
            + _unrolled_where(whole)
        )
    why = mismatch(graph, cluster)
    if why:
        found.append(why)
    return found


def _unrolled_where(whole: dict[str, dict[str, Any]]) -> str:
    """Where the layers kept whole are unrolled: ``graph simulate``, except those over the expansion's bound."""
    over = [name for name, layer in whole.items() if layer.get("over_bound")]
    if not over:
        return "`mlsysopt graph simulate` unrolls them"
    bound = "the bound of mlsysopt.graph.importers.expansion.MAX_EXPANDED_NODES ops"
    if len(over) == len(whole):
        return f"all of them are over {bound} and stay one task in `mlsysopt graph simulate` too"
    named = f"{', '.join(over[:3])}{', ...' if len(over) > 3 else ''}"
    return (
        f"{len(over)} of them ({named}) are over {bound} and stay one task in `mlsysopt graph simulate` too; it "
        "unrolls the others"
    )


def describe_units(system: str | None) -> dict[str, Any]:
    """JSON-ready ``{"system": ..., quantity: label, ...}`` for result files."""
    name = system or "synthetic"
    return {"system": name, **UNIT_LABELS.get(name, UNIT_LABELS["synthetic"])}
