"""GST+EFD: graph segment training of cost models on large graphs (Cao et al., NeurIPS 2023).

Every name below is imported on first use, so ``import mlsysopt.costmodel`` loads no torch::

    from mlsysopt.costmodel import TrainConfig, evaluate, predict, synth, train
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_DATA = "mlsysopt.costmodel.data"
_EXPORTS = {
    # experiments: what the CLI, the demo and the benchmark call
    "train": "mlsysopt.costmodel.experiment",
    "one_step": "mlsysopt.costmodel.probe",
    "RESUMABLE": "mlsysopt.costmodel.experiment",
    "evaluate": "mlsysopt.costmodel.inference",
    "predict": "mlsysopt.costmodel.inference",
    "load_trainer": "mlsysopt.costmodel.inference",
    "ensemble": "mlsysopt.costmodel.inference",
    "RankEnsemble": "mlsysopt.costmodel.rank_ensemble",
    "ranking_of": "mlsysopt.costmodel.inference",
    "synth": "mlsysopt.costmodel.synthesis",
    "SYNTH_KINDS": "mlsysopt.costmodel.synthesis",
    "PROFILES": "mlsysopt.costmodel.synthesis",
    # the trees baseline, data-parallel training, size limits, graph plans
    "TreesModel": "mlsysopt.costmodel.trees",
    "TreeRanker": "mlsysopt.costmodel.trees",
    "tree_model": "mlsysopt.costmodel.baselines",
    "load_trees": "mlsysopt.costmodel.baselines",
    "LightGBMRanker": "mlsysopt.costmodel.boosting",
    "XGBoostRanker": "mlsysopt.costmodel.boosting",
    "TREE_MODES": "mlsysopt.costmodel.train_config",
    "collect": "mlsysopt.costmodel.collection",
    # the latency oracle
    "LatencyOracle": "mlsysopt.costmodel.oracle.oracle",
    "load_oracle": "mlsysopt.costmodel.oracle.api",
    "predict_source": "mlsysopt.costmodel.oracle.api",
    "collect_latency": "mlsysopt.costmodel.oracle.collect",
    "load_collection": "mlsysopt.costmodel.oracle.dataset",
    "TableDataset": f"{_DATA}.table",
    "layout_graph": f"{_DATA}.features",
    "graph_features": "mlsysopt.costmodel.tree_features",
    "Comm": "mlsysopt.costmodel.distributed",
    "check_train": "mlsysopt.costmodel.limits",
    "check_synth": "mlsysopt.costmodel.limits",
    "GraphPlan": "mlsysopt.costmodel.plan",
    "config_region": "mlsysopt.costmodel.plan",
    "config_deviation": "mlsysopt.costmodel.inputs",
    # the trainer, its configuration and the model
    "Trainer": "mlsysopt.costmodel.trainer",
    "combine": "mlsysopt.costmodel.trainer",
    "TrainConfig": "mlsysopt.costmodel.train_config",
    "MODES": "mlsysopt.costmodel.train_config",
    "ALL_MODES": "mlsysopt.costmodel.train_config",
    "ModelConfig": "mlsysopt.costmodel.model_config",
    "CostModel": "mlsysopt.costmodel.model",
    "BACKBONES": "mlsysopt.costmodel.model_config",
    "prune_layout": "mlsysopt.costmodel.inputs",
    "HistoryTable": "mlsysopt.costmodel.history",
    "get_loss": "mlsysopt.costmodel.losses",
    "PeakMemory": "mlsysopt.costmodel.memory",
    "host_rss_mb": "mlsysopt.costmodel.memory",
    "load_checkpoint": "mlsysopt.costmodel.checkpoint",
    # segmenters
    "Segmenter": "mlsysopt.costmodel.segment",
    "Segmentation": "mlsysopt.costmodel.segment",
    "contiguous_segments": "mlsysopt.costmodel.segment",
    "metis_segments": "mlsysopt.costmodel.segment",
    # metrics
    "opa": "mlsysopt.costmodel.metrics",
    "kendall_tau": "mlsysopt.costmodel.metrics",
    "slowdown_at_k": "mlsysopt.costmodel.metrics",
    "ranking_metrics": "mlsysopt.costmodel.metrics",
    "accuracy": "mlsysopt.costmodel.metrics",
    "macro_f1": "mlsysopt.costmodel.metrics",
    "classification_metrics": "mlsysopt.costmodel.metrics",
    # datasets and loaders
    "load_dataset": f"{_DATA}.loading",
    "open_dataset": f"{_DATA}.tpugraphs",
    "GraphRecord": f"{_DATA}.record",
    "GraphDataset": f"{_DATA}.record",
    "InMemoryDataset": f"{_DATA}.record",
    "TASKS": f"{_DATA}.record",
    "TpuGraphsDataset": f"{_DATA}.tpugraphs",
    "MalNetDataset": f"{_DATA}.malnet",
    "load_layout_npz": f"{_DATA}.tpugraphs",
    "load_tile_npz": f"{_DATA}.tpugraphs",
    "load_malnet_graph": f"{_DATA}.malnet",
    "layout_record": f"{_DATA}.tpugraphs",
    "tile_record": f"{_DATA}.tpugraphs",
    "read_npz": f"{_DATA}.tpugraphs",
    "save_npz": f"{_DATA}.tpugraphs",
    "read_edgelist": f"{_DATA}.malnet",
    "write_edgelist": f"{_DATA}.malnet",
    "to_compgraph": f"{_DATA}.to_ir",
    # SYNTHETIC generators (the real TpuGraphs and MalNet cannot be downloaded here)
    "synth_layout": f"{_DATA}.synth_files",
    "synth_tile": f"{_DATA}.synth_files",
    "synth_malnet": f"{_DATA}.malnet_synthetic",
    "synth_layout_graph": f"{_DATA}.synthetic",
    "synth_tile_graph": f"{_DATA}.synthetic_tile",
    "malnet_like_graph": f"{_DATA}.malnet_synthetic",
    "layout_runtime": f"{_DATA}.synthetic",
    "realistic_layout_graph": f"{_DATA}.realistic",
    "runtime_profile": f"{_DATA}.realistic",
}

if TYPE_CHECKING:
    from mlsysopt.costmodel.baselines import load_trees, tree_model
    from mlsysopt.costmodel.boosting import LightGBMRanker, XGBoostRanker
    from mlsysopt.costmodel.checkpoint import load_checkpoint
    from mlsysopt.costmodel.collection import collect
    from mlsysopt.costmodel.data.features import layout_graph
    from mlsysopt.costmodel.data.loading import load_dataset
    from mlsysopt.costmodel.data.malnet import (
        MalNetDataset,
        load_malnet_graph,
        read_edgelist,
        write_edgelist,
    )
    from mlsysopt.costmodel.data.malnet_synthetic import malnet_like_graph, synth_malnet
    from mlsysopt.costmodel.data.realistic import realistic_layout_graph, runtime_profile
    from mlsysopt.costmodel.data.record import TASKS, GraphDataset, GraphRecord, InMemoryDataset
    from mlsysopt.costmodel.data.synth_files import synth_layout, synth_tile
    from mlsysopt.costmodel.data.synthetic import layout_runtime, synth_layout_graph
    from mlsysopt.costmodel.data.synthetic_tile import synth_tile_graph
    from mlsysopt.costmodel.data.table import TableDataset
    from mlsysopt.costmodel.data.to_ir import to_compgraph
    from mlsysopt.costmodel.data.tpugraphs import (
        TpuGraphsDataset,
        layout_record,
        load_layout_npz,
        load_tile_npz,
        open_dataset,
        read_npz,
        save_npz,
        tile_record,
    )
    from mlsysopt.costmodel.distributed import Comm
    from mlsysopt.costmodel.experiment import RESUMABLE, train
    from mlsysopt.costmodel.history import HistoryTable
    from mlsysopt.costmodel.inference import evaluate, load_trainer, predict, ranking_of
    from mlsysopt.costmodel.inputs import config_deviation, prune_layout
    from mlsysopt.costmodel.limits import check_synth, check_train
    from mlsysopt.costmodel.losses import get_loss
    from mlsysopt.costmodel.memory import PeakMemory, host_rss_mb
    from mlsysopt.costmodel.metrics import (
        accuracy,
        classification_metrics,
        kendall_tau,
        macro_f1,
        opa,
        ranking_metrics,
        slowdown_at_k,
    )
    from mlsysopt.costmodel.model import CostModel
    from mlsysopt.costmodel.model_config import BACKBONES, ModelConfig
    from mlsysopt.costmodel.oracle.api import load_oracle, predict_source
    from mlsysopt.costmodel.oracle.collect import collect_latency
    from mlsysopt.costmodel.oracle.dataset import load_collection
    from mlsysopt.costmodel.oracle.oracle import LatencyOracle
    from mlsysopt.costmodel.plan import GraphPlan, config_region
    from mlsysopt.costmodel.probe import one_step
    from mlsysopt.costmodel.segment import Segmentation, Segmenter, contiguous_segments, metis_segments
    from mlsysopt.costmodel.synthesis import PROFILES, SYNTH_KINDS, synth
    from mlsysopt.costmodel.train_config import ALL_MODES, MODES, TREE_MODES, TrainConfig
    from mlsysopt.costmodel.trainer import Trainer, combine
    from mlsysopt.costmodel.tree_features import graph_features
    from mlsysopt.costmodel.trees import TreeRanker, TreesModel

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
