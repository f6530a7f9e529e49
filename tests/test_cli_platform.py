"""The CLI's generic guarantees (issue 12): every failure is one ``error:`` line, exit 2 (130 for Ctrl-C), no
traceback, nothing left in ``--out``; terminal output is literal and safe; options are checked the same way
everywhere. Most run in-process; the real read-only / disk-full / Ctrl-C checks start the real command."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_inprocess, terminal_sigint
from mlsysopt.cli import debug_enabled, run
from mlsysopt.graph.generate import homogeneous_cluster, layered_dag
from mlsysopt.graph.ir import CompGraph


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A folder with a small graph g.npz and a 2-device cluster c.json."""
    layered_dag(12, num_types=1, seed=0).save(tmp_path / "g.npz")
    homogeneous_cluster(2).save(tmp_path / "c.json")
    return tmp_path


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------- usage errors read like the rest
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["graph", "generate", "--out", "g.npz", "--tasks", "0"], ["'--tasks'", "greater than or equal to 1"]),
        (["graph", "generate", "--out", "g.npz", "--tasks", "abc"], ["'--tasks'", "valid integer"]),
        (["graph", "generate", "--out", "g.npz", "--tasks", "1.5"], ["'--tasks'"]),
        (["graph", "generate", "--out", "g.npz", "--p", "2"], ["'--p'", "less than or equal to 1"]),
        (["graph", "generate", "--out", "g.npz", "--alpha", "nan"], ["'--alpha'"]),
        (["graph", "generate", "--out", "g.npz", "--compute-beta", "inf"], ["'--compute-beta'", "finite"]),
        (["graph", "generate", "--out", "g.npz", "--seed", str(10**30)], ["'--seed'", "at most"]),
        (["graph", "generate", "--out", "g.npz", "--bogus"], ["No such option: --bogus"]),
        (["graph", "info"], ["Missing argument 'SOURCE'", "mlsysopt graph info --help"]),
        (["graph", "nope"], ["No such command 'nope'"]),
        (["graph", "info", "g.npz", "--json", "yes"], ["unexpected extra argument"]),
    ],
)
def test_usage_and_range_errors_are_one_line(work: Path, args: list[str], needles: list[str]) -> None:
    assert_user_error(run_inprocess(*args, cwd=work), *needles)
    assert sorted(p.name for p in work.iterdir()) == ["c.json", "g.npz"]


def test_every_flag_has_its_negative() -> None:
    import typer

    from mlsysopt.cli import app
    from mlsysopt.cli.common import harden

    root = harden(typer.main.get_command(app))
    flags, stack = [], [root]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        flags += [p for p in cmd.params if getattr(p, "is_bool_flag", False) and not p.is_eager]
    assert flags and all(p.secondary_opts and p.secondary_opts[0].startswith("--no-") for p in flags)


def test_version_and_negative_flags(work: Path) -> None:
    from mlsysopt import __version__

    ran = run_inprocess("--version")
    assert ran.returncode == 0 and ran.stdout.strip() == f"mlsysopt {__version__}"
    as_json = run_inprocess("graph", "info", "g.npz", "--json", cwd=work)
    assert _strict(as_json.stdout)["tasks"] == 12
    table = run_inprocess("graph", "info", "g.npz", "--json", "--no-json", cwd=work)
    assert table.returncode == 0 and table.stdout.startswith("graph ") and "tasks" in table.stdout


@pytest.mark.parametrize(("value", "debug"), [("", False), ("0", False), ("false", False), ("no", False),
                                              ("1", True), ("true", True), ("YES", True)])  # fmt: skip
def test_only_1_true_or_yes_turn_tracebacks_on(monkeypatch: pytest.MonkeyPatch, value: str, debug: bool) -> None:
    monkeypatch.setenv("MLSYSOPT_DEBUG", value)
    assert debug_enabled() is debug
    if debug:
        with pytest.raises(Exception, match="no such file"):
            run(["graph", "info", "missing.npz"])
    else:
        assert run(["graph", "info", "missing.npz"]) == 2


# ---------------------------------------------------------------------------- literal, safe terminal output
def test_markup_and_emoji_codes_are_printed_literally(work: Path) -> None:
    line = assert_user_error(run_inprocess("graph", "info", "x[/red]y:smile:.npz", cwd=work))
    assert "x[/red]y:smile:.npz" in line
    ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--out", "r[bold]:fire:", cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "wrote r[bold]:fire:/result.json" in ran.stdout and (work / "r[bold]:fire:" / "gantt.png").is_file()


