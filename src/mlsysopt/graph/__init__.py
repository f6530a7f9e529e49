"""The shared substrate: graph IR, device clusters, the DAG simulator, generators and importers.

Every name below is imported on first use, so ``import mlsysopt.graph`` is cheap::

    from mlsysopt.graph import layered_dag, random_cluster, simulate, cp_min
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    "BASE_FEATURES": "mlsysopt.graph.ir",
    "DEFAULT_VOCAB": "mlsysopt.graph.ir",
    "CompGraph": "mlsysopt.graph.ir",
    "DeviceCluster": "mlsysopt.graph.cluster",
    "Schedule": "mlsysopt.graph.schedule",
    "EXECUTIONS": "mlsysopt.graph.list_schedule",
    "Simulator": "mlsysopt.graph.simulator",
    "simulate": "mlsysopt.graph.simulator",
    "cp_min": "mlsysopt.graph.bounds",
    "slr": "mlsysopt.graph.bounds",
    "slr_from_bound": "mlsysopt.graph.bounds",
    "longest_path": "mlsysopt.graph.bounds",
    "longest_paths": "mlsysopt.graph.bounds",
    "build_csr": "mlsysopt.graph.topology",
    "longest_paths_csr": "mlsysopt.graph.topology",
    "priority_order": "mlsysopt.graph.topology",
    "layered_dag": "mlsysopt.graph.generate",
    "random_cluster": "mlsysopt.graph.generate",
    "cluster_for": "mlsysopt.graph.generate",
    "graph_units": "mlsysopt.graph.generate",
    "load_graph": "mlsysopt.graph.importers",
    "check_placement": "mlsysopt.graph.placement",
    "random_placement": "mlsysopt.graph.placement",
    "placement_from_dict": "mlsysopt.graph.placement",
    "placement_to_dict": "mlsysopt.graph.placement",
    "load_placement": "mlsysopt.graph.placement",
    "random_from_mask": "mlsysopt.graph.placement",
    "PlacementProblem": "mlsysopt.graph.problem",
    "load_problem": "mlsysopt.graph.problem",
    "load_cluster": "mlsysopt.graph.presets",
    "preset_cluster": "mlsysopt.graph.presets",
    "PRESETS": "mlsysopt.graph.presets",
    "UNIT_LABELS": "mlsysopt.graph.units",
    "units_of": "mlsysopt.graph.units",
    "implausible": "mlsysopt.graph.units",
    "resolve_source": "mlsysopt.graph.importers.source",
    "Source": "mlsysopt.graph.importers.source",
    "memory_budget": "mlsysopt.graph.limits",
}

if TYPE_CHECKING:
    from mlsysopt.graph.bounds import cp_min, longest_path, longest_paths, slr, slr_from_bound
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.generate import cluster_for, graph_units, layered_dag, random_cluster
    from mlsysopt.graph.importers import load_graph
    from mlsysopt.graph.importers.source import Source, resolve_source
    from mlsysopt.graph.ir import BASE_FEATURES, DEFAULT_VOCAB, CompGraph
    from mlsysopt.graph.limits import memory_budget
    from mlsysopt.graph.list_schedule import EXECUTIONS
    from mlsysopt.graph.placement import (
        check_placement,
        load_placement,
        placement_from_dict,
        placement_to_dict,
        random_from_mask,
        random_placement,
    )
    from mlsysopt.graph.presets import PRESETS, load_cluster, preset_cluster
    from mlsysopt.graph.problem import PlacementProblem, load_problem
    from mlsysopt.graph.schedule import Schedule
    from mlsysopt.graph.simulator import Simulator, simulate
    from mlsysopt.graph.topology import build_csr, longest_paths_csr, priority_order
    from mlsysopt.graph.units import UNIT_LABELS, implausible, units_of

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
