"""Neural architecture search under resource constraints: EPNAS, baselines, search spaces and the search driver."""

from __future__ import annotations

from mlsysopt.nas.constraints import RESOURCES, Constraint, Constraints
from mlsysopt.nas.search import Searcher, SearchResult, evaluate_one, get_method, run_search

__all__ = [
    "RESOURCES",
    "Constraint",
    "Constraints",
    "SearchResult",
    "Searcher",
    "evaluate_one",
    "get_method",
    "run_search",
]