def test_names_from_files_cannot_reach_the_terminal_as_escape_sequences(tmp_path: Path) -> None:
    evil = "\x1b[2J\x1b]0;pwned\x07"
    g = CompGraph.build(["a", f"b{evil}"], ["conv", f"op{evil}"], {"compute": [1.0, 2.0]}, [(0, 1)], [1.0])
    g.save(tmp_path / "evil.npz")
    ran = run_inprocess("graph", "info", "evil.npz", cwd=tmp_path)
    assert ran.returncode == 0 and "\x1b" not in ran.stdout and "\x07" not in ran.stdout
    assert "op\\x1b[2J\\x1b]0;pwned\\x07" in ran.stdout
    cyclic = CompGraph.build(["a", f"b{evil}"], ["conv", "relu"], {}, [(0, 1)], [1.0])
    with np.load(cyclic.save(tmp_path / "c.npz")) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["edge_index"], arrays["edge_bytes"] = np.array([[0, 1], [1, 0]]), np.ones(2)
    np.savez(tmp_path / "cyclic.npz", **arrays)
    line = assert_user_error(run_inprocess("graph", "info", "cyclic.npz", cwd=tmp_path), "cycle")
    assert "\x1b" not in line and "b\\x1b[2J" in line
    from mlsysopt.cli.common import safe_text

    assert safe_text("ok\tfine\n\u202eevil\r") == "ok\tfine\n\\u202eevil\\x0d"


