"""The additive MLP latency predictor: a per-node time learned from whole-model times, its node rows, its seed, its
per-op split and its checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
from latency_fakes import synthetic_models

from mlsysopt.costmodel.oracle.additive_mlp import NODE_FEATURES, AdditiveMLP, node_rows, unique_rows
from mlsysopt.costmodel.oracle.dataset import COLUMNS
from mlsysopt.costmodel.oracle.oracle import LatencyOracle
from mlsysopt.costmodel.oracle.predictors import from_dict
from mlsysopt.costmodel.oracle.settings import SETTINGS, Setting
from mlsysopt.errors import InvalidCheckpoint, InvalidDataset

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fitted() -> AdditiveMLP:
    return AdditiveMLP(seed=0, epochs=150).fit(synthetic_models(60, 1, (1e5, 1e8)), list(SETTINGS))


def test_it_learns_an_additive_latency_from_whole_model_times(fitted: AdditiveMLP) -> None:
    held = synthetic_models(30, 7, (1e5, 1e8))  # models it never saw, of other depths and sizes
    ratios = np.concatenate([fitted.predict_models(held, s) / [m.ms[s.key] for m in held] for s in SETTINGS])
    assert np.mean(np.abs(ratios - 1) <= 0.10) >= 0.90, np.quantile(ratios, [0.05, 0.5, 0.95])


def test_the_per_op_times_sum_to_the_prediction_and_feed_the_simulator(fitted: AdditiveMLP) -> None:
    m = synthetic_models(1, 3)[0]
    s = Setting("onnxruntime", 1, "seq", 1)
    parts = fitted.per_op(m.ops, m.nodes, s, m.edges)
    assert parts.shape == (len(m.ops),) and np.all(parts > 0)
    assert parts.sum() == pytest.approx(fitted.predict(m.ops, m.nodes, s, m.edges))
    lin = m.ops == "linear"  # the FLOPs are in the linear layers: they get most of the time
    assert parts[lin].sum() > parts[~lin].sum()
    oracle = LatencyOracle.fit(AdditiveMLP(epochs=5), synthetic_models(20, 1), synthetic_models(5, 2), list(SETTINGS))
    own = oracle.predictor.per_op(m.ops, m.nodes, s, m.edges)  # type: ignore[attr-defined]
    assert np.allclose(oracle.per_op_ms(m.ops, m.nodes, s, m.edges), own, rtol=1e-9)  # its own split, not FLOPs


def test_an_op_no_training_model_had_is_priced_like_its_neighbours(fitted: AdditiveMLP) -> None:
    ratios = []
    for m in synthetic_models(10, 10, (1e5, 1e8)):
        ops = m.ops.copy()
        ops[ops == "linear"] = "embedding"  # its op column never varied in training: not scaled by a ~0 spread
        ratios += [fitted.predict(ops, m.nodes, s, m.edges) / fitted.predict(m.ops, m.nodes, s, m.edges)
                   for s in SETTINGS]  # fmt: skip
    assert min(ratios) > 0.67 and max(ratios) < 1.5, (min(ratios), max(ratios))  # scaled by 1e-6: 0.011


def test_the_seed_decides_the_model() -> None:
    models, s = synthetic_models(20, 4), SETTINGS[3]
    a, b, c = (AdditiveMLP(seed=k, epochs=5).fit(models, list(SETTINGS)) for k in (0, 0, 1))
    assert np.array_equal(a.predict_models(models, s), b.predict_models(models, s))
    assert not np.allclose(a.predict_models(models, s), c.predict_models(models, s))


def test_node_rows_carry_the_ops_around_each_node() -> None:
    ops = np.array(["input", "conv", "relu", "add", "output"])
    nodes = np.zeros((5, len(COLUMNS)))
    nodes[:, COLUMNS.index("groups")] = nodes[:, COLUMNS.index("kernel_area")] = 1
    nodes[1, COLUMNS.index("kernel_area")] = 9
    nodes[1, COLUMNS.index("flops")] = 1e6
    edges = np.array([[0, 1, 2, 0, 3], [1, 2, 3, 3, 4]])  # a residual: input feeds the conv and the add
    x = node_rows(ops, nodes, edges, batch=8)
    col = {n: i for i, n in enumerate(NODE_FEATURES)}
    assert x.shape == (5, len(NODE_FEATURES))
    assert x[2, col["producer_conv_kxk"]] == 1 and x[2, col["consumer_arith"]] == 1 and x[2, col["op_relu"]] == 1
    assert x[3, col["log_in_degree"]] == pytest.approx(np.log(3))  # two inputs
    assert x[1, col["log_flops"]] == pytest.approx(np.log1p(8e6))  # FLOPs at the batch
    alone = node_rows(ops, nodes, None, batch=8)  # without edges the context is empty, the rest the same
    context = [col[n] for n in NODE_FEATURES if n.startswith(("producer_", "consumer_", "log_in_", "log_out_d"))]
    assert not alone[:, context].any()
    rest = [i for i in range(len(NODE_FEATURES)) if i not in context]
    assert np.array_equal(alone[:, rest], x[:, rest])


def test_a_setting_it_was_not_trained_on_uses_the_nearest_one(fitted: AdditiveMLP) -> None:
    trained = [s for s in SETTINGS if s.batch == 1]
    p = AdditiveMLP(seed=0, epochs=3).fit(synthetic_models(10, 5), trained)
    m = synthetic_models(1, 6)[0]
    b4 = Setting("onnxruntime", 1, "seq", 4)  # batch 4: no head of its own, batch 1's head on batch-4 sizes
    assert p.predict(m.ops, m.nodes, b4, m.edges) > 0


def test_bad_data_and_foreign_checkpoints_are_refused_in_one_line(fitted: AdditiveMLP) -> None:
    untimed = synthetic_models(3, 8)
    for m in untimed:
        m.ms = {}
    with pytest.raises(InvalidDataset, match="no model has a time"):
        AdditiveMLP(epochs=1).fit(untimed, list(SETTINGS))
    d = json.loads(json.dumps(fitted.to_dict()))
    assert np.allclose(from_dict(d).predict_models(synthetic_models(3, 9), SETTINGS[0]),
                       fitted.predict_models(synthetic_models(3, 9), SETTINGS[0]), rtol=1e-6)  # fmt: skip
    with pytest.raises(InvalidCheckpoint, match="node features"):
        from_dict(d | {"features": d["features"][:-1]})
    with pytest.raises(InvalidCheckpoint, match="output heads"):
        from_dict(d | {"keys": d["keys"][:-1]})


def test_unique_rows_is_numpys_unique_up_to_order() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, (500, 6)).astype(np.float32)  # 3^6 = 729 possible rows: many repeats
    unique, row_of = unique_rows(x)
    expected = np.unique(x, axis=0)
    assert len(unique) == len(expected)
    assert (unique[row_of] == x).all()
    assert {tuple(r) for r in unique} == {tuple(r) for r in expected}
