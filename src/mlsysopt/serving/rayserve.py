"""Ray Serve as a serving engine: the model deployed as an HTTP application, measured by an open-loop HTTP client.

:class:`RayServeEngine` is one more :class:`~mlsysopt.serving.backend.Backend`: every tuner works on it unchanged.
It starts a private local Ray instance with Ray Serve on loopback (or joins ``--address``), deploys
:mod:`mlsysopt.serving.rayserve_app` with the configuration's options (:mod:`mlsysopt.serving.rayserve_config`),
and measures one window by sending the window's Poisson arrivals as HTTP requests, open loop, from a process of its
own: latency runs from each request's *scheduled* arrival to its reply, client side, so the HTTP proxy, the router,
the batcher and the replica all count, as a user of the service sees them.

The Ray driver and the HTTP client share one child process (Ray's logging goes to a file there, not to the user's
terminal; the head's death ends that process, not the user's run). A configuration change re-deploys only what
changed: batching and the session options (``user_config``) and ``max_ongoing_requests`` in place, replicas added or
removed, replicas restarted only for a new ``num_cpus``.

A window in which requests fail (a replica died: Ray Serve restarts it) is measured again once, after the
application is healthy; a second failure stops the run with one line (the checkpoint keeps every measurement).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import socket
import tempfile
import time
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidModel, InvalidSpace, MlsysoptError
from mlsysopt.runtime.ray_executor import check_reachable
from mlsysopt.serving.backend import Backend, Measurement, summarize
from mlsysopt.serving.loadgen import window_requests, workload_arrivals
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.rayserve_config import deployment_options, model_inputs, serve_config
from mlsysopt.serving.rayserve_driver import DEPLOY_TIMEOUT_S, driver_main, request_body
from mlsysopt.serving.space import Config, Workload
from mlsysopt.text import plural

#: seconds to wait for Ray and Ray Serve to start (or join)
START_TIMEOUT_S = 180.0


def check_port(port: int | None) -> int | None:
    """``port`` if it is free on 127.0.0.1 (else one clear error); None stays None (the driver picks one)."""
    if port is None:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError as exc:
            raise MlsysoptError(
                f"--port {port}: the HTTP port is taken on 127.0.0.1 ({exc.strerror}); choose another or leave "
                "--port out (a free one is picked)"
            ) from None
    return int(port)


class RayServeEngine(Backend):
    """Serves a :class:`ServedModel` on Ray Serve under a configuration and measures it over HTTP (module doc).

    Args:
        model: The ONNX model to serve.
        n_requests: Most requests per measurement window, >= 1.
        max_seconds: Longest window in seconds, > 0.
        window_s: A window ends after this many seconds of arrivals or ``n_requests``, whichever comes first
            (None: always ``n_requests``).
        warmup: Untimed requests before each window, >= 0.
        slo_ms: p99 SLO in ms used for the violation rate (None: no violation rate).
        max_threads: Cap on each thread knob of a configuration (None: the machine's cores).
        seed: Seed of the arrival schedules.
        address: None (a private local Ray instance), ``"auto"`` or ``HOST:PORT`` of a Ray head.
        port: HTTP port of Ray Serve's proxy on 127.0.0.1 (None: a free one).
        log: File for Ray's own output (None: a temporary file).

    Raises:
        InvalidSpace: For a bad size or time.
        MlsysoptError: If the port is taken, Ray cannot be reached or Ray Serve does not start.
    """

    def __init__(
        self,
        model: ServedModel,
        n_requests: int = 200,
        max_seconds: float = 10.0,
        window_s: float | None = None,
        warmup: int = 10,
        slo_ms: float | None = None,
        max_threads: int | None = None,
        seed: int = 0,
        address: str | None = None,
        port: int | None = None,
        log: str | None = None,
    ) -> None:
        if n_requests < 1 or warmup < 0 or not max_seconds > 0 or (window_s is not None and not window_s > 0):
            raise InvalidSpace(
                f"rayserve engine: n_requests={n_requests} must be >= 1, warmup={warmup} >= 0, "
                f"max_seconds={max_seconds} and window_s={window_s} > 0"
            )

        self.model = model
        self.n_requests, self.max_seconds, self.window_s = int(n_requests), float(max_seconds), window_s
        self.warmup, self.slo_ms, self.seed = int(warmup), slo_ms, int(seed)
        self.cores = os.cpu_count() or 1
        self.max_threads = max_threads if max_threads is not None else self.cores
        self.address = address
        check_reachable(address)
        self.port = check_port(port)
        self.config: Config | None = None
        self.log = log or os.path.join(tempfile.gettempdir(), f"mlsysopt-rayserve-{os.getpid()}.log")
        self.inputs = model_inputs(model)
        self.redeploys = {"in_place": 0, "restarted": 0}
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=driver_main, args=(child, address, self.port, self.log), name="mlsysopt-rayserve", daemon=True
        )
        self._proc.start()
        child.close()
        kind, info = self._receive(START_TIMEOUT_S, "starting Ray Serve")
        if kind != "ready":
            self.close()
            raise MlsysoptError(info)
        self.versions = info
        self.host, self.port = str(info["host"]), int(info["port"])  # an already running Serve keeps its own

    # ------------------------------------------------------------------ the child process
    def _receive(self, timeout: float, doing: str) -> tuple[str, Any]:
        if not self._conn.poll(timeout):
            if not self._proc.is_alive():
                return "error", self._lost(doing)
            self.close()
            raise MlsysoptError(f"Ray Serve: no answer after {timeout:.0f} s {doing} (Ray's log: {self.log})")
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return "error", self._lost(doing)

    def _lost(self, doing: str) -> str:
        where = "the private Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
        return f"Ray Serve: {where} went away while {doing} (Ray's log: {self.log})"

    def _call(self, timeout: float, doing: str, *message: Any) -> Any:
        if not self._proc.is_alive():
            raise MlsysoptError(self._lost(doing))
        self._conn.send(message)
        kind, info = self._receive(timeout, doing)
        if kind == "error":
            raise MlsysoptError(info)
        if kind == "model":
            raise InvalidModel(info)
        return info

    # ------------------------------------------------------------------ configuration
    def configure(self, config: Config) -> None:
        """Deploy ``config`` (only what changed: ``user_config`` and max ongoing requests in place, replicas added,
        restarted for num_cpus)."""
        config.check(self.max_threads)
        self.model.check_batch(config.max_batch)
        if config == self.config:
            return
        old = None if self.config is None else deployment_options(self.config)
        new = deployment_options(config)
        restarted = old is None or old["ray_actor_options"] != new["ray_actor_options"]
        spec = serve_config(
            config, str(self.model.path.resolve()), self.inputs, self.port, module="mlsysopt.serving.rayserve_app"
        )
        self._call(DEPLOY_TIMEOUT_S, f"deploying {config.label()}", "deploy", spec, str(self.model.path))
        self.redeploys["restarted" if restarted else "in_place"] += 1
        self.config = config

    # ------------------------------------------------------------------ one window
    def _body(self, rows: int) -> bytes:
        return request_body(self.model, rows, self.seed)

    def arrivals(self, workload: Workload, window: int = 0) -> np.ndarray:
        """The arrival times (s from the window start) :meth:`measure` sends: fixed by (seed, workload, window)."""
        n = window_requests(workload.rate, self.n_requests, self.window_s)
        return workload_arrivals(workload, n, self.seed, window)

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """Deploy ``config`` if needed, warm it up, send the window's arrivals over HTTP and summarize them."""
        t_wall = time.perf_counter()
        size = workload.request_size
        self.model.check_request_size(size)
        self.configure(config)
        body = self._body(size)
        warm = [self._body(max(size, (config.max_batch // size) * size)), body]
        arrivals = self.arrivals(workload, window)
        retried = 0
        while True:
            self._call(60.0 + self.warmup, "warming up", "warmup", warm, self.warmup)
            out = self._call(self.max_seconds + 60.0, "measuring a window", "window", body, arrivals, self.max_seconds)
            broken = out["failed"] > 0 or bool(out["replaced"])
            if not broken or retried:
                break
            # a replica died (its requests failed, or Ray Serve re-routed them to a new one, late): this window does
            # not measure the configuration; measure it again once Ray Serve recovered
            retried += 1
            self._call(DEPLOY_TIMEOUT_S, "waiting for the application to recover", "healthy", config.instances, "")
        if broken:
            why = (
                f"first error: {out['first_error']}" if out["failed"] else f"replicas replaced: {len(out['replaced'])}"
            )
            raise MlsysoptError(
                f"Ray Serve: a replica died in two windows running for {config.label()} at {workload.rate:g} req/s "
                f"({out['failed']} of {out['sent']} requests failed; {why}); the checkpoint keeps every finished "
                "measurement: --resume continues"
            )
        start, sent = out["start"], out["sent"]
        lat = out["latency_ms"]
        done = np.isfinite(lat)
        first = start + float(arrivals[0]) if sent else start
        end_abs = out["end"]
        latencies = np.where(done, lat, (end_abs - (start + arrivals[:sent])) * 1000.0)
        m = summarize(
            config,
            workload,
            latencies,
            n_requests=sent,
            dropped=0,
            queue_samples=np.asarray(out["in_flight"]),
            duration_s=max(end_abs - first, 1e-9),
            slo_ms=self.slo_ms,
            wall_s=time.perf_counter() - t_wall,
            arrival_span_s=float(arrivals[sent - 1] - arrivals[0]) if sent > 1 else None,
        )
        m.extra = {
            "finished": int(done.sum()),
            "failed": int(out["failed"]),
            "retried_windows": retried,
            "pacer_max_lag_ms": float(out["lag_ms"]),
            "engine": "rayserve",
        }
        return m

    def describe(self) -> str:
        """What serves, where, and that the numbers are real client-side measurements."""
        where = "a private local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
        return (
            f"Ray Serve {self.versions.get('ray', '?')} serving {self.model.path.name} on {where} "
            f"(http://{self.host}:{self.port}, {plural(self.cores, 'core')}), HTTP load from its own process "
            "(real measurements, client side)"
        )

    def close(self) -> None:
        """Delete the application, stop Ray Serve and the private Ray instance, end the child process."""
        proc = getattr(self, "_proc", None)
        if proc is None:
            return
        if proc.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(("stop",))
                if self._conn.poll(60.0):
                    self._conn.recv()
        proc.join(10.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        with contextlib.suppress(OSError):
            self._conn.close()
        self._proc = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        label = self.config.label() if self.config else None
        return f"RayServeEngine({self.model.path.name}, port={self.port}, config={label})"
