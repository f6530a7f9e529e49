"""Cost-model data: TpuGraphs layout/tile ``.npz`` and MalNet edgelists (lazy, validated), and synthetic generators."""

from mlsysopt.costmodel.data.loading import load_dataset
from mlsysopt.costmodel.data.malnet import (
    DEGREE_PROFILE,
    MALNET_CLASSES,
    MalNetDataset,
    degree_profile,
    load_malnet_graph,
    read_edgelist,
    write_edgelist,
)
from mlsysopt.costmodel.data.record import TASKS, GraphDataset, GraphRecord, InMemoryDataset
from mlsysopt.costmodel.data.synth_files import synth_layout, synth_tile
from mlsysopt.costmodel.data.synthetic import (
    SYNTH_OPS,
    layout_durations,
    layout_runtime,
    malnet_like_graph,
    synth_layout_graph,
    synth_malnet,
)
from mlsysopt.costmodel.data.synthetic_tile import synth_tile_graph
from mlsysopt.costmodel.data.to_ir import layout_to_compgraph, tile_to_compgraph, to_compgraph
from mlsysopt.costmodel.data.tpugraphs import (
    LAYOUT_KEYS,
    TILE_KEYS,
    TpuGraphsDataset,
    layout_record,
    load_layout_npz,
    load_tile_npz,
    npz_task,
    open_dataset,
    read_npz,
    save_npz,
    tile_record,
)

__all__ = [
    "DEGREE_PROFILE",
    "LAYOUT_KEYS",
    "MALNET_CLASSES",
    "SYNTH_OPS",
    "TASKS",
    "TILE_KEYS",
    "GraphDataset",
    "GraphRecord",
    "InMemoryDataset",
    "MalNetDataset",
    "TpuGraphsDataset",
    "degree_profile",
    "layout_durations",
    "layout_record",
    "layout_runtime",
    "layout_to_compgraph",
    "load_dataset",
    "load_layout_npz",
    "load_malnet_graph",
    "load_tile_npz",
    "malnet_like_graph",
    "npz_task",
    "open_dataset",
    "read_edgelist",
    "read_npz",
    "save_npz",
    "synth_layout",
    "synth_layout_graph",
    "synth_malnet",
    "synth_tile",
    "synth_tile_graph",
    "tile_record",
    "tile_to_compgraph",
    "to_compgraph",
    "write_edgelist",
]
