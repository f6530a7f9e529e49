"""The real serving engine: ONNX Runtime sessions behind a dynamic batcher, measured under open-loop Poisson load.

Semantics (the SimPy simulator models exactly these):

* One shared FIFO request queue of at most ``queue_cap`` requests; a request arriving while it is full is
  dropped (and counted). The queue length is sampled at every arrival, before the request joins.
* ``config.instances`` worker threads, each with its own ONNX Runtime session (``intra_threads``,
  ``inter_threads``, ``execution_mode``). ONNX Runtime releases the GIL in ``run``, so instances truly compute in
  parallel.
* Idle workers line up to form batches, one at a time: the worker at the head takes the oldest request, then
  keeps taking queued requests while whole requests fit in ``max_batch`` rows (a batch holds at least one
  request, even one larger than ``max_batch``), waiting for more arrivals until ``batch_timeout_ms`` has passed
  since the first request's *arrival* (if that is already past, it takes only what is queued now, no waiting).
  It then leaves the line, concatenates the rows, runs the session once, and stamps every request done.
* Requests arrive open-loop at Poisson times (``workload.rate`` per second, ``workload.request_size`` rows
  each, fixed by ``seed`` and the window number), paced by a :class:`~mlsysopt.serving.loadgen.LoadGenerator` in
  its own process; latency runs from the *scheduled* arrival to the end of the batch's ``run``.
* The window ends when every request finished or ``max_seconds`` passed since the window *started* (so a very
  low rate cannot keep it open for the first arrival); arrivals scheduled later are not sent; requests still
  queued or in service then count with their age as latency, and queued ones are discarded.

Before each window the engine runs ``warmup`` untimed batches, one at a time, round-robin over the workers'
sessions (alternately of one request and of the largest batch), so first-run allocations stay out of it.
"""

from __future__ import annotations

import collections
import math
import os
import threading
import time

import numpy as np

from mlsysopt.errors import InvalidModel, InvalidSpace
from mlsysopt.serving.backend import Backend, Measurement, summarize
from mlsysopt.serving.loadgen import LoadGenerator, window_requests, workload_arrivals
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.space import Config, Workload
from mlsysopt.text import plural


class _Request:
    __slots__ = ("arrival", "done", "rows", "submitted")

    def __init__(self, arrival: float, rows: int, submitted: float) -> None:
        self.arrival = arrival
        self.rows = rows
        self.submitted = submitted
        self.done: float | None = None


