"""Data-parallel jobs: ``world_size`` processes joined in one torch.distributed (gloo) group, locally or on Ray.

``run_data_parallel(fn, world_size, payload, backend="ray", address=...)`` starts one process per rank (Ray
actors placed by the cluster, or local processes forked from a fresh fork server), initializes a gloo process group
between them (rank 0 picks the rendezvous address on its own node), calls ``fn(rank, world_size, payload)`` in each
and returns the results in rank order. ``fn`` synchronizes through ``torch.distributed`` (all-reduce of gradients, for
example). A lost process fails the whole job with :class:`~mlsysopt.runtime.base.ExecutorLost`: data-parallel
ranks cannot be re-run alone, so the caller resumes from its last checkpoint instead.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import ExecutorLost
from mlsysopt.runtime.local import adopt_environ, fork_server
from mlsysopt.runtime.ray_executor import RayExecutor

#: Seconds the ranks wait for each other at the rendezvous and in each collective.
TIMEOUT_S = 120


def rendezvous_address(host: str | None = None) -> tuple[str, int]:
    """(IP, free port) on this machine for rank 0 to listen on; ``host`` defaults to Ray's node IP or loopback."""
    if host is None:
        try:
            import ray  # deferred: Ray loads only when the rank runs under Ray

            host = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        except ModuleNotFoundError:
            host = "127.0.0.1"
    with socket.socket() as s:
        s.bind((host, 0))
        return host, int(s.getsockname()[1])


def run_rank(fn: Callable[[int, int, Any], Any], rank: int, world_size: int, init: str, payload: Any) -> Any:
    """One rank: join the gloo group at ``init`` (``tcp://IP:PORT``), run ``fn``, leave the group."""

    import torch.distributed as dist  # deferred: torch loads only when a rank joins the group

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size,
                            timeout=dt.timedelta(seconds=TIMEOUT_S))  # fmt: skip
    try:
        return fn(rank, world_size, payload)
    finally:
        dist.destroy_process_group()


class _RankActor:
    """A Ray actor holding one rank (made remote lazily, so Ray stays an optional import)."""

    def address(self) -> tuple[str, int]:
        return rendezvous_address()

    def run(self, fn: Callable[[int, int, Any], Any], rank: int, world_size: int, init: str, payload: Any) -> Any:
        return run_rank(fn, rank, world_size, init, payload)


def _local_rank(args: tuple[Callable, int, int, str, Any], queue: Any, environ: dict[str, str]) -> None:
    fn, rank, world, init, payload = args
    adopt_environ(environ)
    try:
        queue.put((rank, True, run_rank(fn, rank, world, init, payload)))
    except BaseException as exc:  # reported to the parent, which raises it
        queue.put((rank, False, exc))


def _run_local(fn: Callable, world_size: int, payload: Any) -> list[Any]:
    ctx = fork_server(fn)
    host, port = rendezvous_address("127.0.0.1")
    init = f"tcp://{host}:{port}"
    queue = ctx.Queue()
    jobs = [(fn, r, world_size, init, payload) for r in range(world_size)]
    procs = [ctx.Process(target=_local_rank, args=(job, queue, dict(os.environ))) for job in jobs]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    try:
        while len(results) < world_size:
            try:
                rank, ok, value = queue.get(timeout=1.0)
            except Exception:  # queue.Empty: check that every rank is still alive
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
                if dead:
                    code = procs[dead[0]].exitcode
                    raise ExecutorLost(f"data-parallel rank {dead[0]} died (exit code {code})") from None
                continue
            if not ok:
                raise value
            results[rank] = value
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)
    return [results[r] for r in range(world_size)]


def ray_ranks(fn: Callable, world_size: int, payload: Any) -> list[Any]:
    """In the Ray driver process: one actor per rank, rendezvous on rank 0's node, run, gather in rank order."""
    import ray  # deferred: Ray loads only when the ray backend is used
    from ray import exceptions as rex  # deferred: Ray loads only when the ray backend is used

    actor_cls = ray.remote(num_cpus=1, max_restarts=0)(_RankActor)
    actors = [actor_cls.remote() for _ in range(world_size)]
    try:
        host, port = ray.get(actors[0].address.remote())
        init = f"tcp://{host}:{port}"
        return ray.get([a.run.remote(fn, r, world_size, init, payload) for r, a in enumerate(actors)])
    except rex.RayTaskError as exc:
        raise (exc.cause if getattr(exc, "cause", None) is not None else exc) from None
    except (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError) as exc:
        what = type(exc).__name__
        raise ExecutorLost(f"a data-parallel rank was lost ({what}); resume from the checkpoint") from None
    finally:
        for a in actors:
            ray.kill(a)


def run_data_parallel(
    fn: Callable[[int, int, Any], Any],
    world_size: int,
    payload: Any = None,
    backend: str = "local",
    address: str | None = None,
) -> list[Any]:
    """``[fn(rank, world_size, payload) for rank in range(world_size)]``, run in one gloo group.

    Args:
        fn: a module-level function (it is pickled by reference to each rank).
        world_size: number of ranks (processes), >= 1.
        payload: any picklable value every rank receives.
        backend: ``local`` (processes on this machine, forks of a fork server) or ``ray`` (one actor per rank).
        address: the Ray cluster (``None``: a private local instance; ``auto``; ``HOST:PORT``).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise MlsysoptError(f"world_size must be an integer >= 1, got {world_size!r}")
    if backend == "local":
        return _run_local(fn, world_size, payload)
    if backend == "ray":
        with RayExecutor(address, workers=world_size) as executor:
            return executor.run_in_driver(ray_ranks, fn, world_size, payload)
    raise MlsysoptError(f"unknown backend '{backend}' (choose from: local, ray)")
