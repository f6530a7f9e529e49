"""Ray executor: the same interface on a Ray cluster (``--backend ray [--address auto|HOST:PORT]``).

Each item is a Ray task. Ray re-runs a task whose worker process or node died (``max_retries``); exceptions the
function itself raises are not retried (they are deterministic) and reach the caller as the original exception.

The Ray driver runs in a child process of its own (see :mod:`mlsysopt.runtime.ray_driver`): when the cluster's
head dies, Ray ends its driver process, and that must not end the user's run. The child's death becomes one
:class:`~mlsysopt.runtime.base.ExecutorLost` here; the caller keeps its checkpoint and can ``--resume``.

``address=None`` starts a private single-node Ray instance on this machine with ``workers`` CPUs; ``"auto"`` joins
the cluster this machine belongs to (``RAY_ADDRESS``, or the one ``ray start`` recorded); ``HOST:PORT`` joins that
head. Workers must have mlsysopt (same version) and its dependencies installed: tasks refer to mlsysopt's functions
by module and name. Ray 2.59+ enables token authentication: set ``RAY_AUTH_TOKEN`` (or ``RAY_AUTH_TOKEN_PATH``)
to the cluster's token on the driver's machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing as mp
import os
import socket
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import MAX_RETRIES, Executor, ExecutorLost
from mlsysopt.runtime.ray_driver import driver_main

INSTALL_HINT = "Ray is not installed: install the extra with `pip install -e '.[ray]'` (or `pip install ray`)"

#: Seconds to wait for the driver process to connect (Ray's own start-up included).
CONNECT_TIMEOUT_S = 120.0


def check_reachable(address: str | None) -> None:
    """A clear error, before Ray is started, when nothing listens at ``HOST:PORT`` (for ``auto``: at the
    ``RAY_ADDRESS`` of the environment, when it names one; Ray would try it for half a minute)."""
    if address is None:
        return
    if address == "auto":
        env = os.environ.get("RAY_ADDRESS", "").strip()
        host, sep, port = env.removeprefix("ray://").rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            _probe(f"--address auto: RAY_ADDRESS={env[:80]}", host, int(port), "unset RAY_ADDRESS, or ")
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MlsysoptError(f"--address {address}: expected auto or HOST:PORT of a Ray head, e.g. 10.0.0.5:6379")
    _probe(f"--address {address}", host, int(port))


def _probe(what: str, host: str, port: int, hint: str = "") -> None:
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=5):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise MlsysoptError(
            f"{what}: no Ray head answers there ({why}); {hint}start one with `ray start --head --port {port}`"
        ) from None


class RayExecutor(Executor):
    """Runs each item as a Ray task, at most ``workers`` at a time (None: as many as the cluster has CPUs).

    The Ray driver runs in a child process started here; the constructor waits (up to :data:`CONNECT_TIMEOUT_S`)
    until it is connected.

    Args:
        address: None (a private local Ray instance), ``"auto"`` (the cluster this machine belongs to) or
            ``HOST:PORT`` of a Ray head.
        workers: Most tasks in flight (>= 1); None uses the cluster's CPU count.
        max_retries: Times (>= 0) Ray re-runs a task whose worker or node died.
        num_cpus: CPUs each task reserves on the cluster.

    Raises:
        MlsysoptError: If Ray is not installed, an argument is out of range, nothing answers at ``address``, or
            the driver fails to connect.
    """

    backend = "ray"

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        max_retries: int = MAX_RETRIES,
        num_cpus: float = 1.0,
    ) -> None:
        if importlib.util.find_spec("ray") is None:
            raise MlsysoptError(INSTALL_HINT)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise MlsysoptError(f"workers must be an integer >= 1, got {workers!r}")
        if max_retries < 0:
            raise MlsysoptError(f"max_retries must be >= 0, got {max_retries}")

        check_reachable(address)
        self.address = address
        self.max_retries = max_retries
        self.log = os.path.join(tempfile.gettempdir(), f"mlsysopt-ray-driver-{os.getpid()}-{id(self):x}.log")
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=driver_main, args=(child, address, workers, max_retries, num_cpus, self.log), daemon=True
        )
        self._proc.start()
        child.close()
        kind, value = self._receive(CONNECT_TIMEOUT_S, starting=True)
        if kind != "ready":
            self._stop()
            raise MlsysoptError(str(value))
        self.cluster_cpus = int(value)
        self.workers = workers or max(1, self.cluster_cpus)

    def describe(self) -> str:
        """``ray (N workers, <where>)``."""
        where = "private local instance" if self.address is None else self.address
        return f"ray ({self.workers} workers, {where})"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """One Ray task per item (at most ``workers`` in flight); the results in input order."""
        return self._call("map", fn, list(items))

    def run_in_driver(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the driver process, where it may use the Ray API (actors, placement groups)."""
        return self._call("call", fn, args)

    # ------------------------------------------------------------------------ the pipe to the driver
    def _call(self, *message: Any) -> Any:
        if self._proc is None:
            raise ExecutorLost("this Ray executor is closed")
        try:
            self._conn.send(message)
        except (BrokenPipeError, EOFError, OSError):
            self._stop()
            raise ExecutorLost(self._lost_message()) from None
        try:
            kind, value = self._receive(None)
        except BaseException:
            self._stop()  # Ctrl-C: the driver goes, and Ray cancels what it had submitted
            raise
        if kind == "ok":
            return value
        if kind == "raise":
            raise value
        raise ExecutorLost(str(value))

    def _receive(self, timeout: float | None, starting: bool = False) -> tuple[str, Any]:
        waited = 0.0
        while not self._conn.poll(1.0):
            waited += 1.0
            if not self._proc.is_alive():
                self._stop()
                if starting:
                    return "error", f"--address {self.address}: the Ray driver process exited while connecting"
                raise ExecutorLost(self._lost_message())
            if timeout is not None and waited >= timeout:
                self._stop()
                return "error", f"--address {self.address}: no Ray cluster answered within {timeout:.0f} s"
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._stop()
            if starting:
                return "error", f"--address {self.address}: the Ray driver process exited while connecting"
            raise ExecutorLost(self._lost_message()) from None

    def _lost_message(self) -> str:
        where = "the private Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
        return f"{where} is gone (its head stopped or the connection broke; Ray's log: {self.log})"

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.is_alive():
            proc.terminate()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        self._conn.close()

    def close(self) -> None:
        """Disconnect from the cluster (and stop the private instance, if this executor started one)."""
        clean = False
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(("close",))
                self._proc.join(timeout=30)
                clean = self._proc.exitcode == 0
            except (BrokenPipeError, EOFError, OSError):
                pass
        self._stop()
        if clean:  # the driver's log is kept only when something went wrong
            with contextlib.suppress(OSError):
                os.unlink(self.log)
