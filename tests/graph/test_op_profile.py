"""The device model by op group (issue #31 item 4): rows per node, the fit, the profile file, and its use as
``--op-costs FILE.json`` by ``placement calibrate``, ``placement place`` and ``graph simulate``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.calibrate import calibrate
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import layered_dag
from mlsysopt.graph.importers.expansion import recurrent_size
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.op_profile import (
    PARAMETERS,
    OpProfile,
    check_profile_out,
    design,
    fit_coefficients,
    load_profile,
    with_op_profile,
)
from mlsysopt.graph.problem import PlacementProblem

pytestmark = pytest.mark.usefixtures("one_torch_thread")
COL = {name: i for i, name in enumerate(PARAMETERS)}


class Net(nn.Module):
    """A depthwise and a dense convolution, a GRU over 4 steps and a 1-layer encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pw = nn.Conv2d(4, 8, 1)
        self.gru = nn.GRU(8, 8, batch_first=True)
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw(self.dw(x)).flatten(2).transpose(1, 2)  # (1, 4, 8): 4 tokens of 8
        y, _ = self.gru(y)
        return self.enc(y)


def net_graph(expand: bool = True) -> object:
    torch.manual_seed(0)
    return from_module(Net().eval(), (torch.randn(1, 4, 2, 2),), name="net", expand_layers=expand)


def unit_profile() -> OpProfile:
    return OpProfile({k: 1e-6 * (1 + i) for i, k in enumerate(PARAMETERS)})


def test_rows_price_each_node_by_its_group_and_expanded_layers_by_their_ops() -> None:
    g = net_graph()
    rows = design(g)
    names = list(g.names)
    assert rows[names.index("dw"), COL["depthwise.fixed"]] == 1 and rows[names.index("pw"), COL["conv.fixed"]] == 1
    assert rows[names.index("dw"), COL["depthwise.per_flop"]] == g.x[names.index("dw"), g.feature_names.index("flops")]
    gru = next(e for e in g.meta["expanded"] if e["kind"] == "recurrent")
    enc = next(e for e in g.meta["expanded"] if e["kind"] == "transformer")
    assert gru["stop"] - gru["start"] == recurrent_size("gru", 4) and enc["stop"] - enc["start"] == 7
    for e in (gru, enc):  # inside one C++ call: the inner cost, never a group's fixed one; one layer cost each
        block = rows[e["start"] : e["stop"]]
        assert (block[:, COL["inner"]] == 1).all()
        assert block[:, [COL[f"{grp}.fixed"] for grp in ("linear", "eltwise", "act", "norm", "attention")]].sum() == 0
        assert block[:, COL[f"layer.{e['kind']}"]].sum() == 1 and e["layer_starts"] == [e["start"]]
    inputs = [i for i, op in enumerate(g.ops) if op in ("input", "output")]
    assert not rows[inputs].any()  # inputs and outputs cost nothing


def test_an_lstm_pays_its_set_up_per_layer_and_direction() -> None:
    """An nn.LSTM stays one node (one fused op per layer and direction on a CPU): its fixed cost counts those."""

    class LSTMNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(4, 8, num_layers=2, bidirectional=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x)[0]

    g = from_module(LSTMNet().eval(), (torch.randn(5, 1, 4),), name="lstm")
    v = list(g.names).index("lstm")
    assert g.meta["lstm_layers"] == [[v, 4]]
    rows = design(g)
    assert rows[v, COL["lstm.fixed"]] == 4 and rows[v, COL["lstm.per_flop"]] == g.x[v, g.feature_names.index("flops")]


def test_a_layer_kept_whole_pays_what_its_ops_would() -> None:
    """``placement place`` keeps a GRU one node: it pays the same layer and inner counts as the unrolled ops."""
    whole, unrolled = design(net_graph(expand=False)), design(net_graph())
    for col in ("inner", "layer.recurrent", "layer.transformer"):
        assert whole[:, COL[col]].sum() == unrolled[:, COL[col]].sum(), col


@pytest.mark.parametrize(
    "meta",
    [
        {"expanded": [{"start": 0, "stop": 10**6, "kind": "recurrent"}]},
        {"expanded": [{"start": 0, "stop": 3, "kind": "gpu"}]},
        {"expanded": [{"stop": 3}]},
        {"lstm_layers": [[1]]},
        {"kept_whole": ["gru"]},
    ],
)
def test_a_graph_file_with_odd_layer_meta_is_one_line(meta: dict) -> None:
    g = net_graph()
    g.meta.update(meta)
    with pytest.raises(InvalidOption, match="its meta .* is not what the importer writes"):
        design(g)


def test_the_fit_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(0)
    truth = np.where(rng.random(len(PARAMETERS)) < 0.7, rng.uniform(1e-6, 5e-5, len(PARAMETERS)), 0.0)
    scale = np.array([1.0 if n.endswith(("fixed",)) or n.startswith(("inner", "layer")) else 1e-5 for n in PARAMETERS])
    truth = truth * scale
    rows = rng.integers(0, 3, (200, len(PARAMETERS))) * np.where(scale < 1, rng.uniform(1e3, 1e6), 1.0)
    coef = fit_coefficients(rows, rows @ truth + 1e-9)
    np.testing.assert_allclose(rows @ coef, rows @ truth, rtol=1e-3)
    assert (coef >= 0).all()


