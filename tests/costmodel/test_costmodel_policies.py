"""Stale-history policies (gst.py), --validate-every, the realistic SYNTHETIC generator, size limits, synth folders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gst_fakes import ListDataset

from mlsysopt.costmodel import synth
from mlsysopt.costmodel.data.realistic import realistic_layout_graph, runtime_profile
from mlsysopt.costmodel.data.tpugraphs import layout_record
from mlsysopt.costmodel.limits import check_synth, check_train
from mlsysopt.costmodel.model import ModelConfig
from mlsysopt.costmodel.trainer import Trainer
from mlsysopt.errors import InvalidOption

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MC = ModelConfig.for_task("layout", hidden=16, layers=2, opcode_dim=4, dropout=0.0)


@pytest.fixture(scope="module")
def realistic() -> tuple[ListDataset, ListDataset]:
    """SYNTHETIC realistic layout graphs: few configurable nodes, so most segments are the same for every config."""
    recs = [layout_record(realistic_layout_graph(1500 + 200 * i, 40, np.random.default_rng(i)), f"synthetic_{i}")
            for i in range(5)]  # fmt: skip
    return ListDataset(recs[:4]), ListDataset(recs[4:])


# the base of the tc fixture (conftest.py)
TC_BASE = {"segment_size": 100, "epochs": 2, "finetune_epochs": 0, "configs_per_graph": 8, "lr": 3e-3, "k": 2,
           "prune_hops": None}  # fmt: skip


def test_refreshing_the_varying_segments_makes_the_table_exact_for_a_ranking_loss(
    realistic: tuple, tc: Callable
) -> None:
    # segments on which the step's configs agree add one constant to every config's score, which a ranking loss
    # cannot see; recomputing the others (refresh="varying") leaves nothing stale: gst+e trains exactly as gst
    train, _ = realistic
    gst = Trainer(MC, tc(mode="gst")).fit(train)
    exact = Trainer(MC, tc(mode="gst+e")).fit(train)
    np.testing.assert_allclose([h["loss"] for h in exact], [h["loss"] for h in gst], rtol=1e-4, atol=1e-6)
    unrefreshed = Trainer(MC, tc(mode="gst+e", refresh="none")).fit(train)
    assert not np.allclose([h["loss"] for h in unrefreshed], [h["loss"] for h in gst], rtol=1e-4, atol=1e-6)
    stale = Trainer(MC, tc(mode="gst+e", refresh="none", history_key="config", sample="uniform", epochs=3)).fit(train)
    assert all(np.isfinite(h["loss"]) for h in stale)  # the reference's policy still runs (the ablation's baseline)


def test_refresh_stalest_and_sample_uniform_run_and_options_are_checked(realistic: tuple, tc: Callable) -> None:
    train, _ = realistic
    hist = Trainer(MC, tc(mode="gst+efd", refresh="stalest", refresh_segments=2, sample="uniform")).fit(train)
    assert len(hist) == 2 and all(np.isfinite(h["loss"]) for h in hist)
    for kw, match in (({"refresh": "sometimes"}, "unknown refresh 'sometimes'"), ({"sample": "all"}, "unknown sample")):
        with pytest.raises(InvalidOption, match=match):
            tc(**kw).validate()


def test_validate_every_n_epochs_and_at_the_end_of_each_phase(realistic: tuple, tc: Callable) -> None:
    train, valid = realistic
    hist = Trainer(MC, tc(mode="gst+ef", epochs=5, finetune_epochs=2, validate_every=2)).fit(train, valid)
    validated = [(h["phase"], h["epoch"]) for h in hist if "valid_opa" in h]
    # epochs count on through the finetune phase: 1-5 train, 6-7 finetune
    assert [(h["phase"], h["epoch"]) for h in hist] == [("train", e) for e in range(1, 6)] + [
        ("finetune", 6),
        ("finetune", 7),
    ]
    assert validated == [("train", 2), ("train", 4), ("train", 5), ("finetune", 6), ("finetune", 7)]
    assert all("eval_s" not in h for h in hist if "valid_opa" not in h)
    with pytest.raises(InvalidOption, match="validate every"):
        tc(validate_every=0).validate()


def test_realistic_generator_has_clustered_heavy_tailed_tied_runtimes() -> None:
    arrays = realistic_layout_graph(4000, 800, np.random.default_rng(7))
    prof = runtime_profile(arrays["config_runtime"], arrays["node_config_feat"])
    # real TpuGraphs (issue 15): ~69% within 1% of the fastest, 10-12% near 2.3x, 6-7% near 5.4x, exact ties,
    # identical features ~0.02% apart
    assert 0.55 <= prof["within_1pct"] <= 0.85
    assert 0.05 <= prof["near_2_3x"] <= 0.2 and 0.02 <= prof["near_5_4x"] <= 0.12
    assert prof["tied"] > 0.02
    assert 0 < prof["duplicate_median_diff"] < 0.002
    assert arrays["node_config_ids"].size < 0.05 * 4000  # few configurable nodes, as in real layout graphs
    again = realistic_layout_graph(4000, 800, np.random.default_rng(7))
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)  # deterministic by seed


def test_size_limits_name_the_option_and_the_limit() -> None:
    with pytest.raises(InvalidOption, match="--hidden 100,000 is above the limit"):
        check_train(100_000, 3, 1000, 32, 1, 1)
    with pytest.raises(InvalidOption, match="--configs-per-graph .* above the limit"):
        check_train(64, 3, 100_000, 10**9, 1, 1)
    with pytest.raises(InvalidOption, match="--nodes .* above the limit"):
        check_synth(10**12, 2, 1)
    with pytest.raises(InvalidOption, match="--graphs .* above the limit"):
        check_synth(1000, 2, 10**12)
    check_train(64, 3, 1000, 32, 1, 1)
    check_synth(100_000, 1000, 100)


def test_synth_refuses_a_non_empty_folder_and_overwrites_only_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "d"
    assert synth("layout", out, {"train": 1, "test": 1}, 200, 4, seed=1) == {"train": 1, "test": 1}
    with pytest.raises(InvalidOption, match="not empty .* --overwrite"):
        synth("layout", out, {"train": 1}, 200, 4, seed=2)
    assert synth("layout", out, {"train": 2}, 200, 4, seed=2, overwrite=True) == {"train": 2}
    assert sorted(p.parent.name for p in out.rglob("*.npz")) == ["train", "train"]  # the old test graph is gone
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InvalidOption, match="synth did not write"):
        synth("layout", out, {"train": 1}, 200, 4, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and len(list(out.rglob("*.npz"))) == 2
    with pytest.raises(InvalidOption, match="unknown profile"):
        synth("layout", tmp_path / "e", 1, 200, 4, profile="fancy")
