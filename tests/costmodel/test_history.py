"""Historical embedding table: row-keyed storage, detached copies, missing rows, growth, ages, checkpoints, speed."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

from mlsysopt.costmodel.history import HistoryTable
from mlsysopt.errors import InvalidCheckpoint, InvalidOption


def test_put_get_by_graph_and_row_with_missing_rows_zero() -> None:
    t = HistoryTable(3)
    t.put("a", [5, 9], torch.tensor([[1.0, 1, 1], [2, 2, 2]]))
    t.put("b", [5], torch.tensor([[7.0, 7, 7]]))
    emb, present = t.get("a", [9, 5, 1, 400])
    assert emb.shape == (4, 3) and present.shape == (4,) and emb.dtype == torch.float32
    assert present.tolist() == [True, True, False, False]
    assert emb[0].tolist() == [2.0, 2.0, 2.0] and emb[1].tolist() == [1.0, 1.0, 1.0]
    assert float(emb[~present].abs().sum()) == 0.0
    e, p = t.get("unknown", [0, 1])
    assert e.shape == (2, 3) and not p.any() and float(e.abs().sum()) == 0.0
    assert t.get("b", [5])[0][0].tolist() == [7.0, 7.0, 7.0]  # graphs do not share rows
    assert sorted(t.graphs) == ["a", "b"] and "a" in t and len(t) == 2 and t.num_entries() == 3
    assert t.num_entries("a") == 2 and t.num_entries("zzz") == 0


def test_entries_are_detached_host_copies() -> None:
    t = HistoryTable(2)
    w = torch.ones(1, 2, requires_grad=True)
    src = w * 3
    t.put("g", [0], src)
    src.data.fill_(-1.0)  # the caller reusing its buffer must not change the table
    out, _ = t.get("g", [0])
    assert out.tolist() == [[3.0, 3.0]] and not out.requires_grad and out.device.type == "cpu"
    out.fill_(0.0)  # nor may the caller's result alias the table
    assert t.get("g", [0])[0].tolist() == [[3.0, 3.0]]
    t.put("g", [1], np.array([[1, 2]], dtype=np.float64))  # numpy input, stored as float32
    assert t.get("g", [1])[0].dtype == torch.float32


def test_repeated_rows_last_write_wins_and_export_round_trips() -> None:
    t = HistoryTable(1)
    t.put("g", [3, 3, 4, 3], torch.tensor([[1.0], [2.0], [5.0], [9.0]]))
    assert t.get("g", [3, 4])[0][:, 0].tolist() == [9.0, 5.0]
    rows, units = t.export("g")
    assert rows.tolist() == [3, 4] and units[:, 0].tolist() == [9.0, 5.0]
    u = HistoryTable(1)
    u.put("g", rows, units)
    assert torch.equal(u.get("g", [3, 4])[0], t.get("g", [3, 4])[0])
    t.drop("g")
    assert "g" not in t and t.export("g")[0].size == 0


def test_growth_keeps_earlier_entries_and_pays_per_written_row() -> None:
    t = HistoryTable(4)
    rng = np.random.default_rng(0)
    ref = {}
    for _ in range(200):
        row = int(rng.integers(0, 60_000))
        v = torch.from_numpy(rng.normal(size=(1, 4)).astype(np.float32))
        t.put("g", [row], v)
        ref[row] = v[0]
    for row, v in ref.items():
        emb, present = t.get("g", [row])
        assert present.item() and torch.equal(emb[0], v)
    assert t.num_entries("g") == len(ref)
    # slot map is one int64 per row id; embeddings only for the rows written (capacity at most doubled)
    assert t.nbytes < 8 * 2 * 60_000 + 2 * len(ref) * (4 * 4 + 8) + 1024


def test_age_and_step_counter() -> None:
    t = HistoryTable(2)
    t.put("g", [0], torch.zeros(1, 2))
    t.tick()
    t.tick()
    t.put("g", [1], torch.zeros(1, 2))
    assert t.age("g", [0, 1, 2]).tolist() == [2, 0, -1]
    assert t.age("nope", [0]).tolist() == [-1]
    t.clear()
    assert len(t) == 0 and t.step == 0 and t.nbytes == 0


def test_state_dict_round_trip_through_torch_save() -> None:
    t = HistoryTable(3)
    t.put("g", [7, 2], torch.randn(2, 3))
    t.tick()
    t.put("m", [0], torch.randn(1, 3))
    buf = io.BytesIO()
    torch.save(t.state_dict(), buf)
    buf.seek(0)
    u = HistoryTable(3)
    u.load_state_dict(torch.load(buf, weights_only=True))
    assert u.step == 1 and sorted(u.graphs) == ["g", "m"]
    for g, rows in (("g", [2, 7, 1]), ("m", [0, 5])):
        a, pa = t.get(g, rows)
        b, pb = u.get(g, rows)
        assert torch.equal(a, b) and torch.equal(pa, pb)
    assert np.array_equal(t.age("g", [7, 2]), u.age("g", [7, 2]))


def test_bad_input_and_incompatible_checkpoints() -> None:
    with pytest.raises(InvalidOption, match="dim"):
        HistoryTable(0)
    t = HistoryTable(3)
    with pytest.raises(InvalidOption, match="shape"):
        t.put("g", [0, 1], torch.zeros(2, 4))
    with pytest.raises(InvalidOption, match=">= 0"):
        t.put("g", [-1], torch.zeros(1, 3))
    with pytest.raises(InvalidOption, match="integers"):
        t.get("g", [0.5])
    with pytest.raises(InvalidCheckpoint, match="dim 3"):
        HistoryTable(4).load_state_dict(t.state_dict())
    with pytest.raises(InvalidCheckpoint, match="malformed"):
        t.load_state_dict({"dim": 3})
    t.put("g", [0], torch.zeros(1, 3))
    state = t.state_dict()
    state["graphs"]["g"]["emb"] = torch.zeros(1, 5)
    with pytest.raises(InvalidCheckpoint, match="'g'"):
        HistoryTable(3).load_state_dict(state)
    state = t.state_dict()
    state["graphs"]["g"]["rows"] = torch.tensor([-3])
    with pytest.raises(InvalidCheckpoint, match="inconsistent"):
        HistoryTable(3).load_state_dict(state)


def test_get_put_speed_for_32_configs_500_segments() -> None:
    t = HistoryTable(128)
    emb = torch.randn(32, 128)
    t0 = time.perf_counter()
    for s in range(500):
        t.put("g", np.arange(100, 132) * 500 + s, emb)  # the reference's key: config * S + segment
    put_s = time.perf_counter() - t0
    rows = (np.arange(100, 132)[:, None] * 500 + np.arange(500)[None]).reshape(-1)
    t0 = time.perf_counter()
    for _ in range(10):
        out, present = t.get("g", rows)
    get_s = (time.perf_counter() - t0) / 10
    assert out.shape == (32 * 500, 128) and bool(present.all())
    assert put_s < 2.0, f"500 puts took {put_s:.2f}s"
    assert get_s < 0.25, f"one get took {get_s:.3f}s"
