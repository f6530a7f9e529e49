"""``costmodel collect``: a real (graph, configuration) -> runtime dataset measured on this machine (TpuGraphs layout).

See :mod:`mlsysopt.costmodel.collection.job` (the job), :mod:`.families` (the graphs) and :mod:`.engines` (what a
configuration sets, and how it is timed).
"""

from mlsysopt.costmodel.collection.job import MANIFEST, collect, machine, make_plan, ship

__all__ = ["MANIFEST", "collect", "machine", "make_plan", "ship"]
