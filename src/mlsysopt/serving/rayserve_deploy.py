"""Deploy the folder a tune wrote (``rayserve/``) with Ray Serve's own ``serve run``, as a user would.

A tune on ``--engine rayserve`` writes ``serve_config.yaml``, ``mlsysopt_serve_app.py`` and ``model.onnx``.
:class:`ServeRun` starts ``serve run serve_config.yaml`` in that folder (a private local Ray, its own process group),
waits until the application answers over HTTP and reads back what the replica runs with (``GET /``: its batching
and ONNX Runtime session options, and its ``max_ongoing_requests``); leaving the ``with`` block stops it (SIGINT, as
Ctrl-C does, then SIGKILL). The tests and ``benchmarks/serving_rayserve.py`` use it to check that a configuration
deploys as written.

The port in the user's file is left alone: the run reads a copy (``serve_config.port-<port>.yaml``, removed
afterwards) whose only change is ``http_options.port``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.ports import free_port


def replica_info(port: int, timeout: float = 10.0) -> dict[str, Any]:
    """What the replica behind ``http://127.0.0.1:port/`` runs with (its answer to ``GET /``).

    Args:
        port: The HTTP port of Ray Serve's proxy on 127.0.0.1.
        timeout: Seconds to wait for the answer.

    Returns:
        The replica's ``pid``, ``batching`` and ``session`` options, and ``ongoing`` (its ``max_ongoing_requests``; None
        where Ray Serve does not say).

    Raises:
        OSError: If nothing answers; ValueError if the answer is not JSON.
    """
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=timeout) as r:
        return dict(json.loads(r.read()))


class ServeRun:
    """``serve run`` of a deployment folder on a free port of 127.0.0.1, stopped when the ``with`` block ends.

    Args:
        folder: The folder holding ``serve_config.yaml`` (a tune's ``rayserve/``).
        start_timeout_s: Seconds to wait until the application answers.

    Attributes:
        port: The HTTP port it serves on.
        info: What the replica runs with (:func:`replica_info`), once started.
        start_s: Seconds from ``serve run`` to the first answer.

    Raises:
        MlsysoptError: If the folder has no ``serve_config.yaml``, ``serve`` is not installed, or the application
            does not answer within ``start_timeout_s`` (the exit status of ``serve run`` when it ended).
    """

    def __init__(self, folder: str | os.PathLike[str], start_timeout_s: float = 180.0) -> None:
        self.folder = Path(folder)
        self.config = self.folder / "serve_config.yaml"
        if not self.config.is_file():
            raise MlsysoptError(f"{self.config}: no such file (a tune on --engine rayserve writes it)")
        self.serve = Path(sys.executable).with_name("serve")
        if not self.serve.exists():
            raise MlsysoptError("Ray Serve's `serve` command is not installed (pip install 'mlsysopt[ray]')")
        self.start_timeout_s = float(start_timeout_s)
        self.port = free_port()
        self.info: dict[str, Any] = {}
        self.start_s = float("nan")
        self._copy = self.folder / f"serve_config.port-{self.port}.yaml"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServeRun:
        import yaml  # deferred: only a deployment check reads YAML

        conf = yaml.safe_load(self.config.read_text())
        conf.setdefault("http_options", {})["port"] = self.port
        self._copy.write_text(yaml.safe_dump(conf, sort_keys=False))
        t0 = time.perf_counter()
        self._proc = subprocess.Popen(
            [str(self.serve), "run", self._copy.name], cwd=self.folder, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env={**os.environ, "RAY_ADDRESS": "local"}, start_new_session=True,
        )  # fmt: skip
        try:
            while time.perf_counter() - t0 < self.start_timeout_s and self._proc.poll() is None:
                try:
                    self.info = replica_info(self.port)
                    break
                except (OSError, ValueError):
                    time.sleep(1.0)
            if not self.info:
                ended = self._proc.poll()
                how = f"serve run exited with status {ended}" if ended is not None else "no answer"
                raise MlsysoptError(f"{self.config}: not served within {self.start_timeout_s:.0f} s ({how})")
        except BaseException:
            self._stop()
            raise
        self.start_s = time.perf_counter() - t0
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGINT)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        self._copy.unlink(missing_ok=True)
