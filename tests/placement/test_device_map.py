"""device_map.json: every fx node and weight-owning module of a real PyTorch model mapped, applied to move it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from mlsysopt.errors import ImportFailed, InvalidPlacement
from mlsysopt.graph.generate import cluster_for
from mlsysopt.graph.importers.torch_fx import from_module
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement import HEFT
from mlsysopt.placement.devicemap import FORMAT, apply_device_map, device_map, move, node_owners

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Block(nn.Module):
    """conv -> relu, plus the input (a residual add owned by the block, not by a called module)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x)) + x


class Net(nn.Module):
    """Two residual blocks, a parameter read directly by the root (get_attr), a buffer, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(4), Block(4))
        self.scale = nn.Parameter(torch.ones(1, 4, 1, 1) * 0.5)
        self.register_buffer("shift", torch.full((1, 4, 1, 1), 0.1))
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(x) * self.scale + self.shift
        return self.fc(y.mean((2, 3)))


@pytest.fixture()
def placed() -> tuple[Net, torch.Tensor, dict]:
    """The net, an input, and the device map of a random 3-device placement (JSON round-tripped)."""
    torch.manual_seed(0)
    net, x = Net().eval(), torch.randn(2, 4, 8, 8)
    graph = from_module(net, (x,), name="net")
    cluster = cluster_for(graph, 3, seed=0)
    problem = PlacementProblem(graph, cluster)
    placement = problem.random_placement(np.random.default_rng(1))
    dmap = device_map(graph, cluster, placement, node_owners(net), source="test:net")
    return net, x, json.loads(json.dumps(dmap))


def test_every_node_and_weight_owner_is_mapped(placed: tuple[Net, torch.Tensor, dict]) -> None:
    net, _, dmap = placed
    assert dmap["format"] == FORMAT and dmap["source"] == "test:net" and dmap["devices"] == ["dev0", "dev1", "dev2"]
    traced = [n.name for n in torch.fx.symbolic_trace(net).graph.nodes]
    assert list(dmap["nodes"]) == traced
    assert dmap["nodes"]["blocks_0_conv"]["module"] == "blocks.0.conv"
    assert dmap["nodes"]["add"]["module"] == "blocks.0"  # the residual add inside Block.forward
    assert dmap["nodes"]["x"]["module"] == ""  # the model's input belongs to the root
    called = {"blocks.0.conv", "blocks.0.act", "blocks.1.conv", "blocks.1.act", "fc"}
    assert set(dmap["modules"]) == called | {""}  # "" owns the get_attr'ed scale and shift
    for name, info in dmap["nodes"].items():
        assert info["device"] in dmap["devices"], name
    assert dmap["modules"]["fc"] == dmap["nodes"]["fc"]["device"]
    assert dmap["shared_modules"] == {} or set(dmap["shared_modules"]) <= {""}


def test_applying_moves_each_submodule_to_its_device(placed: tuple[Net, torch.Tensor, dict]) -> None:
    net, _, dmap = placed
    # "meta" stands in for a second accelerator: weights really move there (no data), CPU ones stay
    where = {"dev0": "cpu", "dev1": "meta", "dev2": "cpu"}
    apply_device_map(net, dmap, where)
    for qualname, device in dmap["modules"].items():
        owner = net.get_submodule(qualname)
        for tensor in [*owner.parameters(recurse=False), *owner.buffers(recurse=False)]:
            if qualname == "" and tensor is net.shift:
                continue  # a buffer is moved on the GraphModule returned (registered anew there)
            assert tensor.device.type == where[device], (qualname, device)
    on_meta = {q for q, d in dmap["modules"].items() if d == "dev1"}
    assert on_meta, "the random placement put no module on dev1"


def test_the_applied_model_runs_split_and_gives_the_same_output(placed: tuple[Net, torch.Tensor, dict]) -> None:
    net, x, dmap = placed
    expected = net(x)
    moved = apply_device_map(net, dmap, {"dev0": "cpu", "dev1": torch.device("cpu"), "dev2": "cpu"})
    computing = [n for n in moved.graph.nodes if n.op.startswith("call_") and n.target is not move]
    assert [n.name for n in computing] == [
        n.name for n in torch.fx.symbolic_trace(net).graph.nodes if n.op[:5] == "call_"
    ]
    for node in computing:  # every input of a computing node arrives through a transfer to that node's device
        for arg in node.all_input_nodes:
            assert arg.op == "call_function" and arg.target is move, (node.name, arg.name)
    assert torch.equal(moved(x), expected)


def test_heft_device_map_of_the_zoo_cnn_applies() -> None:
    from mlsysopt import zoo

    cnn, inputs = zoo.get("cnn")
    graph = from_module(cnn, inputs, name="cnn")
    cluster = cluster_for(graph, 4, seed=2)
    res = HEFT().place(graph, cluster)
    dmap = device_map(graph, cluster, res.placement, node_owners(cnn))
    assert len(dmap["nodes"]) == graph.num_nodes
    assert {m for m, _ in cnn.named_modules() if list(m and cnn.get_submodule(m).parameters(recurse=False))} <= set(
        dmap["modules"]
    )
    out = apply_device_map(cnn, dmap, dict.fromkeys(cluster.names, "cpu"))(*inputs)
    assert torch.equal(out, cnn(*inputs))


def test_bad_maps_and_models_are_clear_errors(placed: tuple[Net, torch.Tensor, dict]) -> None:
    net, _, dmap = placed
    with pytest.raises(InvalidPlacement, match="no torch device given for dev"):
        apply_device_map(net, dmap, {"dev0": "cpu"})
    with pytest.raises(InvalidPlacement, match="format"):
        apply_device_map(net, {**dmap, "format": "other"}, dict.fromkeys(dmap["devices"], "cpu"))
    with pytest.raises(InvalidPlacement, match="does not match"):
        apply_device_map(nn.Sequential(nn.Linear(4, 4)), dmap, dict.fromkeys(dmap["devices"], "cpu"))
    other = from_module(nn.Sequential(nn.Linear(4, 4)), (torch.randn(1, 4),))
    cluster = cluster_for(other, 2, seed=0)
    with pytest.raises(InvalidPlacement, match="not this model's fx graph"):
        device_map(other, cluster, np.zeros(other.num_nodes, dtype=np.int64), node_owners(net))

    class Untraceable(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x  # data-dependent control flow

    with pytest.raises(ImportFailed, match="torch.fx cannot trace Untraceable"):
        node_owners(Untraceable())
