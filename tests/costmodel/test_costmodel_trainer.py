"""Trainer (costmodel/trainer.py): every mode learns, SED is unbiased, F touches only the head, evaluation is fresh,
GST step memory is flat in graph size, checkpoints resume exactly, bad options and checkpoints are reported."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from gst_fakes import ListDataset, easy_layout, easy_malnet, easy_tile

from mlsysopt.costmodel.checkpoint import CHECKPOINT_NAME
from mlsysopt.costmodel.model import ModelConfig
from mlsysopt.costmodel.trainer import MODES, Trainer, combine
from mlsysopt.errors import InvalidCheckpoint, InvalidOption

MC = ModelConfig.for_task("layout", hidden=16, layers=2, opcode_dim=4, dropout=0.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def layout_sets(n_train: int = 12, nodes: int = 120) -> tuple[ListDataset, ListDataset]:
    train = [easy_layout(f"tr{i}", nodes + 7 * i, configs=16, seed=i) for i in range(n_train)]
    valid = [easy_layout(f"va{i}", nodes, configs=16, seed=100 + i) for i in range(4)]
    return ListDataset(train), ListDataset(valid)


# the base of the tc fixture (conftest.py)
TC_BASE = {
    "segment_size": 40, "epochs": 2, "finetune_epochs": 1, "configs_per_graph": 8, "lr": 3e-3, "k": 1,
    "prune_hops": None,  # these tests are about the GST mechanics on whole graphs
    "measure_memory": 1,
}  # fmt: skip


# ---------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"mode": "gst+x"}, "unknown mode 'gst\\+x'"),
        ({"segment_size": 0}, "segment size must be an integer >= 1"),
        ({"k": 0}, "k must be an integer >= 1"),
        ({"sed_p": 1.0}, "SED probability"),
        ({"sed_p": -0.1}, "SED probability"),
        ({"epochs": 0}, "epochs must be"),
        ({"lr": 0.0}, "learning rates"),
        ({"configs_per_graph": 1}, "configs per graph"),
        ({"segmenter": "random"}, "unknown segmenter"),
        ({"prune_hops": -1}, "prune hops"),
        ({"grad_clip": 0.0}, "grad clip"),
    ],
)
def test_bad_train_options(kw: dict, match: str, tc: Callable) -> None:
    with pytest.raises(InvalidOption, match=match):
        tc(**kw).validate()


def test_options_that_do_not_fit_the_task(tc: Callable) -> None:
    with pytest.raises(InvalidOption, match="does not fit task 'malnet'"):
        Trainer(ModelConfig.for_task("malnet"), tc(loss="hinge"))
    with pytest.raises(InvalidOption, match="prune hops applies to layout"):
        Trainer(ModelConfig.for_task("tile"), tc(prune_hops=1))
    train, _ = layout_sets(2)
    with pytest.raises(InvalidOption, match="a layout graph, but the model is for tile"):
        Trainer(ModelConfig.for_task("tile"), tc()).fit(train)
    if not torch.cuda.is_available():
        with pytest.raises(InvalidOption, match="CUDA is not available"):
            tc(device="cuda").validate()


# ---------------------------------------------------------------------------- SED
@pytest.mark.parametrize(("S", "k", "p"), [(5, 1, 0.5), (6, 2, 0.3), (4, 1, 0.0)])
def test_sed_aggregate_is_unbiased_exactly(S: int, k: int, p: float) -> None:
    """E over the sampled segments K (uniform) and the drop mask (i.i.d. p) of combine(...) == sum of all segments."""
    emb = torch.randn(S, 3, 4, dtype=torch.float64)  # a table that holds the current embeddings
    expected = torch.zeros(3, 4, dtype=torch.float64)
    subsets = list(itertools.combinations(range(S), k))
    for K in subsets:
        others = [s for s in range(S) if s not in K]
        for mask in itertools.product([0, 1], repeat=len(others)):  # 1 = kept
            dropped = len(others) - sum(mask)
            prob = (1 - p) ** sum(mask) * p**dropped / len(subsets)
            stale = sum((emb[s] for s, m in zip(others, mask, strict=True) if m), torch.zeros(3, 4, dtype=emb.dtype))
            expected += prob * combine(emb[list(K)].sum(0), k, stale, dropped, S, mean=False)
    torch.testing.assert_close(expected, emb.sum(0))
    mean = combine(emb[:k].sum(0), k, emb[k:].sum(0), 0, S, mean=True)
    torch.testing.assert_close(mean, emb.mean(0))


# ---------------------------------------------------------------------------- learning
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_learns_the_easy_layout_task(mode: str, tc: Callable) -> None:
    train, valid = layout_sets()
    trainer = Trainer(MC, tc(mode=mode, epochs=2, finetune_epochs=2))  # 2 epochs: ~0.52 untrained -> 0.79-0.82
    before = trainer.evaluate(valid)["opa"]
    hist = trainer.fit(train, valid)
    train_losses = [h["loss"] for h in hist if h["phase"] == "train"]
    assert train_losses[-1] < train_losses[0]
    assert hist[-1]["valid_opa"] > max(0.7, before + 0.1)
    assert len(hist) == 2 + (2 if mode in ("gst+ef", "gst+efd") else 0)
    assert [h["phase"] for h in hist].count("finetune") == len(hist) - 2
    for h in hist:
        assert len(h["step_mb"]) == len(train) and h["peak_step_mb"] == max(h["step_mb"]) > 0
        assert h["epoch_s"] > 0 and math.isfinite(h["valid_kendall"])


def test_malnet_and_tile_tasks_train_and_evaluate(tc: Callable) -> None:
    mal = ListDataset([easy_malnet(f"m{i}", i % 2, n=80 + 5 * i, seed=i) for i in range(8)])
    mc = ModelConfig.for_task("malnet", num_classes=2, hidden=16, layers=2)
    trainer = Trainer(mc, tc(mode="gst+efd", segment_size=30, epochs=2, graphs_per_step=2))  # accuracy 0 untrained
    hist = trainer.fit(mal, mal)
    assert hist[-1]["valid_accuracy"] == 1.0
    assert trainer.predict(mal)["m0"].shape == (2,)
    tile = ListDataset([easy_tile(f"t{i}", seed=i) for i in range(6)])
    tmc = ModelConfig.for_task("tile", hidden=16, layers=2, opcode_dim=4)
    hist = Trainer(tmc, tc(mode="gst+ef", segment_size=10, epochs=5, lr=1e-2)).fit(tile, tile)  # 0.50 -> 0.90
    assert hist[-1]["valid_opa"] > 0.8


# ---------------------------------------------------------------------------- F, evaluation
def test_finetune_changes_only_the_head(tmp_path: Path, tc: Callable) -> None:
    train, _ = layout_sets(4)
    first = Trainer(MC, tc(mode="gst+ef", epochs=1, finetune_epochs=0))
    first.fit(train, run_dir=tmp_path)
    before = {k: v.clone() for k, v in first.model.state_dict().items()}
    second = Trainer(MC, tc(mode="gst+ef", epochs=1, finetune_epochs=2))
    second.fit(train, run_dir=tmp_path, resume=True)  # continues into F
    head = {n for n, _ in second.model.named_parameters() if n.startswith("head_mlp")}
    for name, value in second.model.state_dict().items():
        same = torch.equal(value, before[name])
        assert same != (name in head), name
    # F refreshed every (signature, segment) of every training graph fresh into the F table
    for rec in train:
        offsets, _ = second.plan(rec).row_keys()
        assert second.ft_table.num_entries(rec.name) == offsets[-1]


def test_evaluate_never_reads_the_table_and_sums_fresh_segments(tc: Callable) -> None:
    train, valid = layout_sets(4)
    trainer = Trainer(MC, tc(mode="gst+e", epochs=1))
    trainer.fit(train)
    metrics, preds = trainer.evaluate(valid), trainer.predict(valid)

    class Poisoned:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"evaluation touched the table ({name})")

    trainer.table = Poisoned()  # type: ignore[assignment]
    assert trainer.evaluate(valid) == metrics
    rec = valid.records[0]
    seg = trainer.segmenter(rec)
    trainer.model.eval()
    with torch.no_grad():
        plan = trainer.plan(rec)
        cfgs = np.arange(rec.num_configs)
        # the readout's units (embeddings, or each segment's scalar score) summed over fresh segments, then read out
        agg = sum(trainer.model.units(trainer.model.embed_segment(plan, s, cfgs)) for s in range(seg.num_segments))
        manual = trainer.model.readout(agg).numpy()
    np.testing.assert_allclose(preds[rec.name], manual, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- memory
def _step_mb(tc: Callable, mode: str, n: int) -> float:
    rec = easy_layout("big", n, configs=4, seed=1)
    cfg = tc(mode=mode, segment_size=200, epochs=1, finetune_epochs=0, configs_per_graph=4)
    return Trainer(MC, cfg).fit(ListDataset([rec]))[0]["peak_step_mb"]


def test_gst_step_memory_is_flat_in_graph_size_while_full_grows(tc: Callable) -> None:
    full = _step_mb(tc, "full", 20_000) / _step_mb(tc, "full", 2_000)
    assert full > 7.0
    for mode in ("gst", "gst+efd"):
        assert _step_mb(tc, mode, 20_000) / _step_mb(tc, mode, 2_000) < 1.25, mode


# ---------------------------------------------------------------------------- checkpoints
class Interrupt(Exception):
    pass


def _interrupt_at(step: int):
    def progress(done: int, total: int, info: dict) -> None:
        if done == step:
            raise Interrupt

    return progress


def test_interrupted_run_resumed_twice_matches_an_uninterrupted_one(tmp_path: Path, tc: Callable) -> None:
    train, valid = layout_sets(4)
    cfg = tc(mode="gst+efd", epochs=2, finetune_epochs=2)
    straight = Trainer(MC, cfg)
    ref = straight.fit(train, valid)
    with pytest.raises(Interrupt):  # during epoch 2
        Trainer(MC, cfg).fit(train, valid, run_dir=tmp_path, progress=_interrupt_at(6))
    with pytest.raises(Interrupt):  # resumed, then interrupted again during the first finetune epoch
        Trainer(MC, cfg).fit(train, valid, run_dir=tmp_path, resume=True, progress=_interrupt_at(10))
    resumed = Trainer(MC, cfg)
    hist = resumed.fit(train, valid, run_dir=tmp_path, resume=True)
    assert [h["loss"] for h in hist] == [h["loss"] for h in ref]
    assert [h["valid_opa"] for h in hist] == [h["valid_opa"] for h in ref]
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_NAME]  # no temp files left behind
    loaded = Trainer.load(tmp_path)
    assert loaded.evaluate(valid) == straight.evaluate(valid)


def test_progress_reports_every_step(tc: Callable) -> None:
    train, _ = layout_sets(3)
    seen: list[tuple[int, int]] = []
    Trainer(MC, tc(mode="gst", epochs=2)).fit(train, progress=lambda d, t, info: seen.append((d, t)))
    assert seen == [(i, 6) for i in range(1, 7)]


def test_incompatible_or_corrupt_checkpoints(tmp_path: Path, tc: Callable) -> None:
    train, _ = layout_sets(2)
    Trainer(MC, tc(mode="gst+e", epochs=1)).fit(train, run_dir=tmp_path)
    other = ModelConfig.for_task("layout", hidden=32, layers=2, opcode_dim=4, dropout=0.0)
    with pytest.raises(InvalidCheckpoint, match=r"incompatible model: hidden=16 \(now 32\)"):
        Trainer(other, tc(mode="gst+e", epochs=2)).fit(train, run_dir=tmp_path, resume=True)
    with pytest.raises(InvalidCheckpoint, match=r"mode='gst\+e' \(now 'full'\)"):
        Trainer(MC, tc(mode="full", epochs=2)).fit(train, run_dir=tmp_path, resume=True)
    bad = tmp_path / "bad" / CHECKPOINT_NAME
    bad.parent.mkdir()
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InvalidCheckpoint, match="not a readable checkpoint"):
        Trainer.load(bad.parent)
    with pytest.raises(InvalidCheckpoint, match="no such checkpoint"):
        Trainer.load(tmp_path / "missing")
