"""Helpers for CLI tests that run the real command line in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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


def assert_user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2, exactly one non-empty stderr line starting with 'error:', no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
