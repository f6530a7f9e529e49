"""The cost model as one product's oracle: NAS's latency measure (``nas search --latency-model RUN``, confirmed by
timing the final candidates) and a serving prior (op-level ONNX Runtime knobs as measurement records)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.costmodel import TrainConfig, train
from mlsysopt.costmodel.collection import collect
from mlsysopt.costmodel.latency import LatencyModel
from mlsysopt.errors import InvalidCheckpoint, MlsysoptError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> Path:
    """A logmse GNN on a tiny REAL collection of NAS-space cells (timed here; a few configurations each)."""
    root = tmp_path_factory.mktemp("oracle")
    collect(root / "data", graphs=8, configs=4, rounds=3, families=["nas"], seed=3)
    tc = TrainConfig(loss="logmse", epochs=3, finetune_epochs=0, configs_per_graph=4, lr=1e-2)
    train(root / "data", root / "run", tc, hidden=8, layers=2)
    return root / "run"


def test_the_oracle_predicts_milliseconds_and_refuses_a_ranking_model(oracle_run: Path, tmp_path: Path) -> None:
    import torch

    from mlsysopt.models.cnn_cell import build_model

    assert json.loads((oracle_run / "result.json").read_text())["runtime_unit"] == "ns"
    oracle = LatencyModel(oracle_run)
    model = build_model([("conv3x3", "identity", 8)], (1, 8, 8), 10, 8).eval()
    ms = oracle.torch_ms(model, (torch.zeros(1, 1, 8, 8),))
    assert 1e-3 < ms < 1e3  # milliseconds, within reason for a tiny CNN on a CPU
    data = oracle_run.parent / "data"
    train(data, tmp_path / "hinge", TrainConfig(epochs=1, finetune_epochs=0, configs_per_graph=4), hidden=8)
    with pytest.raises(InvalidCheckpoint, match="loss 'auto'.*logmse"):
        LatencyModel(tmp_path / "hinge")


def test_nas_search_filters_on_predicted_latency_and_times_the_final_candidates(oracle_run: Path,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    ran = run_inprocess("nas", "search", "--space", "digits", "--method", "random", "--budget", "2", "--epochs", "1",
                        "--max-blocks", "1", "--max-latency-ms", "1000", "--latency-model", oracle_run,
                        "--out", tmp_path / "nas")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "final candidate(s) timed" in " ".join(ran.stdout.split())
    result = json.loads((tmp_path / "nas" / "result.json").read_text())
    conf = result["latency_confirmation"]
    assert conf["candidates"] and all(r["measured_ms"] > 0 and r["predicted_ms"] > 0 for r in conf["candidates"])
    assert conf["confirmed_best"] is not None  # a 1000 ms limit holds when measured too
    for ev in result["evaluations"]:  # during the search latency_ms is the prediction
        assert ev["resources"]["latency_ms"] > 0
    bad = run_inprocess("nas", "search", "--space", "nasbench-graph:cora", "--budget", "2", "--latency-model",
                        oracle_run, "--out", tmp_path / "nbg")  # fmt: skip
    assert bad.returncode == 2 and "CNN spaces" in bad.stderr and not (tmp_path / "nbg").exists()


def test_the_serving_prior_gives_measurement_records_for_op_level_knobs(oracle_run: Path, tmp_path: Path) -> None:
    import torch
    from torch import nn

    from mlsysopt.graph.importers.onnx import export_onnx
    from mlsysopt.serving.backend import Measurement
    from mlsysopt.serving.cost_model import SOURCE, serving_prior
    from mlsysopt.serving.space import Space, Workload

    path = export_onnx(nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU()).eval(), (torch.zeros(1, 1, 8, 8),),
                       tmp_path / "m.onnx")  # fmt: skip
    space = Space(instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(0.0,), intra_threads=(1, 2),
                  inter_threads=(1, 2), execution_mode=(0, 1))  # fmt: skip
    records = serving_prior(oracle_run, path, space, Workload(rate=50.0))
    configs = [Measurement.from_dict(r).config for r in records]  # the serving contract's own format
    assert configs and all(c.instances == 1 and c.max_batch == 1 for c in configs)
    assert {(c.intra_threads, c.execution_mode) for c in configs} == {(1, 0), (2, 0), (1, 1), (2, 1)}
    assert all(r["extra"]["source"] == SOURCE and np.isfinite(r["mean_ms"]) and r["mean_ms"] > 0 for r in records)
    with pytest.raises(MlsysoptError, match="max_batch 1"):
        serving_prior(oracle_run, path, Space(max_batch=(4,), batch_timeout_ms=(0.0, 2.0)), Workload(rate=50.0))


def test_serving_tune_narrows_the_op_level_knobs_to_the_cost_models_fast_settings(oracle_run: Path,
                                                                                  tmp_path: Path) -> None:  # fmt: skip
    knobs = ("--instances", "1", "--max-batch", "1,2", "--batch-timeout-ms", "0", "--intra", "1,2", "--inter", "2")
    quick = ("--rate", "300", "--requests", "30", "--budget", "2", "--confirm-top", "1", "--confirm-rounds", "2",
             "--noise-windows", "2")  # fmt: skip
    ran = run_inprocess("serving", "tune", "--engine", "real", "--model", "zoo:cnn", *knobs, *quick, "--cost-model",
                        oracle_run, "--cost-model-tolerance", "0", "--out", tmp_path / "t")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "op-level settings" in " ".join(ran.stderr.split())
    result = json.loads((tmp_path / "t" / "result.json").read_text())
    cm = result["cost_model"]
    predicted = [(p["intra_threads"], p["execution_mode"]) for p in cm["predicted"]]
    assert sorted(predicted) == [(1, 0), (1, 1), (2, 0), (2, 1)]  # every op-level setting of the grid, best first
    ms = [p["predicted_ms"] for p in cm["predicted"]]
    assert ms == sorted(ms) and ms[0] > 0
    kept = {(k["intra_threads"], k["execution_mode"]) for k in cm["kept"]}
    default = (cm["default"]["intra_threads"], cm["default"]["execution_mode"])
    assert kept == {predicted[0], default}  # tolerance 0: the predicted best and the default's own setting
    space = result["settings"]["space"]
    assert sorted(space["intra_threads"]) == sorted({i for i, _ in kept})
    assert sorted(space["execution_mode"]) == sorted({m for _, m in kept})
    assert space["op_levels"] == sorted([list(p) for p in kept])  # the pairs themselves, not their product
    for m in result["measurements"]:
        assert (m["config"]["intra_threads"], m["config"]["execution_mode"]) in kept
    assert result["settings"]["cost_model"] == str(oracle_run)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (("--engine", "sim", "--cost-model", "{oracle}"), ("--cost-model", "--engine real")),
        (("--engine", "real", "--model", "zoo:cnn", "--cost-model", "{tmp}/nowhere"), ("--cost-model", "nowhere")),
        (("--engine", "real", "--model", "zoo:cnn", "--cost-model", "{tmp}"), ("--cost-model", "no checkpoint.pt")),
        (
            ("--engine", "real", "--model", "zoo:cnn", "--cost-model", "{oracle}", "--cost-model-tolerance", "-1"),
            ("--cost-model-tolerance -1",),
        ),
        (
            ("--engine", "real", "--model", "zoo:cnn", "--cost-model", "{oracle}", "--cost-model-tolerance", "nan"),
            ("--cost-model-tolerance", "finite"),
        ),
    ],
)
def test_serving_tune_refuses_a_bad_cost_model_before_writing(oracle_run: Path, tmp_path: Path, extra: tuple[str, ...],
                                                              expected: tuple[str, ...]) -> None:  # fmt: skip
    args = [a.format(oracle=oracle_run, tmp=tmp_path) for a in extra]
    ran = run_inprocess("serving", "tune", *args, "--out", tmp_path / "t")
    assert_user_error(ran, *expected)
    assert "--run" not in ran.stderr and "--latency-model" not in ran.stderr  # the option typed is named
    assert not (tmp_path / "t").exists()
