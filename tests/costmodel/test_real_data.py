"""The real collection shipped with mlsysopt (``real:cpu``): size-bounded, named real, loadable, learnable."""

from __future__ import annotations

import json

import numpy as np

from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.data.real import manifest, real_root

MAX_MB = 6.0


def test_the_shipped_copy_is_small_real_and_complete() -> None:
    root = real_root()
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20
    assert size <= MAX_MB, f"{size:.1f} MB"
    man = manifest()
    assert man["data"].startswith("real, measured on ") and man["complete"]
    assert {s: len(list((root / s).glob("*.npz"))) for s in ("train", "valid", "test")} == man["splits"]
    assert min(man["splits"].values()) >= 10 and sum(man["splits"].values()) >= 200  # hundreds of distinct graphs
    assert not (root / "checkpoint.json").exists()  # a dataset, not a run folder in progress
    assert json.loads((root / "collection.json").read_text())["units"]["config_runtime"].startswith("ns")


def test_every_split_loads_as_layout_graphs_with_measured_repeats() -> None:
    for split in ("train", "valid", "test"):
        ds = load_dataset("real:cpu", split)
        rec = ds.record(0)
        assert ds.task == "layout" and rec.x.shape[1] == 140 and (rec.runtime > 0).all()
    path = sorted((real_root() / "test").glob("*.npz"))[0]
    with np.load(path, allow_pickle=False) as z:
        fastest = z["config_runtime_repeats"].min(axis=1)
        np.testing.assert_allclose(z["config_runtime"], np.maximum(1, np.rint(fastest)), rtol=1e-6, atol=1)
        assert (z["config_runtime_ci"][:, 0] <= z["config_runtime_ci"][:, 1]).all()
