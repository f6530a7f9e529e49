"""Policy checkpoints: atomic round trip, and clear IncompatibleCheckpoint errors for files this build cannot use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.generate import layered_dag, random_cluster
from mlsysopt.graph.placement import random_placement
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement.checkpoint import IncompatibleCheckpoint, load_checkpoint, load_policy, save_checkpoint
from mlsysopt.placement.giph import GiPH
from mlsysopt.placement.gpnet import EDGE_DIM, NODE_DIM, GpNet, GpNetBuilder
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gpnet(seed: int = 1) -> GpNet:
    g = layered_dag(12, alpha=0.3, p=0.3, num_types=3, seed=seed)
    c = random_cluster(4, num_types=3, seed=seed)
    pl = random_placement(g, c, np.random.default_rng(seed))
    return GpNetBuilder(g, c).build(pl, Simulator(g, c).run(pl))


def policy(hidden: int = 12, seed: int = 3) -> GiPHPolicy:
    torch.manual_seed(seed)
    return GiPHPolicy(PolicyConfig(hidden=hidden)).eval()


def good_config(**kw) -> dict:
    return {**PolicyConfig(hidden=8).to_dict(), **kw}


def test_round_trip_gives_identical_logits(tmp_path) -> None:
    pol = policy()
    path = save_checkpoint(tmp_path / "nested" / "dir" / "p.pt", pol, note="hello", update=4)
    assert path == tmp_path / "nested" / "dir" / "p.pt" and path.is_file()
    assert [p.name for p in path.parent.iterdir()] == ["p.pt"]  # written atomically: no temp file left
    loaded = load_policy(path)
    assert isinstance(loaded, GiPHPolicy) and not loaded.training
    assert loaded.config == pol.config == PolicyConfig(NODE_DIM, EDGE_DIM, 12)
    gp = gpnet()
    with torch.no_grad():
        torch.testing.assert_close(loaded(gp), pol(gp), rtol=0, atol=0)
    for (k, a), (k2, b) in zip(pol.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(a, b)
    data = load_checkpoint(path)
    assert data["kind"] == "giph-policy" and data["note"] == "hello" and data["update"] == 4
    assert data["config"] == {"node_dim": NODE_DIM, "edge_dim": EDGE_DIM, "hidden": 12, "kinds": 1}
    # a str path works as well, and GiPH.load uses the same loader
    assert load_policy(str(path)).config.hidden == 12
    assert GiPH.load(path, greedy=True).greedy is True


def test_a_different_policy_gives_different_logits(tmp_path) -> None:
    # the round trip test above would be vacuous if every policy scored alike
    gp = gpnet()
    a = load_policy(save_checkpoint(tmp_path / "a.pt", policy(seed=1)))
    b = load_policy(save_checkpoint(tmp_path / "b.pt", policy(seed=2)))
    with torch.no_grad():
        la, lb = a(gp), b(gp)
    finite = torch.isfinite(la)
    assert not torch.equal(la[finite], lb[finite])


def test_overwrite_replaces_the_file(tmp_path) -> None:
    path = tmp_path / "p.pt"
    save_checkpoint(path, policy(hidden=12))
    save_checkpoint(path, policy(hidden=20))
    assert load_policy(path).config.hidden == 20
    assert [p.name for p in tmp_path.iterdir()] == ["p.pt"]


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "absent.pt"
    with pytest.raises(IncompatibleCheckpoint, match="no such checkpoint") as info:
        load_policy(path)
    assert str(path) in str(info.value)
    with pytest.raises(IncompatibleCheckpoint):
        load_checkpoint(tmp_path)  # a directory is not a checkpoint file
    assert issubclass(IncompatibleCheckpoint, MlsysoptError)


@pytest.mark.parametrize("content", [b"this is not a torch file\n", b"", b"PK\x03\x04garbage"])
def test_garbage_file(tmp_path, content: bytes) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(content)
    with pytest.raises(IncompatibleCheckpoint, match="not a readable checkpoint") as info:
        load_policy(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("obj", [{"kind": "other", "config": {}}, {"config": {}}, [1, 2, 3], {"a": torch.ones(2)}])
def test_not_a_giph_checkpoint(tmp_path, obj) -> None:
    path = tmp_path / "foreign.pt"
    torch.save(obj, path)
    with pytest.raises(IncompatibleCheckpoint, match="not a GiPH policy checkpoint") as info:
        load_policy(path)
    assert str(path) in str(info.value)


def test_pickled_objects_are_refused(tmp_path) -> None:
    # weights_only loading: an arbitrary pickled object is not executed, the file is just unreadable
    path = tmp_path / "evil.pt"
    torch.save({"kind": "giph-policy", "config": PolicyConfig()}, path)
    with pytest.raises(IncompatibleCheckpoint, match="not a readable checkpoint"):
        load_checkpoint(path)


def test_other_feature_sizes(tmp_path) -> None:
    path = tmp_path / "old.pt"
    torch.save(
        {"kind": "giph-policy", "config": {"node_dim": 7, "edge_dim": EDGE_DIM, "hidden": 8}, "policy": {}}, path
    )
    with pytest.raises(IncompatibleCheckpoint) as info:
        load_policy(path)
    msg = str(info.value)
    assert str(path) in msg
    assert f"7 node / {EDGE_DIM} edge features" in msg
    assert f"{NODE_DIM} / {EDGE_DIM}" in msg
    assert "retrain" in msg


def test_other_edge_feature_size_and_missing_config(tmp_path) -> None:
    path = tmp_path / "old.pt"
    torch.save({"kind": "giph-policy", "config": {"node_dim": NODE_DIM, "edge_dim": EDGE_DIM + 2}}, path)
    with pytest.raises(IncompatibleCheckpoint, match=f"{EDGE_DIM + 2} edge features"):
        load_checkpoint(path)
    torch.save({"kind": "giph-policy"}, path)
    with pytest.raises(IncompatibleCheckpoint, match="None node / None edge"):
        load_checkpoint(path)


def test_weights_that_do_not_fit(tmp_path) -> None:
    path = tmp_path / "bad.pt"
    state = policy(hidden=12).state_dict()
    torch.save({"kind": "giph-policy", "config": good_config(hidden=16), "policy": state}, path)
    with pytest.raises(IncompatibleCheckpoint, match="weights do not fit") as info:
        load_policy(path)
    assert str(path) in str(info.value)
    torch.save({"kind": "giph-policy", "config": good_config(), "policy": {}}, path)
    with pytest.raises(IncompatibleCheckpoint, match="weights do not fit"):
        load_policy(path)


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "giph-policy", "config": good_config(layers=2), "policy": {}},
        {"kind": "giph-policy", "config": [NODE_DIM, EDGE_DIM], "policy": {}},
        {"kind": "giph-policy", "config": good_config()},
    ],
    ids=["unknown-config-key", "config-not-a-dict", "no-policy-entry"],
)
def test_malformed_giph_checkpoint_is_incompatible(tmp_path, data: dict) -> None:
    path = tmp_path / "odd.pt"
    torch.save(data, path)
    with pytest.raises(IncompatibleCheckpoint):
        load_policy(path)
