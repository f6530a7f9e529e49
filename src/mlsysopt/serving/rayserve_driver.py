"""The Ray Serve engine's other side: the child process (Ray driver and open-loop HTTP client) and HTTP checks.

:func:`driver_main` runs in a process of its own (spawned by :class:`~mlsysopt.serving.rayserve.RayServeEngine`):
it starts or joins Ray, starts Ray Serve on 127.0.0.1, and answers the engine's requests — deploy a config
(declaratively, as ``serve run CONFIG`` does), warm up, measure a window, wait until healthy. Ray's own output goes
to a log file there. :func:`http_p99_ms` measures any deployment already serving (e.g. one ``serve run`` started).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.ports import free_port
from mlsysopt.runtime.ray_driver import connect, quiet_output
from mlsysopt.serving.loadgen import workload_arrivals
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.rayserve_config import APP_NAME, DEPLOYMENT
from mlsysopt.serving.space import Workload

#: seconds to wait for a deployment to run as asked (replicas started, model loaded)
DEPLOY_TIMEOUT_S = 180.0
#: logical CPUs of the private local Ray instance: enough for every configuration of a space to be placed (the
#: replicas share the machine's real cores, as the threads of the home engine do)
LOCAL_RAY_CPUS = 64
_LEAD_S = 0.02  # between the client reading a schedule and the window's start


def request_body(model: ServedModel, rows: int, seed: int = 0) -> bytes:
    """The HTTP body of one request of ``rows`` rows: every input's raw bytes, in the model's input order."""
    feed = model.make_batch(rows, np.random.default_rng(seed))
    return b"".join(np.ascontiguousarray(feed[n]).tobytes() for n in model.input_names)


def http_p99_ms(
    port: int, model_path: str | os.PathLike, rate: float, seconds: float, seed: int = 0, warm_s: float = 1.0
) -> float:
    """p99 latency (ms, client side) of a deployment already serving on 127.0.0.1:``port``, under open-loop Poisson
    load of ``rate`` req/s for ``seconds`` (one-row requests of the model at ``model_path``).

    What checks a deployment made by Ray Serve's own ``serve run``/``serve deploy`` from a tune's config file. The
    client first sends ``warm_s`` seconds of the same load, not counted, over the connections it then measures with,
    as the engine's client is warm when it measures (otherwise the connections open during the measured burst).

    Raises:
        MlsysoptError: If any request fails.
    """
    model = ServedModel(model_path)
    body = request_body(model, 1, seed)
    url = f"http://127.0.0.1:{port}/"
    warm = workload_arrivals(Workload(rate), max(1, round(rate * warm_s)), seed + 1) if warm_s > 0 else None
    arrivals = workload_arrivals(Workload(rate), max(1, round(rate * seconds)), seed)

    async def go() -> dict[str, Any]:
        client = await _client()
        try:
            if warm is not None:
                await _window(client, url, body, warm, 60.0)
            return await _window(client, url, body, arrivals, 60.0)
        finally:
            await client.close()

    out = asyncio.run(go())
    if out["failed"] or not np.isfinite(out["latency_ms"]).all():
        raise MlsysoptError(f"{url}: {out['failed']} of {out['sent']} requests failed")
    return float(np.percentile(out["latency_ms"], 99))


def driver_main(conn: Any, address: str | None, port: int | None, log: str) -> None:
    """Entry point of the child process: start (or join) Ray and Ray Serve, then deploy and measure on request.

    ``port`` None: a free port is picked (and picked again if another process took it before the proxy bound it).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle

    quiet_output(log)

    import ray  # deferred: ray loads only in the driver's child process
    from ray import serve  # deferred: ray loads only in the driver's child process

    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    why = connect(ray, address, LOCAL_RAY_CPUS)
    if why is not None:
        conn.send(("error", why))
        return
    from ray.serve.context import _get_global_client  # deferred: ray loads only in the driver's child process

    serve_was_running = _get_global_client(raise_if_no_controller_running=False) is not None
    started = _refuse_other_applications(serve, address) or _start_serve(serve, port)
    endpoint = started if isinstance(started, str) else _http_endpoint(ray, started)
    if isinstance(endpoint, str):
        conn.send(("error", endpoint))
        ray.shutdown()
        return
    host, port = endpoint
    conn.send(("ready", {"ray": ray.__version__, "host": host, "port": port}))
    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(_client())
    url = f"http://{host}:{port}/"
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if kind == "stop":
            break
        try:
            if kind == "deploy":
                reply = _deploy(serve, message[1], message[2])
            elif kind == "warmup":
                loop.run_until_complete(_warmup(client, url, message[1], message[2]))
                reply = ("ok", None)
            elif kind == "window":
                before = _replicas(ray)
                out = loop.run_until_complete(_window(client, url, *message[1:]))
                out["replaced"] = sorted(set(before) - set(_replicas(ray)))
                reply = ("ok", out)
            elif kind == "healthy":
                reply = _wait_running(serve, message[1], message[2])
            else:
                reply = ("error", f"unknown request {kind!r}")
        except Exception as exc:  # one line for the parent; Ray's own traceback is in the log
            reply = ("error", f"Ray Serve: {_first(exc)}")
        conn.send(reply)
    with contextlib.suppress(Exception):
        loop.run_until_complete(client.close())
    with contextlib.suppress(Exception):
        if address is not None:  # leave a joined cluster as it was: no application, and no Serve if none ran
            serve.delete(APP_NAME)
            if not serve_was_running and not serve.status().applications:
                serve.shutdown()
    ray.shutdown()
    with contextlib.suppress(OSError, BrokenPipeError):
        conn.send(("stopped", None))


