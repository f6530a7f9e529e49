"""The Ray driver process behind :class:`~mlsysopt.runtime.ray_executor.RayExecutor`.

It connects to the cluster once, then serves requests from its parent over a pipe: ``("map", fn, items)`` runs one
task per item with at most ``workers`` in flight, ``("call", fn, args)`` runs a driver-side function (actors for
data-parallel jobs), ``("close",)`` disconnects. Replies are ``("ok", value)``, ``("raise", exception)`` (the
function's own exception, re-raised by the parent) or ``("lost", message)`` (workers lost more often than the
retries allow).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pickle
import signal
from collections.abc import Callable
from typing import Any

from mlsysopt.errors import MlsysoptError

#: Seconds the driver waits for a lost head before Ray ends it (Ray's default is a minute).
HEAD_TIMEOUT_S = 15
#: Seconds to wait for the task that reads a joined cluster's hash seed (:func:`match_hash_seed`)
SEED_PROBE_TIMEOUT_S = 30.0


def apply(fn: Callable[[Any], Any], item: Any) -> Any:
    """The one remote function: ``fn`` travels with each task (by reference), so any picklable callable works."""
    return fn(item)


def loopback_host(address: str | None) -> str | None:
    """The host of ``address`` when it is a loopback IP (a cluster of processes on this machine), else None."""
    if not address or address == "auto" or ":" not in address:
        return None
    host = address.rsplit(":", 1)[0]
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def worker_hash_seed(_: Any = None) -> str | None:
    """The ``PYTHONHASHSEED`` a worker runs with (a task's body)."""
    return os.environ.get("PYTHONHASHSEED")


def match_hash_seed(ray: Any, kwargs: dict[str, Any]) -> bool:
    """Give this job's workers on a joined cluster the string-hash seed of this process, where theirs differs.

    saga's schedulers break ties by iterating sets of task names, so with salted ``str`` hashes a placement's
    history changes between runs (the ``mlsysopt`` command fixes ``PYTHONHASHSEED=0`` for itself and its children:
    :mod:`mlsysopt.hashseed`). A cluster started elsewhere has its own: one task (no CPU reserved) reads it, and
    when it differs the driver connects again with the seed in the job's ``runtime_env`` (Ray then starts the job's
    workers with it: ~0.5 s more per connection, only on such clusters). A process without a fixed seed (unset or
    ``random``) changes nothing.

    Args:
        ray: The ``ray`` module, connected with ``ray.init(**kwargs)``.
        kwargs: The arguments of that ``ray.init``.

    Returns:
        bool: Whether the driver connected again with the seed.
    """
    want = os.environ.get("PYTHONHASHSEED")
    if want in (None, "", "random"):
        return False
    probe = ray.remote(num_cpus=0, max_retries=0)(worker_hash_seed)
    try:
        theirs = ray.get(probe.remote(), timeout=SEED_PROBE_TIMEOUT_S)
    except Exception:  # a cluster that cannot run the probe: its tasks will say why; the seed stays unknown
        return False
    if theirs == want:
        return False
    ray.shutdown()
    ray.init(**kwargs, runtime_env={"env_vars": {"PYTHONHASHSEED": want}})
    return True


def connect(ray: Any, address: str | None, workers: int | None) -> str | None:
    """Connect; None on success, else the one-line reason."""
    kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
    if address is None:  # "local": always a new private instance, never a cluster this machine happens to run
        kwargs["address"] = "local"
        kwargs["num_cpus"] = workers or 1
    else:
        kwargs["address"] = address
        host = loopback_host(address)
        if host is not None:  # a cluster of local processes: talk to its raylet at that loopback address
            kwargs["_node_ip_address"] = host
    try:
        ray.init(**kwargs)
        if address is not None:  # a private instance's workers inherit this process's environment
            match_hash_seed(ray, kwargs)
    except Exception as exc:  # Ray raises several types (connection, authentication, bad address)
        first = (str(exc).strip().splitlines() or [""])[0][:240]
        if address == "auto":
            where = "this machine's cluster (RAY_ADDRESS, or the one `ray start` recorded)"
        else:
            where = address or "a private local instance"
        return f"--address {address}: cannot connect to {where} ({type(exc).__name__}: {first})"
    return None


def _map(ray: Any, remote: Any, fn: Callable[[Any], Any], items: list[Any], workers: int) -> tuple[str, Any]:
    from ray import exceptions as rex  # deferred: Ray loads only when the ray backend is used

    results: list[Any] = [None] * len(items)
    refs: dict[Any, int] = {}
    nxt = 0
    try:
        while nxt < len(items) or refs:
            while nxt < len(items) and len(refs) < workers:
                refs[remote.remote(fn, items[nxt])] = nxt
                nxt += 1
            done, rest = ray.wait(list(refs), num_returns=1)
            if rest:  # collect everything else that is ready too, so free slots are refilled in one pass
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                done += more
            for ref, value in zip(done, ray.get(done), strict=True):
                results[refs.pop(ref)] = value
    except rex.RayTaskError as exc:  # the function raised: hand back its own exception
        _cancel(ray, refs)
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        if isinstance(cause, rex.RaySystemError):  # the task never ran: the worker could not load it
            return "raise", _not_runnable(cause)
        return "raise", _picklable(cause)
    except (rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError, rex.OwnerDiedError) as exc:
        _cancel(ray, refs)
        return "lost", f"Ray lost the workers of a task more often than its retries allow ({type(exc).__name__})"
    except rex.RaySystemError as exc:  # e.g. a worker cannot unpickle the task: its code is not installed there
        _cancel(ray, refs)
        return "raise", _not_runnable(exc)
    return "ok", results


def _not_runnable(exc: BaseException) -> BaseException:
    """One clear error for a task a worker could not even load (its module is missing there)."""

    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if "Error" in ln and "Traceback" not in ln), type(exc).__name__)
    return MlsysoptError(
        f"a Ray worker could not run the task ({why[:200]}): every node needs mlsysopt, the same version, "
        "and any module the task comes from"
    )


def _cancel(ray: Any, refs: dict[Any, int]) -> None:
    for ref in refs:
        with contextlib.suppress(Exception):  # already finished or gone
            ray.cancel(ref, force=True)


def _picklable(exc: BaseException) -> BaseException:

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return MlsysoptError(f"{type(exc).__name__}: {exc}")


def quiet_output(log: str) -> None:
    """Send this process's stdout/stderr (Ray's C++ and Python logging) to ``log``, not the user's terminal."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def driver_main(
    conn: Any, address: str | None, workers: int | None, max_retries: int, num_cpus: float, log: str
) -> None:
    """Entry point of the driver process (spawned by RayExecutor); its output goes to ``log``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    quiet_output(log)
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(HEAD_TIMEOUT_S))
    import ray  # deferred: Ray loads only when the ray backend is used

    why = connect(ray, address, workers)
    if why is not None:
        conn.send(("error", why))
        return
    cpus = int(ray.cluster_resources().get("CPU", 1))
    conn.send(("ready", cpus))
    remote = ray.remote(num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False)(apply)
    in_flight = workers or max(1, cpus)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "close":
            break
        try:
            if message[0] == "map":
                reply = _map(ray, remote, message[1], message[2], in_flight)
            else:
                reply = ("ok", message[1](*message[2]))
        except Exception as exc:
            reply = ("raise", _picklable(exc))
        conn.send(reply)
    ray.shutdown()
