"""Atomic writes: whole files only, the caller's umask, clear errors naming the target, safe checkpoints."""

from __future__ import annotations

import os
import stat

import pytest

from mlsysopt.errors import InvalidCheckpoint, WriteFailed
from mlsysopt.io import load_torch, remove_stale_temps, save_torch_atomic, write_atomic


def test_write_atomic_follows_the_umask(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        import mlsysopt.io.files as files

        files._UMASK = None  # re-read the umask set above
        path = write_atomic(tmp_path / "a.txt", "hello")
    finally:
        os.umask(old)
        files._UMASK = None
    assert path.read_text() == "hello"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_write_failure_names_the_target_not_the_temp_file(tmp_path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):  # root ignores permissions: use a path under a file instead
            target = tmp_path / "file" / "x.json"
            (tmp_path / "file").write_text("")
        else:
            target = folder / "x.json"
        with pytest.raises(WriteFailed) as info:
            write_atomic(target, "data")
    finally:
        folder.chmod(0o700)
    assert str(target) in str(info.value)
    assert ".tmp" not in str(info.value)


def test_remove_stale_temps(tmp_path) -> None:
    (tmp_path / ".result.json.abc123.tmp").write_text("half")
    (tmp_path / "result.json").write_text("{}")
    removed = remove_stale_temps(tmp_path)
    assert [p.name for p in removed] == [".result.json.abc123.tmp"]
    assert (tmp_path / "result.json").exists()


def test_torch_round_trip(tmp_path) -> None:
    import torch

    path = save_torch_atomic(tmp_path / "c.pt", {"w": torch.ones(3), "step": 4})
    data = load_torch(path, InvalidCheckpoint)
    assert data["step"] == 4 and torch.equal(data["w"], torch.ones(3))


def test_unsafe_checkpoint_is_refused_without_unsafe_advice(tmp_path) -> None:
    import argparse

    import torch

    path = tmp_path / "evil.pt"
    torch.save({"obj": argparse.Namespace(a=1)}, path)  # a pickled class: not loadable weights-only
    with pytest.raises(InvalidCheckpoint) as info:
        load_torch(path, InvalidCheckpoint)
    msg = str(info.value).replace(str(path), "")
    assert "not a readable checkpoint (it holds objects other than tensors" in msg
    assert "weights_only" not in msg and "unsafe" not in msg.lower()


@pytest.mark.parametrize("content", [b"", b"garbage bytes", b"PK\x03\x04truncated zip"])
def test_unreadable_checkpoint_is_a_clear_error(tmp_path, content: bytes) -> None:
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(InvalidCheckpoint, match="not a"):
        load_torch(path, InvalidCheckpoint)
