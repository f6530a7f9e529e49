"""The latency oracle: a real collection timed here (tiny), predictors behind one interface, the oracle's interval
and out-of-distribution flag, the shipped oracle, and the ``costmodel latency`` commands' bad inputs."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from latency_fakes import synthetic_models

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.costmodel.oracle.collect import collect_latency
from mlsysopt.costmodel.oracle.dataset import COLUMNS, load_collection
from mlsysopt.costmodel.oracle.families import FAMILIES
from mlsysopt.costmodel.oracle.oracle import LatencyOracle
from mlsysopt.costmodel.oracle.predictors import PREDICTORS, from_dict
from mlsysopt.costmodel.oracle.settings import SETTINGS, Setting, make_setting
from mlsysopt.errors import InvalidDataset, InvalidOption, MlsysoptWarning

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> Path:
    """Six REAL models (MLPs and GRUs) timed here under every setting, stopped once by --timeout and resumed."""
    out = tmp_path_factory.mktemp("latency") / "run"
    first = collect_latency(out, models=6, rounds=2, families=["mlp", "gru"], timeout=1e-6, max_others=64)
    assert not first["complete"] and 1 <= first["models"] < 6  # stopped after one model, nothing packed
    assert not (out / "latency.npz").exists()
    done = collect_latency(out, models=6, rounds=2, families=["mlp", "gru"], resume=True, max_others=64)
    assert done["complete"] and done["models"] == 6
    return out


def test_a_collection_records_every_setting_the_machine_and_the_loads(tiny: Path) -> None:
    models, manifest = load_collection(tiny, include_flagged=True)
    assert len(models) == 6 and {m.family for m in models} == {"mlp", "gru"}
    for m in models:
        assert set(m.ms) == {s.key for s in SETTINGS} and all(v > 0 for v in m.ms.values())
        assert m.nodes.shape == (len(m.ops), len(COLUMNS)) and m.edges.shape[0] == 2
    assert manifest["machine"] and 0 <= manifest["noise_floor"] < 1
    assert manifest["load_1min"]["median"] is not None and manifest["others_cpu"]["limit"] == 64
    rows = json.loads(str(np.load(tiny / "latency.npz")["rows"]))
    assert all(len(v) == 2 for r in rows for v in r["rounds_ms"].values())  # both rounds kept
    assert all(len(r["reference_ms_rounds"]) == 2 and min(r["reference_ms_rounds"]) > 0 for r in rows)
    speed = manifest["host_speed"]
    assert speed["rounds"] == 12 and speed["p10"] <= speed["reference_ms_median"] <= speed["p90"]


def test_host_speed_counts_the_rounds_a_slow_host_timed_and_reads_old_collections() -> None:
    from mlsysopt.costmodel.oracle.timing import host_speed

    rows = [{"reference_ms_rounds": [1.0, 1.0, 1.02]}, {"reference_ms_rounds": [0.98, 1.3, 1.01]}]
    speed = host_speed(rows)
    assert speed["slow_rounds"] == 1 and speed["rounds"] == 6 and speed["reference_ms_median"] == 1.005
    assert speed["spread"] == pytest.approx(np.quantile([1, 1, 1.02, 0.98, 1.3, 1.01], 0.9) / 0.99)
    assert host_speed([{"rounds_ms": {}}]) is None  # a collection timed before the reference workload existed


@pytest.mark.parametrize(("noise", "spread", "warned"), [(0.02, 1.05, False), (0.2, 1.05, True), (0.02, 1.4, True)])
def test_collect_latency_warns_when_the_times_do_not_reproduce_or_the_host_speed_moved(
    noise: float, spread: float, warned: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlsysopt.costmodel.oracle.collect as collect

    def fake(out: Path, **kw: object) -> dict:
        return {"models": 3, "complete": True, "noise_floor": noise, "host_speed": {"spread": spread, "slow_rounds": 7}}

    monkeypatch.setattr(collect, "collect_latency", fake)
    ran = run_inprocess("costmodel", "collect-latency", "--out", tmp_path / "lat")
    assert ran.returncode == 0, ran.stderr
    assert f"noise floor {noise:.1%}, host speed spread {spread:.2f}x (7 slow rounds)" in " ".join(ran.stdout.split())
    assert ("time it again when it is quiet" in " ".join(ran.stderr.split())) is warned


def test_a_collection_from_two_machines_or_a_foreign_file_is_refused(tiny: Path, tmp_path: Path) -> None:
    z = dict(np.load(tiny / "latency.npz"))
    rows = json.loads(str(z["rows"]))
    rows[0]["machine"] = "another CPU"
    np.savez(tmp_path / "mixed.npz", **(z | {"rows": np.array(json.dumps(rows))}))
    with pytest.raises(InvalidDataset, match="2 machines"):
        load_collection(tmp_path / "mixed.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InvalidDataset, match="not a latency collection"):
        load_collection(tmp_path / "junk.npz")


def test_collect_latency_refuses_bad_options_before_writing(tmp_path: Path) -> None:
    for kw, match in (({"models": 0}, "--models"), ({"rounds": 1}, "--rounds"), ({"families": ["cnn"]}, "families"),
                      ({"timeout": -1.0}, "--timeout"), ({"max_others": 0.0}, "--max-others")):  # fmt: skip
        with pytest.raises(InvalidOption, match=match):
            collect_latency(tmp_path / "out", **kw)
    assert not (tmp_path / "out").exists()


def test_settings_parse_and_bad_values_name_the_option() -> None:
    for s in SETTINGS:
        assert Setting.parse(s.key) == s
    assert make_setting("torch", 2, "seq", 8).key == "torch-t2-b8"
    for args, match in ((("tensorrt",), "--engine"), (("torch", 1, "par"), "--mode par"),
                        (("onnxruntime", 0), "--threads"), (("onnxruntime", 1, "seq", 0), "--batch")):  # fmt: skip
        with pytest.raises(InvalidOption, match=match):
            make_setting(*args)


@pytest.mark.parametrize("name", sorted(PREDICTORS))
def test_every_predictor_fits_predicts_positive_ms_and_round_trips(name: str) -> None:
    models = synthetic_models(40, 0)
    cls = PREDICTORS[name]  # the GNN and the additive MLP are registered by importing the oracle
    p = (cls(epochs={"gnn": 2, "additive-mlp": 20}[name]) if name in ("gnn", "additive-mlp") else cls()).fit(
        models, list(SETTINGS)
    )
    s = Setting("onnxruntime", 2, "seq", 8)
    pred = p.predict_models(models[:5], s)
    assert np.all(np.isfinite(pred)) and np.all(pred > 0)
    again = from_dict(json.loads(json.dumps(p.to_dict())))
    assert np.allclose(again.predict_models(models[:5], s), pred, rtol=1e-6)
    m = models[0]  # its per-op split (what --op-costs gives the simulator) sums to its prediction
    assert p.per_op(m.ops, m.nodes, s, m.edges).sum() == pytest.approx(pred[0], rel=1e-6)


def test_the_additive_model_recovers_an_additive_latency() -> None:
    models = synthetic_models(60, 1)
    p = PREDICTORS["additive"]().fit(models, list(SETTINGS))
    for s in (SETTINGS[0], SETTINGS[-1]):
        pred, true = p.predict_models(models, s), np.array([m.ms[s.key] for m in models])
        assert np.max(np.abs(pred / true - 1)) < 0.01


def test_within_graph_ranks_each_model_and_batch_by_the_predicted_times() -> None:
    from mlsysopt.costmodel.oracle.evaluate import within_graph

    models = synthetic_models(30, 2)
    exact = within_graph(PREDICTORS["additive"]().fit(models, list(SETTINGS)), models, list(SETTINGS))
    assert exact["num_graphs"] == 2 * len(models)  # one group per model and batch
    assert exact["opa"] > 0.99 and exact["slowdown_top1"] < 1e-6

    class Backwards(PREDICTORS["flops"]):  # type: ignore[misc, valid-type]
        """Predicts the synthetic truth's inverse: every pair ordered wrongly."""

        def predict(self, ops, nodes, setting, edges=None):  # type: ignore[no-untyped-def]
            return (1.3 if setting.engine == "torch" else 1.0) ** -1 * (1.0 if setting.threads == 1 else 1 / 0.6)

    worst = within_graph(Backwards(), models, list(SETTINGS))
    assert worst["opa"] < 0.01 and worst["slowdown_top1"] > 0.5


