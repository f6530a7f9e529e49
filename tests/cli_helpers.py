"""Helpers for CLI tests that run the real command line in a subprocess."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def terminal_sigint() -> None:
    """``preexec_fn`` of a command that a test Ctrl-Cs: SIGINT at its default and unblocked, as a terminal starts
    it. Both are inherited, and a test process of the full suite can hold SIGINT ignored; a process that starts so
    ignores Ctrl-C, as Unix wants, and the test hangs (reproduced by running one under a parent ignoring SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def run(*args: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mlsysopt.cli ARGS`` in ``cwd`` (no debug tracebacks, an 80-column terminal)."""
    env = dict(os.environ)
    env.pop("MLSYSOPT_DEBUG", None)
    env["COLUMNS"] = "80"  # a narrow terminal must not wrap the error line
    return subprocess.run(
        [sys.executable, "-m", "mlsysopt.cli", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def assert_user_error(proc: subprocess.CompletedProcess[str] | Ran, *needles: str) -> str:
    """Exit code 2, exactly one non-empty stderr line starting with 'error:', no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


class Ran(NamedTuple):
    """What an in-process run of the CLI left: exit code, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_inprocess(*args: str | Path, cwd: Path | None = None) -> Ran:
    """Run ``mlsysopt ARGS`` in this process (fast: no interpreter start, imports cached), as a user would see it.

    ``MLSYSOPT_DEBUG`` is unset for the call, ``cwd`` (if given) is the current folder during it.
    """
    from mlsysopt.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd, debug = os.getcwd(), os.environ.pop("MLSYSOPT_DEBUG", None)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main([str(a) for a in args])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(old_cwd)
        if debug is not None:
            os.environ["MLSYSOPT_DEBUG"] = debug
    return Ran(code, out.getvalue(), err.getvalue())