def test_one_device_runs_the_graph_for_its_profiled_time() -> None:
    g = net_graph()
    profile = unit_profile()
    cluster = DeviceCluster([1e9, 1e11], [True, True], [[0, 1e9], [1e9, 0]], [[0, 1e-5], [1e-5, 0]],
                            names=["cpu0", "gpu0"], overhead=[5e-6, 2e-6])  # fmt: skip
    new, costed, total = with_op_profile(g, cluster, profile, 0)
    assert costed.overhead.tolist() == [0.0, 2e-6]
    assert total == pytest.approx(profile.seconds(g).sum())
    on_cpu = PlacementProblem(new, costed).makespan(np.zeros(new.num_nodes, np.int64))
    assert on_cpu == pytest.approx(total, rel=1e-9)  # one device: every op back to back


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.pop("format"), "not an op profile"),
        (lambda d: d["coefficients"].pop("conv.fixed"), "missing conv.fixed"),
        (lambda d: d["coefficients"].update({"gpu.fixed": 1.0}), "unknown gpu.fixed"),
        (lambda d: d["coefficients"].update({"linear.per_flop": -1.0}), "linear.per_flop = -1.0"),
        (lambda d: d["coefficients"].update({"inner": True}), "inner = True"),
        (lambda d: d.update(coefficients=[1, 2]), "'coefficients' is not an object"),
    ],
)
def test_a_bad_profile_file_is_one_line_naming_the_file_and_key(tmp_path: Path, edit: object, match: str) -> None:
    data = unit_profile().to_dict()
    edit(data)  # type: ignore[operator]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidOption, match=match) as e:
        load_profile(path)
    assert str(path) in str(e.value)


def test_profile_paths_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidOption, match="no such file"):
        load_profile(tmp_path / "missing.json")
    with pytest.raises(InvalidOption, match="is a .json file"):
        check_profile_out(tmp_path / "p.txt")
    (tmp_path / "d.json").mkdir()
    with pytest.raises(InvalidOption, match="is a folder"):
        check_profile_out(tmp_path / "d.json")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidOption, match="parent of it is a file"):
        check_profile_out(tmp_path / "f" / "p.json")
    with pytest.raises(InvalidOption, match="is synthetic, not a model imported"):
        design(layered_dag(10, seed=0))  # a synthetic DAG has no DNN features


def test_calibrate_fits_every_kernel_and_refuses_bad_options() -> None:
    profile = calibrate(threads=1, reps=5)
    assert len(profile.meta["kernels"]) >= 50 and profile.meta["threads"] == 1
    assert all(np.isfinite(v) and v >= 0 for v in profile.coefficients.values())
    assert 0.5 < profile.meta["fit"]["median_ratio"] < 2.0
    for kwargs, match in (({"threads": 0}, "--threads 0"), ({"reps": 2}, "--reps 2"), ({"threads": True}, "--threads")):
        with pytest.raises(InvalidOption, match=match):
            calibrate(**kwargs)  # type: ignore[arg-type]


def test_calibrate_then_place_and_simulate_with_the_profile(tmp_path: Path) -> None:
    ran = run_inprocess("placement", "calibrate", "--out", tmp_path / "cpu.json", "--reps", "5")
    assert ran.returncode == 0, ran.stderr
    assert "micro-kernels" in ran.stdout and "--op-costs" in ran.stdout
    cluster = DeviceCluster([1e10, 1e12], [True, True], [[0, 1e9], [1e9, 0]], [[0, 1e-5], [1e-5, 0]],
                            names=["cpu0", "gpu0"], overhead=[5e-6, 5e-6])  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(cluster.to_dict()))
    ran = run_inprocess("placement", "place", "zoo:cnn", "--cluster", tmp_path / "c.json", "--op-costs",
                        tmp_path / "cpu.json", "--budget", "20", "--out", tmp_path / "p")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads((tmp_path / "p" / "result.json").read_text())
    assert result["op_costs"]["device"] == "cpu0" and result["op_costs"]["setting"].startswith("op profile")
    profile = load_profile(tmp_path / "cpu.json")
    from mlsysopt import zoo

    module, inputs = zoo.get("cnn")
    g = from_module(module.eval(), inputs, name="cnn")
    (tmp_path / "zeros.json").write_text(json.dumps([0] * g.num_nodes))
    costs = ("--op-costs", tmp_path / "cpu.json")
    ran = run_inprocess("graph", "simulate", "zoo:cnn", "--cluster", tmp_path / "c.json", "--placement",
                        tmp_path / "zeros.json", *costs, "--out", tmp_path / "s")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    sim = json.loads((tmp_path / "s" / "result.json").read_text())
    assert sim["makespan"] == pytest.approx(profile.seconds(g).sum(), rel=1e-6)
    bad = run_inprocess("placement", "calibrate", "--out", tmp_path / "cpu.txt")
    assert_user_error(bad, "--out", "is a .json file")
    bad = run_inprocess("placement", "place", "zoo:cnn", "--cluster", tmp_path / "c.json", "--op-costs",
                        tmp_path / "nope.json", "--out", tmp_path / "p2")  # fmt: skip
    assert_user_error(bad, "nope.json", "no such file")
    assert not (tmp_path / "p2").exists() and not (tmp_path / "cpu.txt").exists()
