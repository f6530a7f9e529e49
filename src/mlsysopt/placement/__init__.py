"""GiPH: learned placement of task graphs on dynamic heterogeneous device clusters, its baselines and experiments.

Every name below is imported on first use, so ``import mlsysopt.placement`` loads no torch::

    from mlsysopt.placement import GiPH, HEFT, PlacementProblem, compare, adapt
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    # the interface and the problem
    "Placer": "mlsysopt.placement.base",
    "PlacementResult": "mlsysopt.placement.base",
    "Evaluator": "mlsysopt.placement.base",
    "SearchContext": "mlsysopt.placement.base",
    "BudgetExhausted": "mlsysopt.placement.base",
    "default_budget": "mlsysopt.placement.base",
    "PlacementProblem": "mlsysopt.graph.problem",
    # GiPH
    "GiPH": "mlsysopt.placement.giph",
    "carry_over": "mlsysopt.placement.giph",
    "GiPHPolicy": "mlsysopt.placement.policy",
    "PolicyConfig": "mlsysopt.placement.policy",
    "GpNet": "mlsysopt.placement.gpnet",
    "GpNetBuilder": "mlsysopt.placement.gpnet",
    "PlacementState": "mlsysopt.placement.state",
    "PlacementEnv": "mlsysopt.placement.env",
    "TrainConfig": "mlsysopt.placement.config",
    "TrainResult": "mlsysopt.placement.training",
    "train": "mlsysopt.placement.training",
    "training_run": "mlsysopt.placement.training",
    "PRETRAINED": "mlsysopt.placement.checkpoint",
    "IncompatibleCheckpoint": "mlsysopt.placement.checkpoint",
    "load_checkpoint": "mlsysopt.placement.checkpoint",
    "load_policy": "mlsysopt.placement.checkpoint",
    "save_checkpoint": "mlsysopt.placement.checkpoint",
    # results usable outside mlsysopt
    "device_map": "mlsysopt.placement.devicemap",
    "apply_device_map": "mlsysopt.placement.devicemap",
    "node_owners": "mlsysopt.placement.devicemap",
    # parallel work and limits
    "PolicySpec": "mlsysopt.placement.tasks",
    "SearchTask": "mlsysopt.placement.tasks",
    "AdaptTask": "mlsysopt.placement.tasks",
    "run_search": "mlsysopt.placement.tasks",
    "run_adapt": "mlsysopt.placement.tasks",
    "TimeUp": "mlsysopt.placement.base",
    "memory_limit": "mlsysopt.placement.limits",
    # baselines
    "HEFT": "mlsysopt.placement.baselines",
    "RandomSearch": "mlsysopt.placement.baselines",
    "Annealing": "mlsysopt.placement.baselines",
    "EFTGreedy": "mlsysopt.placement.baselines",
    "BASELINES": "mlsysopt.placement.baselines",
    "get_baseline": "mlsysopt.placement.baselines",
    "heft_schedule": "mlsysopt.placement.baselines",
    # experiments
    "METHODS": "mlsysopt.placement.methods",
    "Method": "mlsysopt.placement.methods",
    "get_method": "mlsysopt.placement.methods",
    "select_methods": "mlsysopt.placement.methods",
    "run_method": "mlsysopt.placement.methods",
    "heft_placement": "mlsysopt.placement.methods",
    "comparison": "mlsysopt.placement.experiment",
    "DEFAULT_METHOD": "mlsysopt.placement.methods",
    "FastestDevice": "mlsysopt.placement.baselines",
    "LocalSearch": "mlsysopt.placement.baselines",
    "SagaScheduler": "mlsysopt.placement.baselines",
    "SagaBest": "mlsysopt.placement.baselines",
    "SagaSkipped": "mlsysopt.placement.baselines",
    "SagaFailed": "mlsysopt.placement.baselines",
    "SAGA_SCHEDULERS": "mlsysopt.placement.baselines",
    "SearchConfig": "mlsysopt.placement.move_search",
    "local_search": "mlsysopt.placement.move_search",
    "PORTFOLIO": "mlsysopt.placement.baselines.portfolio",
    "run_portfolio": "mlsysopt.placement.baselines.portfolio",
    "to_saga": "mlsysopt.placement.saga_convert",
    "from_saga": "mlsysopt.placement.saga_convert",
    "exact_optimum": "mlsysopt.placement.optimality",
    "lower_bound": "mlsysopt.placement.optimality",
    "Comparison": "mlsysopt.placement.experiment",
    "compare": "mlsysopt.placement.experiment",
    "method_summary": "mlsysopt.placement.experiment",
    "mean_curve": "mlsysopt.placement.experiment",
    "Adaptation": "mlsysopt.placement.adaptation",
    "adapt": "mlsysopt.placement.adaptation",
    "adaptivity": "mlsysopt.placement.adaptation",
    "CHANGES": "mlsysopt.placement.adaptation",
    "change_cluster": "mlsysopt.placement.adaptation",
    "random_change": "mlsysopt.placement.adaptation",
    "removable_devices": "mlsysopt.placement.adaptation",
}

if TYPE_CHECKING:
    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement.adaptation import (
        CHANGES,
        Adaptation,
        adapt,
        adaptivity,
        change_cluster,
        random_change,
        removable_devices,
    )
    from mlsysopt.placement.base import (
        BudgetExhausted,
        Evaluator,
        PlacementResult,
        Placer,
        SearchContext,
        TimeUp,
        default_budget,
    )
    from mlsysopt.placement.baselines import (
        BASELINES,
        HEFT,
        SAGA_SCHEDULERS,
        Annealing,
        EFTGreedy,
        FastestDevice,
        LocalSearch,
        RandomSearch,
        SagaBest,
        SagaFailed,
        SagaScheduler,
        SagaSkipped,
        get_baseline,
        heft_schedule,
    )
    from mlsysopt.placement.baselines.portfolio import PORTFOLIO, run_portfolio
    from mlsysopt.placement.checkpoint import (
        PRETRAINED,
        IncompatibleCheckpoint,
        load_checkpoint,
        load_policy,
        save_checkpoint,
    )
    from mlsysopt.placement.config import TrainConfig
    from mlsysopt.placement.devicemap import apply_device_map, device_map, node_owners
    from mlsysopt.placement.env import PlacementEnv
    from mlsysopt.placement.experiment import Comparison, compare, comparison, mean_curve, method_summary
    from mlsysopt.placement.giph import GiPH, carry_over
    from mlsysopt.placement.gpnet import GpNet, GpNetBuilder
    from mlsysopt.placement.limits import memory_limit
    from mlsysopt.placement.methods import (
        DEFAULT_METHOD,
        METHODS,
        Method,
        get_method,
        heft_placement,
        run_method,
        select_methods,
    )
    from mlsysopt.placement.move_search import SearchConfig, local_search
    from mlsysopt.placement.optimality import exact_optimum, lower_bound
    from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
    from mlsysopt.placement.saga_convert import from_saga, to_saga
    from mlsysopt.placement.state import PlacementState
    from mlsysopt.placement.tasks import AdaptTask, PolicySpec, SearchTask, run_adapt, run_search
    from mlsysopt.placement.training import TrainResult, train, training_run

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
