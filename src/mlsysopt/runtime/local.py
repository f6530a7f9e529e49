"""In-process and process-pool executors (the default backends)."""

from __future__ import annotations

import functools
import inspect
import multiprocessing as mp
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime.base import MAX_RETRIES, Executor, ExecutorLost


class SerialExecutor(Executor):
    """Runs everything in this process, one item after another (workers = 1, and in tests).

    It takes no arguments.
    """

    backend = "serial"

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]``."""
        return [fn(x) for x in items]


#: How often a pool worker checks that the main process is still alive where the system has no pidfd (seconds).
PARENT_POLL_S = 0.5


def _init_worker(main: int, environ: dict[str, str]) -> None:
    """Take the main process's environment, leave Ctrl-C to it (no worker tracebacks) and exit when it is gone."""
    adopt_environ(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(main,), name="mlsysopt-main-watch", daemon=True).start()


def _exit_with(main: int) -> None:
    # A worker busy in a long item never reads the call queue, so a SIGKILLed main process would leave it running to
    # the end of its item. Its parent, the fork server, outlives the main process while any worker lives (each holds
    # the server's "alive" pipe), and PR_SET_PDEATHSIG would fire when a *thread* exits: so the worker watches the
    # main process itself, through a pidfd (readable once that process has exited).
    try:
        fd = os.pidfd_open(main)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd (Linux < 5.3, other systems): poll
        while process_alive(main):
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    select.select([fd], [], [])
    os._exit(1)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a zombie counts as alive until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fork_server(fn: Callable[..., Any]) -> mp.context.BaseContext:
    """multiprocessing's ``forkserver`` context, its server importing the module ``fn`` comes from when it starts.

    The server is a fresh interpreter (torch and numba start clean there, as in a spawned worker) started once per
    process; each pool worker is then a fork of it, with that module and what it imports (torch, PyG, numba: 2-6
    CPU-s per interpreter) already loaded, instead of importing them again in every worker and in every replacement
    pool. Only the first pool of a process chooses what the server imports; a later pool's workers import their own
    modules after the fork, as spawned ones would. The processes take the caller's environment of the time they
    start (:func:`adopt_environ`), but what a module read from it at import (OpenMP's thread count) is the server's.

    Args:
        fn: The function the processes will run (a ``functools.partial``, method or callable object too).

    Returns:
        The context to create the processes or the pool with.
    """
    if "forkserver" not in mp.get_all_start_methods():  # Windows: spawned processes, each importing for itself
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) if inspect.isroutine(fn) else type(fn).__module__
    if module and module != "__main__":
        ctx.set_forkserver_preload(["__main__", module])
    return ctx


def adopt_environ(environ: dict[str, str]) -> None:
    """Make this process's environment ``environ``: a fork of the fork server starts with the server's environment,
    from when it started, where a spawned process would have the parent's of now."""
    if environ != os.environ:
        os.environ.clear()
        os.environ.update(environ)


def _call_pickled(blob: bytes) -> bytes:
    """Run one item sent as plain pickle bytes and answer the same way.

    Plain pickle copies tensors by value; multiprocessing's own pickler would share them through file descriptors
    served by a helper thread of the sender, which prints a traceback when a worker is killed or interrupted
    mid-transfer.
    """
    fn, item = pickle.loads(blob)
    return pickle.dumps(fn(item), protocol=pickle.HIGHEST_PROTOCOL)


class LocalExecutor(Executor):
    """A pool of worker processes on this machine, forked from a fresh server process (:func:`fork_server`).

    When a worker dies (killed, out of memory), the pool is replaced and the items that had not finished are run
    again, at most ``max_retries`` times each; then :class:`ExecutorLost` names what kept failing.

    Args:
        workers: Worker processes (>= 1); the pool starts on the first :meth:`map`.
        max_retries: Times (>= 0) an item is re-run after the worker running it died.

    Raises:
        MlsysoptError: If ``workers`` is not an integer >= 1 or ``max_retries`` is negative.
    """

    backend = "local"

    def __init__(self, workers: int = 2, max_retries: int = MAX_RETRIES) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise MlsysoptError(f"workers must be an integer >= 1, got {workers!r}")
        if max_retries < 0:
            raise MlsysoptError(f"max_retries must be >= 0, got {max_retries}")
        self.workers = workers
        self.max_retries = max_retries
        self.restarts = 0  # pools replaced after a lost worker (read by tests and reports)
        self._pool: ProcessPoolExecutor | None = None

    def _ensure_pool(self, fn: Callable[[Any], Any]) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx, main = fork_server(fn), os.getpid()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker, initargs=(main, dict(os.environ))
            )
        return self._pool

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """Results of ``fn`` over ``items`` computed by the pool, in input order."""
        todo = list(items)
        results: list[Any] = [None] * len(todo)
        pending = list(range(len(todo)))
        attempts = [0] * len(todo)
        try:
            while pending:
                pool = self._ensure_pool(fn)
                futures: dict[int, Future] = {
                    i: pool.submit(_call_pickled, pickle.dumps((fn, todo[i]), protocol=pickle.HIGHEST_PROTOCOL))
                    for i in pending
                }
                wait(futures.values())
                lost = []
                for i, fut in futures.items():
                    exc = fut.exception()
                    if isinstance(exc, BrokenProcessPool):
                        lost.append(i)
                    elif exc is not None:
                        raise exc
                    else:
                        results[i] = pickle.loads(fut.result())
                if lost:
                    self._replace_pool()
                    for i in lost:
                        attempts[i] += 1
                    worst = max(lost, key=lambda i: attempts[i])
                    if attempts[worst] > self.max_retries:
                        raise ExecutorLost(
                            f"a worker process died {attempts[worst]} times while running item {worst} "
                            f"of {len(todo)} (killed, or out of memory?)"
                        )
                pending = lost
        except BaseException:
            if isinstance(self._pool, ProcessPoolExecutor) and pending:
                self._terminate()
            raise
        return results

    def _replace_pool(self) -> None:
        self.restarts += 1
        self.close()

    def _terminate(self) -> None:
        """Stop the workers at once (Ctrl-C, or an item raised): nothing queued behind them runs."""
        pool = self._pool
        if pool is None:
            return
        # ProcessPoolExecutor has no terminate(); its worker processes are in ``_processes``.
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.terminate()
        self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Shut the pool down."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
