"""Data-parallel GST training (costmodel/distributed.py): 2 gloo ranks give the one-process run, resume kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mlsysopt.costmodel import synth, train
from mlsysopt.errors import InvalidOption

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL = {"hidden": 16, "layers": 2}


# the base of the tc fixture (conftest.py)
TC_BASE = {"mode": "gst+efd", "segment_size": 60, "epochs": 2, "finetune_epochs": 1, "configs_per_graph": 4,
           "graphs_per_step": 2, "k": 2, "prune_hops": None}  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("dp") / "layout"
    synth("layout", r, {"train": 4, "valid": 1, "test": 1}, (150, 250), 8, seed=3)
    return r


def test_two_local_ranks_give_the_one_process_loss_curve_and_resume(root: Path, tmp_path: Path, tc: Callable) -> None:
    one = train(root, None, tc(), **MODEL)
    train(root, tmp_path / "run", tc(epochs=1, finetune_epochs=0), **MODEL)  # one process, checkpointed
    two = train(root, tmp_path / "run", tc(), workers=2, resume=True, **MODEL)  # resumed on 2 ranks to 2 + 1
    assert [h["phase"] for h in two["history"]] == [h["phase"] for h in one["history"]]
    # same seed, same graphs per step: the summed gradients differ from one process only in float summation order
    np.testing.assert_allclose([h["loss"] for h in two["history"]], [h["loss"] for h in one["history"]], rtol=1e-4)
    assert two["test"]["opa"] == pytest.approx(one["test"]["opa"], abs=0.02)


def test_more_workers_than_graphs_per_step_is_refused(root: Path, tmp_path: Path, tc: Callable) -> None:
    with pytest.raises(InvalidOption, match="--graphs-per-step >= 3"):
        train(root, tmp_path / "r", tc(graphs_per_step=2), workers=3, **MODEL)
    assert not (tmp_path / "r").exists()


@pytest.mark.xdist_group("ray")
def test_two_ray_actors_give_the_one_process_loss_curve(root: Path, ray_cluster: object, tc: Callable) -> None:
    one = train(root, None, tc(epochs=1, finetune_epochs=0), **MODEL)
    on_ray = train(root, None, tc(epochs=1, finetune_epochs=0), workers=2, backend="ray",
                   address=ray_cluster.address, **MODEL)  # type: ignore[attr-defined]  # fmt: skip
    np.testing.assert_allclose([h["loss"] for h in on_ray["history"]], [h["loss"] for h in one["history"]], rtol=1e-4)
