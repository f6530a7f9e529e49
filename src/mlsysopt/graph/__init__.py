"""The shared substrate: graph IR, device clusters, the DAG simulator, generators and importers."""

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import BASE_FEATURES, DEFAULT_VOCAB, CompGraph
from mlsysopt.graph.simulate import Schedule, Simulator, cp_min, longest_path, simulate, slr

__all__ = [
    "BASE_FEATURES",
    "DEFAULT_VOCAB",
    "CompGraph",
    "DeviceCluster",
    "Schedule",
    "Simulator",
    "cp_min",
    "longest_path",
    "simulate",
    "slr",
]