def test_an_oracle_of_an_already_fitted_predictor_is_the_one_fitted_inside() -> None:
    models = synthetic_models(40, 2)
    inside = LatencyOracle.fit(PREDICTORS["additive"](), models[:30], models[30:], list(SETTINGS))
    before = PREDICTORS["additive"]().fit(models[:30], list(SETTINGS))
    reused = LatencyOracle.fit(before, models[:30], models[30:], list(SETTINGS), fitted=True)
    assert reused.predictor is before and reused.meta == inside.meta


def test_the_oracle_flags_a_model_outside_what_it_learned() -> None:
    models = synthetic_models(40, 2)
    oracle = LatencyOracle.fit(PREDICTORS["additive"](), models[:30], models[30:], list(SETTINGS))
    m = models[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inside = oracle.predict_graph(m.ops, m.nodes, SETTINGS[0])
    assert not inside.ood and inside.low <= inside.ms <= inside.high
    ops = m.ops.astype("<U32")
    ops[1] = "onnx:MyCustomOp"
    with pytest.warns(MlsysoptWarning, match="never saw: onnx:MyCustomOp"):
        out = oracle.predict_graph(ops, m.nodes, SETTINGS[0], "custom")
    assert out.ood and out.high / out.ms > inside.high / inside.ms * 2  # widened
    with pytest.warns(MlsysoptWarning, match="never recorded"):
        oracle.predict_graph(m.ops, m.nodes, Setting("onnxruntime", 4, "seq", 1))


def test_a_setting_whose_rounds_stall_on_an_op_kind_raises_the_upper_end_for_models_holding_it() -> None:
    """SYNTHETIC rounds: under ort-t2-par-b8, 6 of the 20 training models with a GRU had a round 16 ms slower."""
    from mlsysopt.costmodel.oracle.oracle import stalls

    models = synthetic_models(130, 3)
    par, seq = Setting.parse("ort-t2-par-b8"), Setting.parse("ort-t2-seq-b8")
    for i, m in enumerate(models):
        if i % 6 == 1:
            m.ops = m.ops.astype("<U16")
            m.ops[1] = "gru"
        m.rounds = {k: [v, v * 1.01, v * 0.99] for k, v in m.ms.items()}
        if i % 6 == 1 and i < 36:
            m.rounds[par.key][1] += 16.0
    train = models[:120]
    assert stalls(train, list(SETTINGS)) == {par.key: {"gru": [0.3, pytest.approx(16.0, rel=0.01)]}}
    assert stalls(train[:60], list(SETTINGS)) == {}  # 10 models with a GRU: too few to say
    oracle = LatencyOracle.fit(PREDICTORS["additive"](), train, models[120:], list(SETTINGS))
    gru, plain = models[121], models[120]
    with pytest.warns(MlsysoptWarning, match="under ort-t2-par-b8 30% of the training models with gru ops had a"):
        stalled = oracle.predict_graph(gru.ops, gru.nodes, par, "g")
    assert stalled.stalls and stalled.high >= stalled.ms + 15.8 and not stalled.ood
    assert stalled.to_dict()["stalls"] == stalled.stalls
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steady = [oracle.predict_graph(gru.ops, gru.nodes, seq), oracle.predict_graph(plain.ops, plain.nodes, par)]
    assert not any(p.stalls for p in steady) and all(p.high < p.ms + 1 for p in steady)
    saved = json.loads(json.dumps(oracle.meta))  # the checkpoint keeps it; an oracle saved without it has none
    assert LatencyOracle(oracle.predictor, saved)._stalls(gru.ops, gru.nodes, par)
    del saved["stalls"]
    assert LatencyOracle(oracle.predictor, saved)._stalls(gru.ops, gru.nodes, par) == {}


def test_a_view_of_a_parameter_reads_no_weights_a_layer_does() -> None:
    from mlsysopt.costmodel.oracle.features import BASIS_PER_CATEGORY, CATEGORIES, additive_basis_nodes, per_category

    ops = np.array(["input", "slice", "reshape", "linear", "add", "output"])
    nodes = np.zeros((len(ops), len(COLUMNS)))
    nodes[:, COLUMNS.index("groups")] = nodes[:, COLUMNS.index("kernel_area")] = 1
    nodes[1:5, COLUMNS.index("params")] = 8192  # a position embedding sliced and reshaped; a layer; a bias added
    weights = per_category(ops, nodes, 1)[:, 3]
    assert weights[CATEGORIES.index("memory")] == 0 and weights[CATEGORIES.index("free")] == 0
    assert weights[CATEGORIES.index("linear")] == weights[CATEGORIES.index("arith")] == 8192 * 4 / 1e6
    rows = additive_basis_nodes(ops, nodes, 1)
    assert rows[1:3].sum() == 2.0  # the slice and the reshape: their count only
    assert rows[3, CATEGORIES.index("linear") * len(BASIS_PER_CATEGORY) + 1] == 8192 * 4 / 1e6


_ENCODER_PY = (
    "import torch\nfrom torch import nn\n\n\ndef model():\n"
    "    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)\n"
    "    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval(), (torch.randn(1, 8, 16),)\n"
)


@pytest.fixture(scope="module")
def without_encoders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An oracle folder trained on the shipped collection's models less its ``encoder`` family (no fused op)."""
    models, _ = load_collection("real:cpu")
    kept = [m for m in models if m.family != "encoder"]
    train, valid = kept[:200:2], kept[1:200:2]
    assert not any(m.column("fused").any() for m in train + valid)
    out = tmp_path_factory.mktemp("oracle") / "no-encoders"
    LatencyOracle.fit(PREDICTORS["additive"](), train, valid, list(SETTINGS)).save(out)
    return out


def test_ops_of_a_module_pytorch_runs_as_a_few_kernels_are_their_own_category_under_pytorch(
    without_encoders: Path,
) -> None:
    import torch
    from torch import nn

    from mlsysopt import zoo
    from mlsysopt.costmodel.oracle.features import CATEGORIES, categories

    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder, x = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval(), torch.randn(1, 8, 16)
    shipped = LatencyOracle.load(None)
    assert "fused" in shipped.meta["categories"]  # the collection timed nn.TransformerEncoder models
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fused = shipped.predict_module(encoder, (x,), Setting("torch", 1, "seq", 1), "encoder")
    assert not fused.ood
    old = LatencyOracle.load(without_encoders)  # an oracle that never saw one: the PyTorch settings are outside
    with pytest.warns(MlsysoptWarning, match=r"no training model had: fused \(ops of nn.TransformerEncoderLayer"):
        outside = old.predict_module(encoder, (x,), Setting("torch", 1, "seq", 1), "encoder")
    hand_written, (tokens,) = zoo.get("transformer")  # its attention is written out: ordinary ops
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ONNX Runtime runs the exported ops: the usual categories, no warning
        ort = old.predict_module(encoder, (x,), Setting("onnxruntime", 1, "seq", 1), "encoder")
        plain = old.predict_module(hand_written, (tokens,), Setting("torch", 1, "seq", 1), "transformer")
    assert outside.ood and not ort.ood and not plain.ood
    assert outside.high / outside.low > 3 * (plain.high / plain.low)  # the interval widened each way
    from mlsysopt.costmodel.oracle.collect import read_onnx
    from mlsysopt.graph.importers.onnx import export_onnx

    ops, nodes, _ = read_onnx(export_onnx(encoder, (x,), Path(without_encoders) / "e.onnx", dynamic_batch=True))
    on_torch, on_ort = categories(ops, nodes, "torch"), categories(ops, nodes, "onnxruntime")
    inside = nodes[:, COLUMNS.index("fused")] > 0
    assert inside.sum() > 50 and (on_torch[inside] == CATEGORIES.index("fused")).all()
    assert not (on_ort == CATEGORIES.index("fused")).any() and (on_torch[~inside] == on_ort[~inside]).all()


def test_an_oracle_saved_with_another_category_set_is_refused_with_the_way_out() -> None:
    from mlsysopt.errors import InvalidCheckpoint

    d = {"name": "additive", "coef": {SETTINGS[0].key: [0.0] * 12}}
    with pytest.raises(InvalidCheckpoint, match="another op-category set .*latency-train"):
        from_dict(d)


def test_the_grid_of_a_model_outside_says_why_once_and_marks_its_settings(tmp_path: Path,
                                                                          without_encoders: Path) -> None:  # fmt: skip
    (tmp_path / "enc.py").write_text(_ENCODER_PY)
    ran = run_inprocess("costmodel", "latency", "./enc.py:model", "--grid", "--run", str(without_encoders),
                        cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    warned = [line for line in ran.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "no training model had: fused" in warned[0], ran.stderr  # once, not per setting
    rows = [line.split() for line in ran.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == len(SETTINGS) and "outside what it learned" in " ".join(ran.stdout.split())  # may wrap
    assert all((row[-1] == "*") == row[0].startswith("torch") for row in rows)  # the PyTorch settings, marked


def test_the_shipped_oracle_predicts_a_zoo_model_and_a_user_file(tmp_path: Path) -> None:
    from mlsysopt.costmodel.oracle.api import load_oracle

    oracle = load_oracle("builtin")
    assert oracle.meta["method"] in PREDICTORS and oracle.meta["trained_models"] >= 500
    # measured here: ONNX Runtime's parallel executor with 2 threads stalls GRUs (BENCHMARKS.md, issue #32)
    assert set(oracle.meta["stalls"]) == {"ort-t2-par-b1", "ort-t2-par-b8"}
    assert all(set(v) == {"gru"} and v["gru"][1] > 5 for v in oracle.meta["stalls"].values())
    ran = run_inprocess("costmodel", "latency", "zoo:cnn", "--json")
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["interval_ms"][0] <= out["predicted_ms"] <= out["interval_ms"][1] and out["oracle"] == "builtin"
    ran = run_inprocess("costmodel", "latency", "zoo:cnn", "--engine", "torch", "--batch", "8", "--measure")
    assert ran.returncode == 0 and "measured here" in ran.stdout, ran.stderr
    ran = run_inprocess("costmodel", "latency", "zoo:cnn", "--grid", "--json")
    grid = json.loads(ran.stdout)["settings"]
    assert len(grid) == len(SETTINGS) and [g["predicted_ms"] for g in grid] == sorted(g["predicted_ms"] for g in grid)


def test_latency_train_writes_an_oracle_the_commands_read(tiny: Path, tmp_path: Path) -> None:
    ran = run_inprocess("costmodel", "latency-train", "--data", tiny, "--out", tmp_path / "o", "--method", "flops")
    if "needs models in both" in ran.stderr:  # six models may leave the valid split empty: refused, one line
        assert_user_error(ran, "valid split")
        return
    assert ran.returncode == 0, ran.stderr
    assert "a re-measurement lands within +-10%" in " ".join(ran.stdout.split())  # its labels' repeatability
    ran = run_inprocess("costmodel", "latency", "zoo:cnn", "--run", tmp_path / "o", "--json")
    assert ran.returncode == 0 and json.loads(ran.stdout)["predicted_ms"] > 0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("zoo:cnn", "--engine", "torch", "--mode", "par"), "--mode par"),
        (("zoo:cnn", "--threads", "0"), "--threads"),
        (("zoo:cnn", "--run", "no/such/folder"), "no such oracle folder"),
        (("montage",), "not a recipe source"),
    ],
)
def test_costmodel_latency_bad_inputs_are_one_line(args: tuple[str, ...], match: str, tmp_path: Path) -> None:
    ran = run_inprocess("costmodel", "latency", *args, cwd=tmp_path)
    assert_user_error(ran, match)
    assert not list(tmp_path.iterdir())  # nothing written


def test_op_costs_give_the_cpu_device_the_oracles_times(tmp_path: Path) -> None:
    """A whole model on one CPU device simulates to the oracle's predicted latency; a GPU keeps its speed ratio."""
    from mlsysopt import zoo
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.importers.onnx import export_onnx

    module, inputs = zoo.get("cnn")
    onnx_path = export_onnx(module.eval(), inputs, tmp_path / "cnn.onnx", dynamic_batch=True)
    cluster = DeviceCluster([1e10, 1e12], [True, True], [[0, 1e9], [1e9, 0]], [[0, 1e-5], [1e-5, 0]],
                            names=["cpu0", "gpu0"], overhead=[5e-6, 5e-6])  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(cluster.to_dict()))
    ran = run_inprocess("costmodel", "latency", onnx_path, "--json")
    predicted_ms = json.loads(ran.stdout)["predicted_ms"]
    from mlsysopt.graph.importers.onnx import from_onnx

    n = from_onnx(onnx_path).num_nodes
    (tmp_path / "p.json").write_text(json.dumps([0] * n))
    ran = run_inprocess("graph", "simulate", onnx_path, "--cluster", tmp_path / "c.json", "--placement",
                        tmp_path / "p.json", "--op-costs", "builtin", "--out", tmp_path / "sim")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads((tmp_path / "sim" / "result.json").read_text())
    assert result["op_costs"]["device"] == "cpu0"
    assert result["makespan"] * 1e3 == pytest.approx(predicted_ms, rel=0.02)  # one device: the ops back to back
    bad = run_inprocess("graph", "simulate", "zoo:cnn", "--cluster", tmp_path / "c.json", "--random", "--op-costs",
                        "builtin", "--out", tmp_path / "sim2")  # fmt: skip
    assert_user_error(bad, "--op-costs needs a graph read from an .onnx file")
    bad = run_inprocess("graph", "simulate", onnx_path, "--cluster", tmp_path / "c.json", "--random", "--op-costs",
                        "builtin", "--op-costs-device", "tpu9", "--out", tmp_path / "sim3")  # fmt: skip
    assert_user_error(bad, "--op-costs-device 'tpu9'")
    assert not (tmp_path / "sim2").exists() and not (tmp_path / "sim3").exists()