# ---------------------------------------------------------------------------- every failure kind, one line
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EIO])
def test_every_oserror_kind_is_one_line_and_leaves_nothing(
    work: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Simulated at the write layer (the real read-only and full file systems are below)."""
    real_replace = os.replace

    def failing(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        if str(dst).endswith(".png"):  # matplotlib's own write path: a raw OSError, not our WriteFailed
            raise OSError(code, os.strerror(code), str(dst))
        real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", failing)
    ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--random", "--out", "run", cwd=work)
    assert_user_error(ran, os.strerror(code), "gantt.png")
    assert not (work / "run").exists()


@pytest.mark.parametrize(
    ("exc", "code", "needle"),
    [
        (RecursionError("maximum recursion depth exceeded"), 2, "nested too deeply"),
        (MemoryError(), 2, "out of memory"),
        (KeyboardInterrupt(), 130, "interrupted (Ctrl-C)"),
        (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "run/x.png"), 2, "No space left on device: run/x.png"),
        (OSError(errno.EROFS, os.strerror(errno.EROFS)), 2, "Read-only file system (read-only file system"),
    ],
)
def test_recursion_memory_ctrl_c_and_raw_oserrors_are_one_line(
    work: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, code: int, needle: str
) -> None:
    import mlsysopt.report.gantt as gantt

    def boom(*a: Any, **k: Any) -> None:
        raise exc

    monkeypatch.setattr(gantt, "plot_gantt", boom)  # inside the run folder: it must be rolled back
    ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--random", "--out", "run", cwd=work)
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    assert ran.returncode == code and len(lines) == 1 and "Traceback" not in ran.stderr
    assert lines[0].startswith("error: ") and needle in lines[0]
    assert not (work / "run").exists()


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0


def _in_private_mount(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    env["PY"] = sys.executable
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


@pytest.mark.skipif(not _can_mount(), reason="needs root and unshare for a private tmpfs")
def test_a_real_full_disk_and_a_real_read_only_folder(work: Path) -> None:
    (work / "mnt").mkdir()
    full = _in_private_mount(
        'mount -t tmpfs -o size=48k tmpfs mnt && "$PY" -m mlsysopt.cli graph simulate g.npz --cluster c.json --random '
        '--out mnt/run; rc=$?; echo "left:$(ls -A mnt)"; exit $rc',
        work,
    )
    line = assert_user_error(full, "No space left on device")
    assert "mnt/run" in line and full.stdout.strip().endswith("left:")  # the run folder was removed
    ro = _in_private_mount(
        "mount -t tmpfs tmpfs mnt && mkdir mnt/ro && mount --bind mnt/ro mnt/ro && mount -o remount,bind,ro mnt/ro "
        '&& "$PY" -m mlsysopt.cli graph simulate g.npz --cluster c.json --random --out mnt/ro/run',
        work,
    )
    assert_user_error(ro, "Read-only file system", "mnt/ro/run")


def test_a_real_ctrl_c_is_one_line_with_exit_130(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import pathlib, time\n\ndef model():\n    pathlib.Path('started').touch()\n    time.sleep(60)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    argv = [sys.executable, "-m", "mlsysopt.cli", "graph", "info", "slow.py:model"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(argv, cwd=tmp_path, text=True, env=env, preexec_fn=terminal_sigint, **pipes)
    # The Ctrl-C must land while the user's code runs: sent earlier (a loaded machine can take a minute to import
    # torch), it tests the import of third-party libraries instead, where a bare ``except:`` may swallow it.
    deadline = time.monotonic() + 240
    while not (tmp_path / "started").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not (tmp_path / "started").exists():
        proc.kill()
        pytest.fail(f"the model never started (exit {proc.poll()}): {proc.communicate()[1]}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 130 and lines == ["error: interrupted (Ctrl-C)"], err


# ---------------------------------------------------------------------------- inputs that were misread
def _npz_with(tmp_path: Path, name: str, **over: Any) -> str:
    with np.load(layered_dag(6, num_types=1).save(tmp_path / "base.npz")) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(over)
    np.savez(tmp_path / name, **arrays)
    return name


def test_misread_inputs_are_refused_naming_the_key(tmp_path: Path) -> None:
    hw = _npz_with(tmp_path, "hw.npz", hw_type=np.array([0, 0, 0, 0, 0, 2**40]))
    assert_user_error(run_inprocess("graph", "info", hw, cwd=tmp_path), "hw.npz", "'hw_type'", "1099511627776")
    for meta, name in ((json.dumps([1, 2]), "list.npz"), (json.dumps("text"), "str.npz")):
        bad = _npz_with(tmp_path, name, meta=np.array(meta))
        assert_user_error(run_inprocess("graph", "info", bad, cwd=tmp_path), name, "'meta'", "not a JSON object")
    data = homogeneous_cluster(2).to_dict()
    data["supports"] = [["no"], ["yes"]]
    (tmp_path / "c.json").write_text(json.dumps(data))
    ran = run_inprocess("graph", "simulate", "base.npz", "--cluster", "c.json", "--out", "r", cwd=tmp_path)
    assert_user_error(ran, "c.json", "'supports'[0][0] is 'no'")
    assert not (tmp_path / "r").exists()


def test_extreme_but_finite_values_are_refused_before_plotting(tmp_path: Path) -> None:
    layered_dag(6, num_types=1).save(tmp_path / "g.npz")
    data = homogeneous_cluster(2).to_dict()
    data["speed"] = [1e-308, 1e-308]
    (tmp_path / "slow.json").write_text(json.dumps(data))
    ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "slow.json", "--out", "r", cwd=tmp_path)
    assert_user_error(ran, "overflows")
    data["speed"], data["delay"] = [1.0, 1.0], [[None, 1e308], [1e308, None]]
    (tmp_path / "late.json").write_text(json.dumps(data))
    ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "late.json", "--out", "r", cwd=tmp_path)
    assert_user_error(ran, "overflows")
    for opt in ("--bytes-avg", "--compute-avg"):
        ran = run_inprocess("graph", "generate", "--out", "x.npz", opt, "1e308", cwd=tmp_path)
        assert_user_error(ran, opt.strip("-").replace("-", "_"), "too extreme")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz", "late.json", "slow.json"]


def test_outputs_are_strict_json(work: Path) -> None:
    info = run_inprocess("graph", "info", "g.npz", "--json", cwd=work)
    _strict(info.stdout)
    assert run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--out", "r", cwd=work).returncode == 0
    for name in ("result.json", "cluster.json", "settings.json"):
        _strict((work / "r" / name).read_text())


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["graph", "generate", "--out", "g2.npz", "--tasks", "10000000"], ["--tasks 10,000,000", "limit of"]),
        (["graph", "generate", "--out", "g2.npz", "--cluster-out", "c2.json", "--devices", "10000000"],
         ["--devices 10,000,000", "limit of"]),
        (["graph", "simulate", "g.npz", "--devices", "100000000", "--out", "r"], ["--devices 100,000,000"]),
        (["graph", "info", "montage", "--num-tasks", "100000000"], ["'--num-tasks'", "less than or equal to"]),
    ],
)  # fmt: skip
def test_sizes_are_bounded_before_anything_is_allocated(work: Path, args: list[str], needles: list[str]) -> None:
    t0 = time.perf_counter()
    assert_user_error(run_inprocess(*args, cwd=work), *needles)
    assert time.perf_counter() - t0 < 30  # refused up front, not after allocating
    assert sorted(p.name for p in work.iterdir()) == ["c.json", "g.npz"]
