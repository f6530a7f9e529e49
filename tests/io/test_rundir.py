"""RunDir: nothing created before validation, rollback on failure, one lock, resume checks that name settings."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidRunDir, MlsysoptError
from mlsysopt.io import RunDir


def test_check_has_no_side_effects(tmp_path) -> None:
    out = tmp_path / "run"
    RunDir(out, {"a": 1}).check()
    assert not out.exists()


def test_open_records_settings_and_removes_the_lock(tmp_path) -> None:
    out = tmp_path / "run"
    with RunDir(out, {"a": 1, "b": (1, 2)}) as run:
        assert (out / ".lock").exists()
        run.write_json("result.json", {"x": float("nan")})
    assert json.loads((out / "settings.json").read_text()) == {"a": 1, "b": [1, 2]}
    assert json.loads((out / "result.json").read_text()) == {"x": None}
    assert not (out / ".lock").exists()


def test_failure_before_a_checkpoint_leaves_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(MlsysoptError, match="boom"), RunDir(out, {"a": 1}) as run:
        run.write_json("partial.json", {})
        (out / "plot.png").write_bytes(b"png")
        (out / "sub").mkdir()
        raise MlsysoptError("boom")
    assert not out.exists()


def test_failure_in_an_existing_folder_removes_only_new_files(tmp_path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(KeyboardInterrupt), RunDir(out, {"a": 1}):
        (out / "new.json").write_text("{}")
        raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_failure_after_a_checkpoint_keeps_it(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), RunDir(out, {"a": 1}, checkpoint="checkpoint.json") as run:
        run.save_checkpoint({"step": 3})
        raise RuntimeError("killed")
    assert json.loads((out / "checkpoint.json").read_text()) == {"step": 3}
    assert (out / "settings.json").exists()


def test_stale_checkpoint_needs_resume(tmp_path) -> None:
    out = tmp_path / "run"
    with RunDir(out, {"a": 1}, checkpoint="checkpoint.json") as run:
        run.save_checkpoint({"step": 1})
    with pytest.raises(InvalidRunDir, match="pass --resume"):
        RunDir(out, {"a": 1}, checkpoint="checkpoint.json").check()


def test_resume_names_every_changed_setting(tmp_path) -> None:
    out = tmp_path / "run"
    with RunDir(out, {"a": 1, "b": 2, "budget": 5}, checkpoint="checkpoint.json") as run:
        run.save_checkpoint({"step": 1})
    run = RunDir(out, {"a": 1, "b": 2, "budget": 9}, resume=True, resumable=("budget",), checkpoint="checkpoint.json")
    with run:
        assert run.load_checkpoint() == {"step": 1}
        assert run.previous_settings == {"a": 1, "b": 2, "budget": 5}
    with pytest.raises(InvalidRunDir, match=r"a 1 \(now 7\), b 2 \(now 8\)"):
        RunDir(out, {"a": 7, "b": 8, "budget": 9}, resume=True, checkpoint="checkpoint.json").check()


def test_resume_without_a_checkpoint(tmp_path) -> None:
    with pytest.raises(InvalidRunDir, match="no checkpoint"):
        RunDir(tmp_path / "run", {}, resume=True).check()
    with pytest.raises(MlsysoptError, match="no checkpoint to continue"):
        RunDir(tmp_path / "run", {}, resume=True, checkpoint=None)


def test_resume_with_unreadable_settings(tmp_path) -> None:
    out = tmp_path / "run"
    with RunDir(out, {"a": 1}, checkpoint="checkpoint.json") as run:
        run.save_checkpoint({})
    (out / "settings.json").write_text("[" * 10_000)
    with pytest.raises(InvalidRunDir, match="settings.json"):
        RunDir(out, {"a": 1}, resume=True, checkpoint="checkpoint.json").check()


def test_out_that_is_a_file(tmp_path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidRunDir, match="not a folder"):
        RunDir(tmp_path / "f").check()


def test_stale_temp_files_are_removed_on_open(tmp_path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / ".result.json.x1y2.tmp").write_text("half")
    with RunDir(out, {}, checkpoint=None):
        assert not (out / ".result.json.x1y2.tmp").exists()


def test_a_busy_folder_names_the_process_that_holds_it(tmp_path) -> None:
    out = tmp_path / "run"
    holder = textwrap.dedent(
        f"""
        import sys, time
        from mlsysopt.io import RunDir
        with RunDir({str(out)!r}, {{}}, checkpoint=None):
            print("locked", flush=True)
            time.sleep(30)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        for attempt in (lambda: RunDir(out, {}, checkpoint=None).check(), RunDir(out, {}, checkpoint=None).open):
            with pytest.raises(InvalidRunDir, match=f"in use by process {proc.pid}"):
                attempt()
    finally:
        proc.kill()
        proc.wait()
    time.sleep(0.05)
    with RunDir(out, {}, checkpoint=None):  # the lock dies with its process
        pass


def test_a_stop_landing_while_the_folder_closes_still_releases_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM raises where the run happens to be: also in the middle of closing (writing log.txt's last line)."""
    from mlsysopt.io.runlog import RunLog

    stop = RunLog.stop

    def stopped(self: RunLog, *args: object, **kw: object) -> None:
        stop(self, *args, **kw)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(RunLog, "stop", stopped)
    run = RunDir(tmp_path / "r", {"a": 1}, checkpoint="c.json")
    with pytest.raises(KeyboardInterrupt), run:
        run.save_checkpoint({"step": 1})
    assert not (tmp_path / "r" / ".lock").exists() and (tmp_path / "r" / "c.json").is_file()
    monkeypatch.setattr(RunLog, "stop", stop)
    with RunDir(tmp_path / "r", {"a": 1}, resume=True, checkpoint="c.json") as again:  # the folder is free again
        assert again.load_checkpoint() == {"step": 1}
