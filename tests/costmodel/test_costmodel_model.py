"""CostModel (costmodel/model.py): config validation, batched configs, pooling, head shapes, inputs, pruning."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gst_fakes import easy_layout, easy_malnet, easy_tile

from mlsysopt.costmodel.inputs import config_columns, feature_stats, make_inputs, prune_layout, squash
from mlsysopt.costmodel.model import CostModel, ModelConfig, NodeStates
from mlsysopt.errors import InvalidOption


def small(task: str = "layout", **kw: object) -> ModelConfig:
    return ModelConfig.for_task(task, **{"hidden": 8, "layers": 2, "opcode_dim": 0 if task == "malnet" else 4, **kw})


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"backbone": "gat"}, "unknown backbone 'gat'"),
        ({"task": "graph"}, "unknown task 'graph'"),
        ({"hidden": 0}, "hidden must be >= 1"),
        ({"layers": 0}, "layers must be >= 1"),
        ({"dropout": 1.0}, "dropout"),
        ({"num_classes": 3}, "num_classes must be 1"),
        ({"config_feat_dim": 0}, "config_feat_dim >= 1"),
    ],
)
def test_bad_model_options(kw: dict, match: str) -> None:
    with pytest.raises(InvalidOption, match=match):
        ModelConfig(**kw)


def test_task_defaults_and_round_trip() -> None:
    assert ModelConfig.for_task("malnet").config_feat_dim == 0
    assert ModelConfig.for_task("tile").config_feat_dim == 24
    with pytest.raises(InvalidOption, match="num_classes >= 2"):
        ModelConfig.for_task("malnet", num_classes=1)
    with pytest.raises(InvalidOption, match="config_feat_dim must be 0"):
        ModelConfig.for_task("malnet", config_feat_dim=3)
    mc = small()
    assert ModelConfig.from_dict(mc.to_dict()) == mc
    with pytest.raises(InvalidOption, match="unknown model config keys: colour"):
        ModelConfig.from_dict({**mc.to_dict(), "colour": 1})


@pytest.mark.parametrize("backbone", ["sage", "gcn", "gin"])
def test_configs_batched_as_leading_dim_equal_one_by_one(backbone: str) -> None:
    torch.manual_seed(0)
    rec = easy_layout("g", 40, configs=5)
    model = CostModel(small(backbone=backbone)).eval()
    cfgs = np.arange(5)
    dev = model.config.deviation
    batched = model.segment_embedding(make_inputs(rec, None, rec.edge_index, cfgs, deviation=dev))
    single = torch.cat(
        [model.segment_embedding(make_inputs(rec, None, rec.edge_index, cfgs[i : i + 1], deviation=dev)) for i in cfgs]
    )
    assert batched.shape == (5, model.config.embed_dim)
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(batched[0], batched[1])  # configs change the embedding
    torch.testing.assert_close(batched.norm(dim=-1), torch.ones(5))  # L2-normalised for ranking


def test_pool_by_segment_ids_equals_pooling_each_slice() -> None:
    model = CostModel(small()).eval()
    h = torch.randn(3, 10, 8)
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
    pooled = model.pool(NodeStates(None, h, None, 3), ids, 3)
    for s in range(3):
        torch.testing.assert_close(pooled[:, s], model.pool(NodeStates(None, h[:, ids == s], None, 3))[:, 0])


def test_head_shapes_per_task() -> None:
    rec = easy_tile("t", configs=6)
    tile = CostModel(small("tile"))
    emb = tile.segment_embedding(make_inputs(rec, None, rec.edge_index, np.zeros(1, dtype=np.int64)))
    assert emb.shape == (1, 16)
    gcf = torch.from_numpy(rec.graph_config_feat)
    assert tile.head(emb, gcf).shape == (6,)
    with pytest.raises(InvalidOption, match="graph_config_feat"):
        tile.head(emb)
    mal = CostModel(small("malnet", num_classes=3))
    g = easy_malnet("m", 1)
    out = mal.head(mal.segment_embedding(make_inputs(g, None, g.edge_index, np.zeros(1, dtype=np.int64))))
    assert out.shape == (1, 3)


def test_make_inputs_copies_and_maps_config_nodes() -> None:
    rec = easy_layout("g", 30, configs=4)
    nodes = np.arange(10, 20)
    inp = make_inputs(rec, nodes, np.zeros((2, 0), dtype=np.int64), np.array([1, 3]), columns=config_columns(rec))
    inp.x.add_(100.0)
    assert rec.x.max() < 100.0  # a copy, not a view of the record
    in_seg = rec.config_node_ids[(rec.config_node_ids >= 10) & (rec.config_node_ids < 20)]
    assert inp.cfg_pos.tolist() == (in_seg - 10).tolist()
    cols = np.searchsorted(rec.config_node_ids, in_seg)
    np.testing.assert_array_equal(inp.cfg_feat.numpy(), rec.node_config_feat[[1, 3]][:, cols])


def test_feature_stats_zscore_and_bad_sizes() -> None:
    recs = [easy_layout(f"g{i}", 20 + i, seed=i) for i in range(3)]
    mean, std = feature_stats(recs)
    allx = squash(np.concatenate([r.x for r in recs]).astype(np.float64))
    np.testing.assert_allclose(mean, allx.mean(0), atol=1e-5)
    np.testing.assert_allclose(std, allx.std(0), atol=1e-5)
    model = CostModel(small())
    model.set_feature_stats(mean, std)
    assert torch.all(model.feat_std[2:] == 1.0)  # all-zero columns are only centred, never divided by 0
    torch.testing.assert_close(model.feat_std[:2], torch.from_numpy(std[:2]))
    with pytest.raises(InvalidOption, match="140"):
        model.set_feature_stats(mean[:5], std[:5])
    with pytest.raises(InvalidOption, match="empty"):
        feature_stats([])


def test_opcode_outside_vocabulary_is_reported() -> None:
    rec = easy_layout("g", 10)
    model = CostModel(small(opcode_vocab=3))
    with pytest.raises(InvalidOption, match="outside the model's vocabulary of 3"):
        model.segment_embedding(make_inputs(rec, None, rec.edge_index, np.arange(2)))


def test_head_and_backbone_parameters_partition_the_model() -> None:
    model = CostModel(small("tile"))
    head = {id(p) for p in model.head_parameters()}
    back = {id(p) for p in model.backbone_parameters()}
    assert head and back and not head & back
    assert head | back == {id(p) for p in model.parameters()}


def test_prune_layout_keeps_config_nodes_and_neighbours() -> None:
    rec = easy_layout("g", 60, configs=3, seed=4)
    pruned = prune_layout(rec, hops=1)
    und = set(map(tuple, rec.edge_index.T)) | set(map(tuple, rec.edge_index[::-1].T))
    cfg = set(rec.config_node_ids.tolist())
    want = sorted(cfg | {v for u, v in und if u in cfg})
    assert pruned.num_nodes == len(want)
    np.testing.assert_array_equal(pruned.x, rec.x[want])
    old_of_new = np.asarray(want)
    np.testing.assert_array_equal(old_of_new[pruned.config_node_ids], rec.config_node_ids)
    kept_edges = {(int(old_of_new[u]), int(old_of_new[v])) for u, v in pruned.edge_index.T}
    assert kept_edges == {(u, v) for u, v in rec.edge_index.T if u in want and v in want}
    assert prune_layout(rec, hops=0).num_nodes == len(cfg)
    assert pruned.node_splits is not None and pruned.node_splits.max() <= pruned.num_nodes
    with pytest.raises(InvalidOption, match="layout graphs only"):
        prune_layout(easy_tile("t"), 1)
    with pytest.raises(InvalidOption, match="hops must be >= 0"):
        prune_layout(rec, -1)


@pytest.mark.parametrize("backbone", ["sage", "gcn", "gin"])
def test_the_configuration_region_pass_equals_every_node_per_configuration(backbone: str) -> None:
    from mlsysopt.costmodel.plan import config_region

    torch.manual_seed(1)
    rec = easy_layout("g", 60, configs=6)
    model = CostModel(small(backbone=backbone)).eval()
    inp = make_inputs(rec, None, rec.edge_index, np.arange(6), deviation=model.config.deviation)
    region = config_region(rec.edge_index, rec.num_nodes, inp.cfg_pos.numpy(), model.config.layers)
    dense = model.pool(model.node_states(inp, None))  # every node computed for every configuration
    torch.testing.assert_close(model.pool(model.node_states(inp, region)), dense, atol=1e-5, rtol=1e-5)
    if backbone == "gcn":  # GCN normalises by degrees of the whole graph: it always runs densely
        return
    shared = model.shared_states(inp)
    st = NodeStates(shared[-1], model.config_states(inp, region, shared), torch.from_numpy(region.final), 6)
    torch.testing.assert_close(model.pool(st), dense, atol=1e-5, rtol=1e-5)  # the bipartite update of the targets
