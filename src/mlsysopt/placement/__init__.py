"""GiPH: learned placement of task graphs on dynamic heterogeneous device clusters."""

from mlsysopt.placement.base import Evaluator, PlacementResult, Placer, default_budget

__all__ = ["Evaluator", "PlacementResult", "Placer", "default_budget"]
