"""The trainer's defaults (costmodel/trainer.py): pruning, segment size and k from the graph and the memory budget,
the best validation epoch kept, an absolute (logmse) target, cross-configuration attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gst_fakes import ListDataset, easy_layout

from mlsysopt.costmodel.model import CostModel, CrossConfigAttention, ModelConfig
from mlsysopt.costmodel.trainer import TrainConfig, Trainer
from mlsysopt.errors import InvalidOption

MC = ModelConfig.for_task("layout", hidden=16, layers=2, opcode_dim=4, dropout=0.0)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sets(n: int = 6, nodes: int = 90) -> tuple[ListDataset, ListDataset]:
    train = [easy_layout(f"tr{i}", nodes + 5 * i, configs=16, seed=i) for i in range(n)]
    return ListDataset(train), ListDataset([easy_layout(f"va{i}", nodes, configs=16, seed=50 + i) for i in range(3)])


def test_defaults_prune_and_keep_a_small_graph_whole() -> None:
    train, valid = sets()
    t = Trainer(MC, TrainConfig(epochs=1, finetune_epochs=0, configs_per_graph=8))
    t.fit(train, valid)
    assert t.prune_hops == MC.layers  # auto: configurable nodes and their L-hop neighbourhood
    rec = t.record(train, 0)
    assert rec.num_nodes <= train.records[0].num_nodes
    largest = max(t.record(train, i).num_nodes for i in range(len(train)))
    assert t.segment_size == largest  # auto: a graph smaller than 1000 nodes is not cut (except at its node_splits)
    for i in range(len(train)):
        r = t.record(train, i)
        assert t.plan(r).num_segments == 1 + (0 if r.node_splits is None else r.node_splits.size)
    assert t.probe is not None and t.k == t.probe["max_segments"]  # the budget holds every segment


def test_k_comes_from_the_budget_measured_on_a_configurable_segment() -> None:
    train, _ = sets(3, nodes=400)
    tc = dict(segment_size=40, epochs=1, finetune_epochs=0, configs_per_graph=8, prune_hops=None, measure_memory=1)
    small = Trainer(MC, TrainConfig(memory_budget_mb=0.05, **tc))
    small.fit(train)
    big = Trainer(MC, TrainConfig(memory_budget_mb=64.0, **tc))
    big.fit(train)
    assert small.k < big.k
    assert small.probe["configurable_nodes"] > 0  # the probe ran on a segment with configurable nodes
    per_segment = small.probe["peak_mb"]
    assert big.k == min(big.probe["max_segments"], int(64.0 // per_segment))
    # the budget holds: a step of k segments stays near k x the probed segment (segments differ in size)
    peak = max(h["peak_step_mb"] for h in small.history)
    assert peak <= max(0.05, per_segment) * 2.5


def test_the_best_validation_epoch_is_kept_and_reloaded(tmp_path: Path) -> None:
    train, valid = sets()
    t = Trainer(MC, TrainConfig(epochs=5, finetune_epochs=0, configs_per_graph=8, lr=3e-2, seed=1))
    hist = t.fit(train, valid, run_dir=tmp_path)
    values = [h["valid_opa"] for h in hist]
    assert t.best is not None and t.best["value"] == max(values) and t.best["epoch"] == 1 + int(np.argmax(values))
    assert t.evaluate(valid)["opa"] == pytest.approx(t.best["value"])  # the model holds the best weights
    again = Trainer.load(tmp_path)
    np.testing.assert_allclose(again.predict(valid)["va0"], t.predict(valid)["va0"], rtol=1e-5, atol=1e-6)
    last = Trainer.load(tmp_path, keep_best=False)  # the checkpoint's last weights continue a resumed run
    assert last.epoch == 5


def test_an_absolute_target_predicts_log_runtimes_across_graphs() -> None:
    train, valid = sets()
    t = Trainer(MC, TrainConfig(loss="logmse", epochs=6, finetune_epochs=0, configs_per_graph=8, lr=1e-2))
    t.fit(train, valid)
    assert t.prune_hops is None  # every node adds to an absolute runtime: nothing is pruned
    pred = t.model.log_runtime(t.predict(valid)["va0"])
    true = np.log(valid.records[0].runtime)
    assert abs(np.median(pred) - np.median(true)) < 0.5 * np.log(10)  # the right order of magnitude


def test_cross_configuration_attention_trains_and_ignores_repeated_tokens() -> None:
    attn = CrossConfigAttention(8, 2).eval()
    one = torch.randn(1, 3, 8)
    with torch.no_grad():  # identical configurations: the output does not depend on how many there are
        assert torch.allclose(attn(one), attn(one.expand(5, -1, -1))[:1], atol=1e-6)
    train, valid = sets()
    mc = ModelConfig.for_task("layout", hidden=16, layers=2, opcode_dim=4, cross_config_heads=2)
    t = Trainer(mc, TrainConfig(epochs=2, finetune_epochs=1, configs_per_graph=8, eval_chunk=8))
    t.fit(train, valid)
    assert np.isfinite(t.predict(valid)["va0"]).all()
    assert any(p is q for p in CostModel.head_parameters(t.model) for q in t.model.cross.parameters())
    with pytest.raises(InvalidOption, match="layout models only"):
        ModelConfig.for_task("tile", cross_config_heads=2)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"segment_size": "big"}, "segment size"),
        ({"k": 0}, "k must be"),
        ({"prune_hops": -1}, "prune hops"),
        ({"keep_best": "yes"}, "keep best"),
    ],
)
def test_bad_auto_options_are_named(kw: dict, needle: str) -> None:
    with pytest.raises(InvalidOption, match=needle):
        TrainConfig(**kw).validate()
