"""Where a report came from: mlsysopt's version, the git commit of its source tree and the machine it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import mlsysopt

_SOURCE = Path(mlsysopt.__file__).resolve().parent


def git_commit(source: str | Path = _SOURCE) -> str | None:
    """The short commit of the git work tree that holds ``source`` (``+ changes`` when dirty), else ``None``.

    Only a tree that contains mlsysopt's own source counts, so an installed package inside some other
    repository reports no commit rather than that repository's.
    """
    source = Path(source)

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or (Path(top) / "src" / "mlsysopt").resolve() != source.resolve():
        return None
    commit = git("rev-parse", "--short=12", "HEAD")
    if commit is None:
        return None
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{commit} + changes" if dirty else commit


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, Any]:
    """mlsysopt's version, its git commit (or None), and the machine: CPUs, platform, Python, torch."""
    return {
        "mlsysopt": mlsysopt.__version__,
        "commit": git_commit(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
    }