def _refuse_other_applications(serve: Any, address: str | None) -> str | None:
    """Joining a cluster whose Ray Serve runs other applications: the reason to refuse, else None.

    mlsysopt deploys declaratively (what ``serve deploy`` does), and a declarative deployment deletes every
    application its config does not list, so it never joins a Serve instance that serves someone else.
    """
    if address is None:
        return None
    apps = sorted(name for name in serve.status().applications if name != APP_NAME)
    if not apps:
        return None
    return (
        f"--address {address}: Ray Serve there already runs {len(apps)} application(s) ({', '.join(apps)}); "
        "mlsysopt deploys declaratively (as `serve deploy` does), which would delete them: use a Ray cluster "
        "without Serve applications, or leave --address out (a private Ray)"
    )


def _http_endpoint(ray: Any, asked: int) -> tuple[str, int] | str:
    """Where this process reaches Ray Serve's proxy: ``(host, port)``, or the reason it cannot.

    A Serve instance that was already running keeps its own HTTP options (``serve.start`` only logs that the new
    ones differ), so the port is read back from the controller. The proxy runs on the head node (``HeadOnly``):
    127.0.0.1 when that is this machine, else the head's address, if the proxy listens beyond loopback there.
    """
    from ray.serve.context import _get_global_client  # deferred: ray loads only in the driver's child process

    http = _get_global_client().http_config
    host, port = str(http.host), int(http.port or asked)
    head = next(
        (n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive") and "node:__internal_head__" in n["Resources"]),
        None,
    )
    if head is None or head == ray.util.get_node_ip_address():
        return "127.0.0.1", port
    if host in ("127.0.0.1", "localhost", "::1"):
        return (
            f"Ray Serve on the head node {head} listens on {host}:{port} only, which this machine cannot reach "
            "(start Serve there with http_options host 0.0.0.0, or run mlsysopt on the head)"
        )
    return head, port


def _start_serve(serve: Any, port: int | None) -> int | str:
    """Start Ray Serve's HTTP proxy on 127.0.0.1; the port it listens on, or one line saying why it did not start."""
    tries = 1 if port is not None else 3
    for attempt in range(tries):
        at = port if port is not None else free_port()
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": at}, proxy_location="HeadOnly")
            return at
        except Exception as exc:
            why = f"Ray Serve did not start on 127.0.0.1:{at} ({_first(exc)})"
            with contextlib.suppress(Exception):
                serve.shutdown()
            if "bind" not in why or attempt == tries - 1:
                return why
    return "Ray Serve did not start"  # not reached


def _first(exc: BaseException) -> str:
    """One line for an exception: its type and first line, or for an error raised inside a Ray actor the last line
    of the remote traceback (the first only names the actor)."""
    lines = [s.strip() for s in str(exc).strip().splitlines() if s.strip()]
    if not lines:
        return type(exc).__name__
    if "ray::" in lines[0] and len(lines) > 1:
        return lines[-1][:300]
    return f"{type(exc).__name__}: {lines[0]}"[:300]


def _deploy(serve: Any, spec: dict[str, Any], model: str) -> tuple[str, Any]:
    """Deploy the config-file dict ``spec`` the way ``serve run CONFIG`` does, and wait until it serves as asked.

    Declarative deployment is what makes Ray Serve apply a change of ``user_config``, ``num_replicas`` or
    ``max_ongoing_requests`` without restarting replicas (an application deployed from Python gets a new code
    version each time, so every change would restart them). The client call is the one Ray Serve's own ``serve run``
    makes.
    """
    from ray.serve.context import _get_global_client  # deferred: ray loads only in the driver's child process
    from ray.serve.schema import ServeDeploySchema  # deferred: ray loads only in the driver's child process

    schema = ServeDeploySchema.parse_obj({k: v for k, v in spec.items() if k != "http_options"})
    _get_global_client().deploy_apps(schema)
    want = spec["applications"][0]["deployments"][0]["num_replicas"]
    time.sleep(0.2)  # the controller picks the new target up
    return _wait_running(serve, want, model)


def _wait_running(serve: Any, want: int, model: str, timeout: float = DEPLOY_TIMEOUT_S) -> tuple[str, Any]:
    """Wait until the application runs ``want`` healthy replicas (a replica that cannot start: the model)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = serve.status().applications.get(APP_NAME)
        status = "" if app is None else str(app.status)
        if status.endswith("DEPLOY_FAILED"):
            lines = [s.strip() for s in app.message.splitlines() if s.strip()] or ["no message"]
            cause = next((s for s in reversed(lines) if "Error" in s), lines[0])
            return "model", f"{model}: the model failed to load in a Ray Serve replica ({cause[:300]})"
        dep = None if app is None else app.deployments.get(DEPLOYMENT)
        if status.endswith("RUNNING") and dep is not None and str(dep.status).endswith("HEALTHY"):
            states = {str(k).rsplit(".", 1)[-1]: v for k, v in dep.replica_states.items()}
            if states == {"RUNNING": want}:
                return "ok", None
        time.sleep(0.2)
    return "error", f"Ray Serve: the deployment was not running as asked within {timeout:.0f} s"


def _replicas(ray: Any) -> list[str]:
    """Names of the live replica actors of the deployment (a new name: Ray Serve replaced a replica)."""
    prefix = f"SERVE_REPLICA::{APP_NAME}#{DEPLOYMENT}#"
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix))


async def _client() -> Any:
    import aiohttp  # deferred: aiohttp loads only when requests are sent

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def _warmup(client: Any, url: str, bodies: list[bytes], n: int) -> None:
    for k in range(n):
        async with client.post(url, data=bodies[k % len(bodies)]) as r:
            await r.read()


async def _window(client: Any, url: str, body: bytes, arrivals: np.ndarray, max_seconds: float) -> dict[str, Any]:
    """Send ``arrivals`` open loop; latency from each scheduled arrival to its reply (inf: none by the deadline)."""
    n = len(arrivals)
    latency = np.full(n, math.inf)
    state = {"in_flight": 0, "failed": 0, "first_error": None}
    samples: list[int] = []

    async def one(i: int, scheduled: float) -> None:
        try:
            async with client.post(url, data=body) as r:
                await r.read()
                ok = r.status == 200
                error = None if ok else f"HTTP {r.status}"
        except Exception as exc:  # connection reset by a dying replica or proxy
            ok, error = False, _first(exc)
        state["in_flight"] -= 1
        if ok:
            latency[i] = (time.perf_counter() - scheduled) * 1000.0
        else:
            state["failed"] += 1
            state["first_error"] = state["first_error"] or error

    start = time.perf_counter() + _LEAD_S
    deadline = start + max_seconds
    tasks, lag = [], 0.0
    for i, a in enumerate(arrivals):
        scheduled = start + float(a)
        if scheduled > deadline:
            break
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = max(lag, time.perf_counter() - scheduled)
        samples.append(state["in_flight"])
        state["in_flight"] += 1
        tasks.append(asyncio.ensure_future(one(i, scheduled)))
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(deadline - time.perf_counter(), 0.0))
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    sent = len(tasks)
    finished = latency[:sent]
    end = time.perf_counter()
    if sent and np.isfinite(finished).all():
        end = start + float(np.max(arrivals[:sent] + finished / 1000.0))
    return {
        "start": start,
        "end": end,
        "sent": sent,
        "latency_ms": finished,
        "failed": state["failed"],
        "first_error": state["first_error"],
        "in_flight": samples,
        "lag_ms": lag * 1000.0,
    }