def test_nas_and_serving_take_the_builtin_oracle(tmp_path: Path) -> None:
    """``--latency-model builtin`` predicts latency_ms (the interval's upper end) and times the final candidates;
    ``--cost-model builtin`` shortlists ONNX Runtime's op-level settings."""
    from mlsysopt.serving.cost_model import op_level_shortlist
    from mlsysopt.serving.model import export_zoo_onnx
    from mlsysopt.serving.space import Space

    ran = run_inprocess("nas", "search", "--space", "digits", "--method", "random", "--budget", "2", "--epochs", "1",
                        "--max-blocks", "1", "--max-latency-ms", "1000", "--latency-model", "builtin",
                        "--out", tmp_path / "nas")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    conf = json.loads((tmp_path / "nas" / "result.json").read_text())["latency_confirmation"]
    assert conf["latency_model"] == "builtin" and conf["confirmed_best"] is not None
    onnx = export_zoo_onnx("cnn", tmp_path / "cnn.onnx")
    short = op_level_shortlist("builtin", onnx, Space.for_machine(2), 2)
    assert short.run == "builtin" and len(short.predicted) == 4 and all(ms > 0 for *_, ms in short.predicted)
    assert short.default in short.kept


def test_the_encoder_family_is_the_vit_family_built_from_nn_transformer_encoder(tmp_path: Path) -> None:
    from mlsysopt.costmodel.oracle.collect import graph_arrays
    from mlsysopt.costmodel.oracle.families import build, mflops, plan
    from mlsysopt.graph.importers.onnx import export_onnx

    vit = {"family": "vit", "size": 16, "patch": 4, "heads": 2, "dim": 32, "depth": 2, "ratio": 2}
    enc = vit | {"family": "encoder", "act": "gelu", "norm_first": True}
    assert mflops(enc) == pytest.approx(mflops(vit), rel=1e-9)  # the same FLOPs, attention's projections counted
    fused = []
    for spec in (vit, enc):
        module, x = build(spec)
        arrays = graph_arrays(export_onnx(module, (x,), tmp_path / f"{spec['family']}.onnx", dynamic_batch=True))
        fused.append(int(arrays["nodes"][:, -1].sum()))
    assert fused[0] == 0 and fused[1] > 100
    assert {s["family"] for s in plan(11, 0)} == {*FAMILIES}


def test_repeatability_scores_each_round_against_the_median_of_the_others() -> None:
    from mlsysopt.costmodel.oracle.evaluate import repeatability

    models = synthetic_models(4, 0)
    s, t = SETTINGS[0], SETTINGS[1]
    # model 0: one round 30% slow, so every round misses (1.0 against the others' median 1.15, 1.3 against 1.0);
    # the other three reproduce to 2%
    for i, m in enumerate(models):
        m.rounds = {s.key: [1.0, 1.0, 1.3] if i == 0 else [1.0, 1.02, 0.99], t.key: [1.0, 1.25 if i == 0 else 1.05]}
    out = repeatability(models, [s, t])  # t: two rounds, each against the other; model 0's differ by 25%
    assert out["by_setting"] == {s.key: pytest.approx(9 / 12), t.key: pytest.approx(6 / 8)} and out["pairs"] == 20
    assert out["within10"] == pytest.approx(15 / 20)
    models[0].rounds = {s.key: [1.0]}  # one round: nothing to compare it with
    assert repeatability(models[:1], [s])["pairs"] == 0
