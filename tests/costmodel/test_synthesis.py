"""``costmodel synth`` writes its data root whole or not at all: a stop (or a failure) on the way leaves no file."""

from __future__ import annotations

from pathlib import Path

import pytest

import mlsysopt.costmodel.data as data
from mlsysopt.costmodel.synthesis import PARTIAL, synth

SMALL = {"graphs": {"train": 2, "valid": 1, "test": 1}, "nodes": (200, 300), "configs": 6}


def _stopped_after_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """``synth_layout`` writes every graph, then a Ctrl-C (or SIGTERM, raised the same way) arrives."""
    real = data.synth_layout

    def stopped(out: Path, **kw: object) -> dict:
        real(out, **kw)
        assert any(Path(out).rglob("*.npz"))
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "synth_layout", stopped)


@pytest.mark.parametrize("existed", [False, True])
def test_a_stopped_synth_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool) -> None:
    out = tmp_path / "d"
    if existed:
        out.mkdir()
    _stopped_after_writing(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        synth("layout", out, **SMALL)  # type: ignore[arg-type]
    assert (sorted(out.rglob("*")) == []) if existed else not out.exists()


def test_what_a_killed_synth_left_is_cleared_and_the_root_written_whole(tmp_path: Path) -> None:
    out = tmp_path / "d"
    (out / PARTIAL / "train").mkdir(parents=True)
    (out / PARTIAL / "train" / "synthetic_layout_train_0000.npz").write_bytes(b"half")  # kill -9 mid-write
    assert synth("layout", out, **SMALL) == {"train": 2, "valid": 1, "test": 1}  # type: ignore[arg-type]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz")) == [
        "test/synthetic_layout_test_0000.npz", "train/synthetic_layout_train_0000.npz",
        "train/synthetic_layout_train_0001.npz", "valid/synthetic_layout_valid_0000.npz",
    ]  # fmt: skip
    assert not (out / PARTIAL).exists()
