"""Neural architecture search under resource constraints: EPNAS with transfer, the baselines, spaces, the driver.

Every name below is imported on first use, so ``import mlsysopt.nas`` is cheap (no torch, no Optuna)::

    from mlsysopt.nas import Constraints, get_method, get_space, run_search

    space = get_space("nasbench-graph:cora")
    searcher = get_method("epnas", space, Constraints.from_limits(max_params=1.2e6), budget=40, seed=0)
    result = run_search(searcher, workers=2)

Your own problem: declare a :class:`Space` (knobs, progressive :class:`Blocks`, a resources function) and drive
any method with the ask/tell :class:`Study`, or give ``mlsysopt nas search --space file.py:space --objective
file.py:train`` (:mod:`mlsysopt.nas.objective`).

and, for a run folder of ``mlsysopt nas search``, ``prepare_export(run, out).run()`` writes its best architecture
(ONNX + state dict + architecture JSON for the CNN spaces, the cell spec for NAS-Bench-Graph).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    # constraints
    "RESOURCES": "mlsysopt.nas.constraints",
    "MODES": "mlsysopt.nas.constraints",
    "Constraint": "mlsysopt.nas.constraints",
    "Constraints": "mlsysopt.nas.constraints",
    # the methods
    "METHOD_NAMES": "mlsysopt.nas.registry",
    "get_method": "mlsysopt.nas.registry",
    "method_class": "mlsysopt.nas.registry",
    "method_config": "mlsysopt.nas.registry",
    "parse_method_knobs": "mlsysopt.nas.registry",
    "Searcher": "mlsysopt.nas.searcher",
    "SearcherConfig": "mlsysopt.nas.searcher",
    "EPNAS": "mlsysopt.nas.epnas",
    "EPNASConfig": "mlsysopt.nas.epnas",
    "RandomSearch": "mlsysopt.nas.baselines.random_search",
    "RegularizedEvolution": "mlsysopt.nas.baselines.evolution",
    "EvolutionConfig": "mlsysopt.nas.baselines.evolution",
    "ReinforceSearch": "mlsysopt.nas.baselines.reinforce",
    "ReinforceConfig": "mlsysopt.nas.baselines.reinforce",
    "PNAS": "mlsysopt.nas.baselines.pnas",
    "PNASConfig": "mlsysopt.nas.baselines.pnas",
    "OptunaTPE": "mlsysopt.nas.baselines.optuna_tpe",
    "TPEConfig": "mlsysopt.nas.baselines.optuna_tpe",
    "EPNASCold": "mlsysopt.nas.epnas_cold",
    "EPNASColdConfig": "mlsysopt.nas.epnas_cold",
    "LocalSearch": "mlsysopt.nas.baselines.local_search",
    "LocalSearchConfig": "mlsysopt.nas.baselines.local_search",
    "Bananas": "mlsysopt.nas.baselines.bananas",
    "BananasConfig": "mlsysopt.nas.baselines.bananas",
    "BananasPrior": "mlsysopt.nas.baselines.bananas_prior",
    "BananasPriorConfig": "mlsysopt.nas.baselines.bananas_prior",
    "ZeroShot": "mlsysopt.nas.baselines.zero_shot",
    "ZeroShotConfig": "mlsysopt.nas.baselines.zero_shot",
    # your own problem: a declared space, ask/tell, a training function
    "Space": "mlsysopt.nas.spaces.declarative",
    "Blocks": "mlsysopt.nas.spaces.declarative",
    "Categorical": "mlsysopt.nas.spaces.declarative",
    "Int": "mlsysopt.nas.spaces.declarative",
    "Study": "mlsysopt.nas.study",
    "Trial": "mlsysopt.nas.study",
    "ObjectiveSpace": "mlsysopt.nas.objective",
    # transfer
    "TransferPrior": "mlsysopt.nas.prior",
    "PriorConfig": "mlsysopt.nas.prior",
    "prior_from_records": "mlsysopt.nas.prior",
    "leave_one_out": "mlsysopt.nas.spaces.nasbench_graph",
    "TransferGP": "mlsysopt.nas.gp",
    # resources
    "ResourceMeasure": "mlsysopt.nas.resources",
    "with_measures": "mlsysopt.nas.resources",
    # their parts
    "Stages": "mlsysopt.nas.stages",
    "stage_budgets": "mlsysopt.nas.stages",
    "Controller": "mlsysopt.nas.controller",
    "ControllerConfig": "mlsysopt.nas.controller",
    "Policy": "mlsysopt.nas.controller",
    "Reinforce": "mlsysopt.nas.controller",
    "Predictor": "mlsysopt.nas.predictor",
    "PredictorConfig": "mlsysopt.nas.predictor",
    "OnlinePredictor": "mlsysopt.nas.predictor",
    # spaces
    "get_space": "mlsysopt.nas.spaces",
    "SPACE_SPECS": "mlsysopt.nas.spaces",
    "NASBENCH_GRAPH_DATASETS": "mlsysopt.nas.spaces",
    "SearchSpace": "mlsysopt.nas.spaces.base",
    "Arch": "mlsysopt.nas.spaces.base",
    "Evaluation": "mlsysopt.nas.spaces.base",
    "NasBenchGraphSpace": "mlsysopt.nas.spaces.nasbench_graph",
    "CnnSpace": "mlsysopt.nas.spaces.cnn",
    "model_from_architecture": "mlsysopt.models.cnn_cell",
    "space_catalog": "mlsysopt.nas.catalog",
    # the search driver
    "run_search": "mlsysopt.nas.search",
    "read_checkpoint": "mlsysopt.nas.search",
    "SearchResult": "mlsysopt.nas.search",
    "evaluate_one": "mlsysopt.nas.evaluation",
    # experiments and reports
    "SearchOptions": "mlsysopt.nas.experiment",
    "SearchJob": "mlsysopt.nas.experiment",
    "SearchOutput": "mlsysopt.nas.experiment",
    "prepare_search": "mlsysopt.nas.experiment",
    "build_constraints": "mlsysopt.nas.regimes",
    "build_space": "mlsysopt.nas.experiment",
    "median_constraints": "mlsysopt.nas.regimes",
    "table_constraints": "mlsysopt.nas.regimes",
    "REGIMES": "mlsysopt.nas.regimes",
    "TableOracle": "mlsysopt.nas.report",
    "regret": "mlsysopt.nas.report",
    "pareto_points": "mlsysopt.nas.report",
    "plot_search": "mlsysopt.nas.report",
    "table_background": "mlsysopt.nas.report",
    "best_feasible_test": "mlsysopt.nas.report",
    "best_feasible_valid": "mlsysopt.nas.report",
    "returned_feasible": "mlsysopt.nas.report",
    "eval_record": "mlsysopt.nas.report",
    "space_info": "mlsysopt.nas.report",
    # limits and export
    "check_search_size": "mlsysopt.nas.limits",
    "ExportJob": "mlsysopt.nas.export",
    "prepare_export": "mlsysopt.nas.export",
    "load_exported_cnn": "mlsysopt.nas.export",
}

if TYPE_CHECKING:
    from mlsysopt.models.cnn_cell import model_from_architecture
    from mlsysopt.nas.baselines.bananas import Bananas, BananasConfig
    from mlsysopt.nas.baselines.bananas_prior import BananasPrior, BananasPriorConfig
    from mlsysopt.nas.baselines.evolution import EvolutionConfig, RegularizedEvolution
    from mlsysopt.nas.baselines.local_search import LocalSearch, LocalSearchConfig
    from mlsysopt.nas.baselines.optuna_tpe import OptunaTPE, TPEConfig
    from mlsysopt.nas.baselines.pnas import PNAS, PNASConfig
    from mlsysopt.nas.baselines.random_search import RandomSearch
    from mlsysopt.nas.baselines.reinforce import ReinforceConfig, ReinforceSearch
    from mlsysopt.nas.baselines.zero_shot import ZeroShot, ZeroShotConfig
    from mlsysopt.nas.catalog import space_catalog
    from mlsysopt.nas.constraints import MODES, RESOURCES, Constraint, Constraints
    from mlsysopt.nas.controller import Controller, ControllerConfig, Policy, Reinforce
    from mlsysopt.nas.epnas import EPNAS, EPNASConfig
    from mlsysopt.nas.epnas_cold import EPNASCold, EPNASColdConfig
    from mlsysopt.nas.evaluation import evaluate_one
    from mlsysopt.nas.experiment import (
        REGIMES,
        SearchJob,
        SearchOptions,
        SearchOutput,
        build_constraints,
        build_space,
        median_constraints,
        prepare_search,
        table_constraints,
    )
    from mlsysopt.nas.export import ExportJob, load_exported_cnn, prepare_export
    from mlsysopt.nas.gp import TransferGP
    from mlsysopt.nas.limits import check_search_size
    from mlsysopt.nas.objective import ObjectiveSpace
    from mlsysopt.nas.predictor import OnlinePredictor, Predictor, PredictorConfig
    from mlsysopt.nas.prior import PriorConfig, TransferPrior, prior_from_records
    from mlsysopt.nas.registry import METHOD_NAMES, get_method, method_class, method_config, parse_method_knobs
    from mlsysopt.nas.report import (
        TableOracle,
        best_feasible_test,
        best_feasible_valid,
        eval_record,
        pareto_points,
        plot_search,
        regret,
        returned_feasible,
        space_info,
        table_background,
    )
    from mlsysopt.nas.resources import ResourceMeasure, with_measures
    from mlsysopt.nas.search import SearchResult, read_checkpoint, run_search
    from mlsysopt.nas.searcher import Searcher, SearcherConfig
    from mlsysopt.nas.spaces import NASBENCH_GRAPH_DATASETS, SPACE_SPECS, get_space
    from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
    from mlsysopt.nas.spaces.cnn import CnnSpace
    from mlsysopt.nas.spaces.declarative import Blocks, Categorical, Int, Space
    from mlsysopt.nas.spaces.nasbench_graph import NasBenchGraphSpace, leave_one_out
    from mlsysopt.nas.stages import Stages, stage_budgets
    from mlsysopt.nas.study import Study, Trial

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