class Engine(Backend):
    """Serves a :class:`ServedModel` with ONNX Runtime under a configuration and measures it (see module doc).

    ``max_threads`` caps each thread knob (default: the machine's cores); ``slo_ms`` sets the violation rate.

    Args:
        model: The ONNX model to serve.
        n_requests: Requests offered per measurement window, >= 1.
        max_seconds: Longest window in seconds, > 0.
        warmup: Untimed batches before each window, >= 0.
        slo_ms: p99 SLO in ms used for the violation rate (None: no violation rate).
        queue_cap: Request queue capacity, >= 1; arrivals beyond it are dropped.
        max_threads: Cap on each thread knob of a configuration (None: the machine's cores).
        seed: Seed of the arrival schedules.
        window_s: A window ends after this many seconds of arrivals or ``n_requests``, whichever comes first
            (None: always ``n_requests``).

    Raises:
        InvalidSpace: If ``n_requests`` or ``queue_cap`` < 1, ``warmup`` < 0, ``max_seconds`` or ``window_s`` <= 0.
    """

    def __init__(
        self,
        model: ServedModel,
        n_requests: int = 200,
        max_seconds: float = 10.0,
        warmup: int = 10,
        slo_ms: float | None = None,
        queue_cap: int = 256,
        max_threads: int | None = None,
        seed: int = 0,
        window_s: float | None = None,
    ) -> None:
        bad_window = window_s is not None and not window_s > 0
        if n_requests < 1 or queue_cap < 1 or warmup < 0 or not max_seconds > 0 or bad_window:
            raise InvalidSpace(
                f"engine: n_requests={n_requests} and queue_cap={queue_cap} must be >= 1, "
                f"warmup={warmup} >= 0, max_seconds={max_seconds} and window_s={window_s} > 0"
            )
        self.window_s = window_s
        self.model = model
        self.n_requests = int(n_requests)
        self.max_seconds = float(max_seconds)
        self.warmup = int(warmup)
        self.slo_ms = slo_ms
        self.queue_cap = int(queue_cap)
        self.cores = os.cpu_count() or 1
        self.max_threads = max_threads if max_threads is not None else self.cores
        self.seed = int(seed)
        self.config: Config | None = None
        self._cond = threading.Condition()
        self._line = threading.Lock()  # held by the one worker forming a batch
        self._queue: collections.deque[_Request] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._sessions: list = []
        self._shape: tuple[int, ...] | None = None  # (instances, intra, inter, mode) the threads were built for
        self._loadgen: LoadGenerator | None = None
        self._stop = False
        self._open = False
        self._reset_window()

    # ------------------------------------------------------------------ configuration
    def _check(self, config: Config) -> None:
        config.check(self.max_threads)
        self.model.check_batch(config.max_batch)

    def configure(self, config: Config) -> None:
        """Switch to ``config`` in-process: rebuild worker threads and sessions if their knobs changed."""
        self._check(config)
        inter = config.effective_inter
        shape = (config.instances, config.intra_threads, inter, config.execution_mode)
        if shape != self._shape:
            self._stop_threads()
            self._sessions = [
                self.model.session(config.intra_threads, inter, config.execution_mode, slot=k)
                for k in range(config.instances)
            ]
            self._threads = [
                threading.Thread(target=self._work, args=(s,), name=f"mlsysopt-worker-{k}", daemon=True)
                for k, s in enumerate(self._sessions)
            ]
            for t in self._threads:
                t.start()
            self._shape = shape
        with self._cond:
            self.config = config

    def start(self) -> LoadGenerator:
        """Start the load generator's process (once; :meth:`measure` does it when needed)."""
        if self._loadgen is None:
            self._loadgen = LoadGenerator()
        return self._loadgen

    def _stop_threads(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self._threads = []
        self._shape = None
        with self._cond:
            self._stop = False

    def close(self) -> None:
        """Stop the worker threads and the load generator process (the sessions stay cached in the model)."""
        self._stop_threads()
        if self._loadgen is not None:
            self._loadgen.close()
            self._loadgen = None

    def restart(self) -> None:
        """New worker threads and a new load generator process for the next window (the sessions are kept).

        Where the threads and the pacer land on the cores moves a sub-millisecond latency by tens of percent and
        stays put for the life of the processes, so windows in one process agree more than two runs do.
        """
        self.close()
        self.model.drop_sessions()

    # ------------------------------------------------------------------ workers
    def _work(self, session: object) -> None:
        last_end = -math.inf
        while True:
            with self._line, self._cond:
                waited = not self._queue
                while not self._queue and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                batch = self._take_batch()
                stale = not self._open
                if not stale:
                    self._batches += 1
                    self._batch_rows += sum(r.rows for r in batch)
            if not stale:
                try:
                    n = len(batch)
                    feed = {k: np.concatenate([v] * n) for k, v in self._feed.items()} if n > 1 else self._feed
                    t_run = time.perf_counter()
                    session.run(None, feed)  # type: ignore[attr-defined]
                    now = time.perf_counter()
                    for r in batch:
                        r.done = now
                    # rows, run start and end, whether it waited for a request, the gap since its previous batch
                    # ended, and when the batch's first request reached the server
                    rows = sum(r.rows for r in batch)
                    self._batch_log.append((rows, t_run, now, waited, t_run - last_end, batch[0].submitted))
                    last_end = now
                except Exception as exc:
                    with self._cond:
                        self._error = self._error or exc
            with self._cond:
                self._busy -= 1
                self._finished += len(batch)
                self._cond.notify_all()

    def _take_batch(self) -> list[_Request]:
        """Pop the next batch (caller holds the condition); see the module docstring for the rule."""
        cfg = self.config
        assert cfg is not None
        first = self._queue.popleft()
        self._busy += 1
        batch, rows = [first], first.rows
        deadline = first.arrival + cfg.batch_timeout_ms / 1000.0
        while rows < cfg.max_batch:
            if self._queue:
                if rows + self._queue[0].rows > cfg.max_batch:
                    break
                r = self._queue.popleft()
                batch.append(r)
                rows += r.rows
                continue
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not self._open or self._stop:
                break
            self._cond.wait(remaining)
        return batch

    # ------------------------------------------------------------------ one window
    def _reset_window(self) -> None:
        self._requests: list[_Request] = []
        self._queue_samples: list[int] = []
        self._dropped = 0
        self._finished = 0
        self._busy = 0
        self._batches = 0
        self._batch_rows = 0
        self._batch_log: list[tuple[int, float, float, bool, float, float]] = []
        self._error: Exception | None = None
        self._feed: dict[str, np.ndarray] = {}
        self._rows = 1
        self._last_arrival = 0.0

    def _submit(self, _i: int, scheduled: float, received: float) -> None:
        with self._cond:
            if not self._open:
                return
            qlen = len(self._queue)
            self._queue_samples.append(qlen)
            self._last_arrival = scheduled
            if qlen >= self.queue_cap:
                self._dropped += 1
                return
            r = _Request(scheduled, self._rows, received)
            self._requests.append(r)
            self._queue.append(r)
            self._cond.notify_all()

    def _warm_up(self, config: Config, rows: int) -> None:
        largest = max(rows, (config.max_batch // rows) * rows)
        feeds = [self.model.make_batch(largest), self.model.make_batch(rows)]
        for k in range(self.warmup):
            self._sessions[k % len(self._sessions)].run(None, feeds[k % 2])

    def arrivals(self, workload: Workload, window: int = 0) -> np.ndarray:
        """The arrival times (s from the window start) :meth:`measure` serves: fixed by (seed, workload, window)."""
        n = window_requests(workload.rate, self.n_requests, self.window_s)
        return workload_arrivals(workload, n, self.seed, window)

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """Configure if needed, then serve ``n_requests`` Poisson arrivals of ``workload`` and summarize them."""
        t_wall = time.perf_counter()
        self._check(config)
        size = workload.request_size
        self.model.check_request_size(size)
        self.configure(config)
        self._warm_up(config, size)
        arrivals = self.arrivals(workload, window)
        loadgen = self.start()
        with self._cond:
            self._reset_window()
            self._queue.clear()
            self._feed = self.model.make_batch(size, np.random.default_rng(self.seed))
            self._rows = size
            self._open = True
        start, _sent, pacer_lag_ms = loadgen.run(arrivals, self._submit, self.max_seconds)
        # ``start`` is the window's start as the pacer set it: every latency runs from start + arrivals[i]
        deadline = start + self.max_seconds
        first = start + float(arrivals[0])
        with self._cond:
            offered = len(self._queue_samples)
            all_done = self._cond.wait_for(
                lambda: self._finished + self._dropped >= offered or self._error is not None,
                timeout=max(deadline - time.perf_counter(), 0.0),
            )
            all_done = all_done and self._error is None
            self._open = False
            self._queue.clear()
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._busy == 0)
            error = self._error
        if error is not None:
            raise InvalidModel(f"{self.model.path}: inference failed ({type(error).__name__}: {error})")
        reqs = self._requests
        if not offered:  # no arrival fell inside the window (a rate far too low for it)
            first = start
        if all_done:
            end = max((r.done for r in reqs if r.done is not None), default=first)
        else:
            end = min(time.perf_counter(), deadline)
        arrival = np.array([r.arrival for r in reqs], dtype=np.float64)
        done = np.array([r.done if r.done is not None else math.inf for r in reqs], dtype=np.float64)
        latencies = (np.minimum(done, end) - arrival) * 1000.0
        receive_lag = (np.array([r.submitted for r in reqs]) - arrival).max() * 1000.0 if reqs else 0.0
        m = summarize(
            config,
            workload,
            latencies,
            n_requests=offered,
            dropped=self._dropped,
            queue_samples=np.array(self._queue_samples),
            duration_s=max(end - first, 1e-9),
            slo_ms=self.slo_ms,
            wall_s=time.perf_counter() - t_wall,
            arrival_span_s=(self._last_arrival - first) if offered > 1 else None,
        )
        m.extra = {
            "batches": self._batches,
            "mean_batch": self._batch_rows / self._batches if self._batches else 0.0,
            "finished": int((done <= end).sum()),
            "pacer_max_lag_ms": float(pacer_lag_ms),
            "max_receive_lag_ms": float(max(receive_lag, 0.0)),
            "loadgen_pid": loadgen.pid,
            "timing": _timing(reqs, self._batch_log),
        }
        return m

    def describe(self) -> str:
        """What serves, on how many cores; the numbers are real measurements."""
        return (
            f"ONNX Runtime engine serving {self.model.path.name} on {plural(self.cores, 'core')}, load generator in "
            "its own "
            "process (real measurements)"
        )

    def __repr__(self) -> str:
        label = self.config.label() if self.config else None
        return f"Engine({self.model.path.name}, cores={self.cores}, config={label})"


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _timing(reqs: list[_Request], log: list[tuple[int, float, float, bool, float, float]]) -> dict[str, float | None]:
    """Where a window's time went (ms, medians): hand-off to the server, and runs after an idle wait or back to back.

    What calibrates the simulator's low-latency model (:func:`mlsysopt.serving.profiling.calibrate_dispatch`).
    """
    handoff = [(r.submitted - r.arrival) * 1000.0 for r in reqs]
    idle = [(end - start) * 1000.0 for rows, start, end, waited, _, _ in log if waited and rows == 1]
    busy = [(end - start) * 1000.0 for rows, start, end, waited, _, _ in log if not waited and rows == 1]
    gaps = [gap * 1000.0 for _, _, _, waited, gap, _ in log if not waited and math.isfinite(gap)]
    wake = [(start - got) * 1000.0 for _, start, _, waited, _, got in log if waited]
    return {
        "handoff_ms": _median(handoff),
        "wake_ms": _median(wake),
        "run_idle_ms": _median(idle),
        "run_busy_ms": _median(busy),
        "gap_busy_ms": _median(gaps),
        "idle_batches": float(len(idle)),
        "busy_batches": float(len(busy)),
    }
