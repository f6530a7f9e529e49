"""Historical embedding table: keyed storage, detached copies, missing rows, growth, ages, checkpoints, speed."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

from mlsysopt.costmodel.history import HistoryTable
from mlsysopt.errors import InvalidCheckpoint, InvalidOption


def test_put_get_by_graph_config_segment_with_missing_rows_zero() -> None:
    t = HistoryTable(3)
    t.put("a", [5, 9], 2, torch.tensor([[1.0, 1, 1], [2, 2, 2]]))
    t.put("b", [5], 0, torch.tensor([[7.0, 7, 7]]))
    emb, present = t.get("a", [9, 5, 1], [2, 0, 40])
    assert emb.shape == (3, 3, 3) and present.shape == (3, 3) and emb.dtype == torch.float32
    assert present.tolist() == [[True, False, False], [True, False, False], [False, False, False]]
    assert emb[0, 0].tolist() == [2.0, 2.0, 2.0] and emb[1, 0].tolist() == [1.0, 1.0, 1.0]
    assert float(emb[~present].abs().sum()) == 0.0
    e, p = t.get("unknown", [0, 1], [0])
    assert e.shape == (2, 1, 3) and not p.any() and float(e.abs().sum()) == 0.0
    assert t.get("b", [5], [0])[0][0, 0].tolist() == [7.0, 7.0, 7.0]  # graphs do not share rows
    assert sorted(t.graphs) == ["a", "b"] and "a" in t and len(t) == 2 and t.num_entries() == 3


def test_entries_are_detached_host_copies() -> None:
    t = HistoryTable(2)
    w = torch.ones(1, 2, requires_grad=True)
    src = w * 3
    t.put("g", [0], 0, src)
    src.data.fill_(-1.0)  # the caller reusing its buffer must not change the table
    out, _ = t.get("g", [0], [0])
    assert out.tolist() == [[[3.0, 3.0]]] and not out.requires_grad and out.device.type == "cpu"
    out.fill_(0.0)  # nor may the caller's result alias the table
    assert t.get("g", [0], [0])[0].tolist() == [[[3.0, 3.0]]]
    t.put("g", [1], 0, np.array([[1, 2]], dtype=np.float64))  # numpy input, stored as float32
    assert t.get("g", [1], [0])[0].dtype == torch.float32


def test_overwrite_repeated_configs_and_bulk_segments() -> None:
    t = HistoryTable(1)
    t.put("g", [3, 3], 0, torch.tensor([[1.0], [2.0]]))  # last write wins
    assert t.get("g", [3], [0])[0].item() == 2.0
    t.put("g", [3, 4], [1, 2, 0], torch.arange(6.0).reshape(2, 3, 1))  # (C, S, dim) for several segments
    emb, present = t.get("g", [4, 3], [0, 1, 2])
    assert present.all()
    assert emb[..., 0].tolist() == [[5.0, 3.0, 4.0], [2.0, 0.0, 1.0]]


def test_growth_keeps_earlier_entries_and_reserve() -> None:
    t = HistoryTable(4)
    rng = np.random.default_rng(0)
    ref = {}
    for _ in range(200):
        cfg = int(rng.integers(0, 1000))
        seg = int(rng.integers(0, 60))
        v = torch.from_numpy(rng.normal(size=(1, 4)).astype(np.float32))
        t.put("g", [cfg], seg, v)
        ref[(cfg, seg)] = v[0]
    for (cfg, seg), v in ref.items():
        emb, present = t.get("g", [cfg], [seg])
        assert present.item() and torch.equal(emb[0, 0], v)
    rows = len({c for c, _ in ref})
    assert t.nbytes >= rows * 60 * 4 * 4  # allocates per config seen, not per config id
    assert t.nbytes < 1000 * 60 * 4 * 4
    t.reserve("h", 32, 500)
    before = t.nbytes
    t.put("h", list(range(32)), 499, torch.zeros(32, 4))
    assert t.nbytes == before  # reserved capacity: no regrowth


def test_age_and_step_counter() -> None:
    t = HistoryTable(2)
    t.put("g", [0], 0, torch.zeros(1, 2))
    t.tick()
    t.tick()
    t.put("g", [0], 1, torch.zeros(1, 2))
    assert t.age("g", [0, 1], [0, 1, 2]).tolist() == [[2, 0, -1], [-1, -1, -1]]
    assert t.age("nope", [0], [0]).tolist() == [[-1]]
    t.clear()
    assert len(t) == 0 and t.step == 0 and t.nbytes == 0


def test_state_dict_round_trip_through_torch_save() -> None:
    t = HistoryTable(3)
    t.put("g", [7, 2], [0, 4], torch.randn(2, 2, 3))
    t.tick()
    t.put("m", [0], 1, torch.randn(1, 3))
    buf = io.BytesIO()
    torch.save(t.state_dict(), buf)
    buf.seek(0)
    u = HistoryTable(3)
    u.load_state_dict(torch.load(buf, weights_only=True))
    assert u.step == 1 and sorted(u.graphs) == ["g", "m"]
    for g, cfg, segs in (("g", [2, 7, 1], [4, 0, 3]), ("m", [0], [1, 0])):
        a, pa = t.get(g, cfg, segs)
        b, pb = u.get(g, cfg, segs)
        assert torch.equal(a, b) and torch.equal(pa, pb)
    assert torch.equal(t.age("g", [7], [0]), u.age("g", [7], [0]))


def test_bad_input_and_incompatible_checkpoints() -> None:
    with pytest.raises(InvalidOption, match="dim"):
        HistoryTable(0)
    t = HistoryTable(3)
    with pytest.raises(InvalidOption, match="shape"):
        t.put("g", [0, 1], 0, torch.zeros(2, 4))
    with pytest.raises(InvalidOption, match=">= 0"):
        t.put("g", [-1], 0, torch.zeros(1, 3))
    with pytest.raises(InvalidOption, match="integers"):
        t.get("g", [0.5], [0])
    with pytest.raises(InvalidCheckpoint, match="dim 3"):
        HistoryTable(4).load_state_dict(t.state_dict())
    with pytest.raises(InvalidCheckpoint, match="malformed"):
        t.load_state_dict({"dim": 3})
    t.put("g", [0], 0, torch.zeros(1, 3))
    state = t.state_dict()
    state["graphs"]["g"]["emb"] = torch.zeros(1, 1, 5)
    with pytest.raises(InvalidCheckpoint, match="'g'"):
        HistoryTable(3).load_state_dict(state)


def test_get_put_speed_for_32_configs_500_segments() -> None:
    t = HistoryTable(128)
    cfg = np.arange(100, 132)
    t.reserve("g", 32, 500)
    emb = torch.randn(32, 128)
    t0 = time.perf_counter()
    for s in range(500):
        t.put("g", cfg, s, emb)
    put_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(10):
        out, present = t.get("g", cfg, np.arange(500))
    get_s = (time.perf_counter() - t0) / 10
    assert out.shape == (32, 500, 128) and bool(present.all())
    assert put_s < 2.0, f"500 puts took {put_s:.2f}s"
    assert get_s < 0.25, f"one get took {get_s:.3f}s"
