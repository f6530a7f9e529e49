"""A SimPy discrete-event model of the serving engine (:mod:`mlsysopt.serving.engine`), driven by a service profile.

It follows the engine's semantics step by step:

* one shared FIFO queue; open-loop Poisson arrivals of ``workload.request_size`` rows each (the same schedule
  as the engine's, :func:`mlsysopt.serving.loadgen.workload_arrivals`); an arrival that finds ``queue_cap``
  requests waiting is dropped; the queue length is sampled at every arrival, before the request joins;
* ``config.instances`` workers. Idle workers line up to form batches one at a time: the worker at the head takes
  the oldest request, then keeps taking queued requests while whole requests fit in ``max_batch`` rows (at
  least one), waiting for arrivals until ``batch_timeout_ms`` has passed since the first request *arrived*
  (if that is already past, it takes only what is queued now). It then leaves the line and runs the batch,
  taking ``profile.batch_ms(rows, intra, inter)`` ms (the measured timings table where it covers the point, the
  fitted model beyond, plus the calibrated per-batch dispatch overhead; ``inter`` is the inter-op threads in
  parallel mode, 1 in sequential mode); every request of the batch completes then;
* the low-latency costs of the engine (calibrated, :func:`mlsysopt.serving.profiling.calibrate_dispatch`): a request
  reaches the queue ``profile.handoff_ms`` after its scheduled arrival (the load generator's pipe and the server's
  receiving thread: latency that occupies no worker), and a batch whose worker sat idle waiting for a request
  starts ``profile.wake_ms`` later (waking the thread); back-to-back batches pay only the dispatch overhead. At 1-2
  threads these are most of a sub-millisecond latency, and charging them all to every batch (as one dispatch
  figure) would overstate the load a worker carries;
* the window ends when every request finished or was dropped, or ``max_seconds`` after the window's start;
  requests still waiting or running then count with their age. Arrivals after the window are not offered.

Contention (processor sharing, approximated): when a batch starts, the threads busy on the machine (the
``threads_per_instance`` of every worker running a batch, this one included) may exceed ``cores``; the batch's
service time is then stretched by busy / cores. The stretch is fixed at the start of the batch: batches that
start or end while it runs do not change it.

Common random numbers: the arrivals depend only on (seed, rate, request_size, window), so every configuration
sees the same arrivals and, with ``noise=0``, ``measure`` is a deterministic function of (config, workload). With
``noise > 0`` every batch's service time is multiplied by a lognormal factor (sigma ``noise``) drawn from a
generator seeded by the workload *and* the configuration, so repeating a measurement repeats its numbers.

Only two SimPy processes run (the arrivals and the head of the line); a running batch is a timeout whose
callback frees its worker, which keeps a measurement of 400 requests at a few milliseconds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator

import numpy as np
import simpy

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.backend import Backend, Measurement, summarize
from mlsysopt.serving.loadgen import workload_arrivals
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Config, Workload


class SimulatedEngine(Backend):
    """Measures a configuration on a discrete-event model of the engine instead of a real model.

    Args:
        profile: Service-time profile of the model; its ``cores`` is the modelled machine.
        n_requests: Requests offered per window, >= 1.
        max_seconds: Longest window in simulated seconds, > 0.
        slo_ms: p99 SLO in ms used for the violation rate, > 0 (None: no violation rate).
        queue_cap: Request queue capacity, >= 1; arrivals beyond it are dropped.
        noise: Lognormal sigma of per-batch service-time noise, >= 0 (0: deterministic).
        seed: Seed of the arrival schedules and the noise.

    Raises:
        InvalidSpace: If an argument is outside the ranges above.
    """

    def __init__(
        self,
        profile: ServiceProfile,
        n_requests: int = 400,
        max_seconds: float = 30.0,
        slo_ms: float | None = None,
        queue_cap: int = 256,
        noise: float = 0.0,
        seed: int = 0,
    ) -> None:
        if n_requests < 1:
            raise InvalidSpace(f"n_requests={n_requests} must be >= 1")
        if not (math.isfinite(max_seconds) and max_seconds > 0):
            raise InvalidSpace(f"max_seconds={max_seconds} must be a positive number of seconds")
        if slo_ms is not None and not (math.isfinite(slo_ms) and slo_ms > 0):
            raise InvalidSpace(f"SLO {slo_ms} ms must be a positive number of milliseconds")
        if queue_cap < 1:
            raise InvalidSpace(f"queue_cap={queue_cap} must be >= 1")
        if not (math.isfinite(noise) and noise >= 0):
            raise InvalidSpace(f"noise={noise} must be a finite number >= 0")
        self.profile = profile
        self.cores = profile.cores
        self.n_requests = int(n_requests)
        self.max_seconds = float(max_seconds)
        self.slo_ms = slo_ms
        self.queue_cap = int(queue_cap)
        self.noise = float(noise)
        self.seed = int(seed)

    def describe(self) -> str:
        """The model and its profile (measured, extrapolated or synthetic); the numbers are simulated."""
        prof = self.profile
        return f"SimPy model of the engine, {prof.source} {prof.cores}-core profile ({prof.model or 'unnamed'})"

    def arrivals(self, workload: Workload, window: int = 0) -> np.ndarray:
        """Arrival times (s from the start) of the ``n_requests`` requests: the same for every configuration."""
        return workload_arrivals(workload, self.n_requests, self.seed, window)

    def _noise_factors(self, config: Config, workload: Workload, window: int) -> np.ndarray | None:
        if self.noise == 0:
            return None
        key = [
            self.seed,
            round(workload.rate * 1000),
            workload.request_size,
            config.instances,
            config.max_batch,
            round(config.batch_timeout_ms * 1000),
            config.intra_threads,
            config.inter_threads,
            config.execution_mode,
            window,
        ]
        # at most one batch per request, so n_requests factors always suffice
        return np.random.default_rng(key).lognormal(0.0, self.noise, self.n_requests)

    def measure(self, config: Config, workload: Workload, window: int = 0) -> Measurement:
        """Simulate serving ``workload`` with ``config`` for one window (simulated seconds in ``wall_s``)."""
        config.check(max_threads=self.cores)
        arrivals = self.arrivals(workload, window)
        size = workload.request_size
        cap = min(max(1, config.max_batch // size), self.n_requests)  # requests per batch
        # service time (s) of a batch of k requests, k = 1..cap, before contention and noise
        service_s = [0.0] + [
            self.profile.batch_ms(k * size, config.intra_threads, config.effective_inter) / 1000.0
            for k in range(1, cap + 1)
        ]
        run = _Run(self, config, arrivals, cap, service_s, self._noise_factors(config, workload, window))
        end = run.simulate()
        n_arrived = run.n_arrived
        arr = arrivals[:n_arrived]
        finished = run.finish[:n_arrived]
        kept = ~run.dropped_mask[:n_arrived]
        unfinished = np.isnan(finished)
        lat_s = np.where(unfinished, end - arr, finished - arr)[kept]
        first = float(arrivals[0]) if n_arrived else 0.0
        duration = max(end - first, 1e-9)
        m = summarize(
            config,
            workload,
            lat_s * 1000.0,
            n_requests=n_arrived,
            dropped=run.dropped,
            queue_samples=np.asarray(run.queue_samples, dtype=np.float64),
            duration_s=duration,
            slo_ms=self.slo_ms,
            wall_s=float(end),  # simulated seconds of the window, from its start
            arrival_span_s=float(arr[-1] - arr[0]) if n_arrived > 1 else None,
        )
        m.extra = {
            "batches": run.batches,
            "mean_batch": run.batched * size / run.batches if run.batches else 0.0,  # rows, as the engine
            "finished": int((~unfinished & kept).sum()),
            "mean_service_ms": 1000.0 * run.busy_s / run.batches if run.batches else 0.0,
            "sim_events": run.events,
        }
        return m


class _Run:
    """One simulated measurement window (the state the SimPy processes share)."""

    def __init__(
        self,
        engine: SimulatedEngine,
        config: Config,
        arrivals: np.ndarray,
        cap: int,
        service_s: list[float],
        noise: np.ndarray | None,
    ) -> None:
        self.env = simpy.Environment()
        self.cores = engine.cores
        self.queue_cap = engine.queue_cap
        self.arrivals = arrivals.tolist()
        handoff = engine.profile.handoff_ms / 1000.0
        self.enqueued = [t + handoff for t in self.arrivals]  # when each request reaches the server's queue
        self.wake_s = engine.profile.wake_ms / 1000.0
        self.n = len(self.arrivals)
        self.t_end = engine.max_seconds  # from the window's start, as the engine
        self.cap = cap
        self.service_s = service_s
        self.noise = noise.tolist() if noise is not None else None
        self.timeout_s = config.batch_timeout_ms / 1000.0
        self.tpw = config.threads_per_instance

        self.queue: deque[int] = deque()  # indices of waiting requests, oldest first
        self.getter: simpy.Event | None = None  # the head of the line waiting for an arrival
        self.freed: simpy.Event | None = None  # the line waiting for a worker to finish its batch
        self.idle = config.instances
        self.finish = np.full(self.n, np.nan)
        self.dropped_mask = np.zeros(self.n, dtype=bool)
        self.queue_samples: list[int] = []
        self.n_arrived = 0
        self.dropped = 0
        self.done = 0
        self.busy_threads = 0
        self.batches = 0
        self.batched = 0
        self.busy_s = 0.0
        self.events = 0
        self.stop = self.env.event()

    def simulate(self) -> float:
        """Run until every request finished or was dropped, or the window closed; return the end time (s)."""
        env = self.env
        env.process(self._arrive())
        env.process(self._line())
        env.timeout(self.t_end).callbacks.append(self._close)
        stop, step = self.stop, env.step
        events = 0
        while not stop.triggered:
            step()
            events += 1
        self.events = events
        return float(min(env.now, self.t_end))

    def _close(self, _event: simpy.Event) -> None:
        if not self.stop.triggered:
            self.stop.succeed()

    def _settled(self, k: int) -> None:
        self.done += k
        if self.done == self.n and not self.stop.triggered:
            self.stop.succeed()

    def _arrive(self) -> Generator[simpy.Event, object, None]:
        env, queue, samples = self.env, self.queue, self.queue_samples
        for i, t in enumerate(self.enqueued):
            if t > env.now:
                yield env.timeout(t - env.now)
            self.n_arrived = i + 1
            samples.append(len(queue))
            if len(queue) >= self.queue_cap:
                self.dropped_mask[i] = True
                self.dropped += 1
                self._settled(1)
                continue
            queue.append(i)
            if self.getter is not None:
                getter, self.getter = self.getter, None
                getter.succeed()

    def _wake(self, getter: simpy.Event, _timeout: simpy.Event) -> None:
        """The batch timeout fired: the head of the line stops waiting for arrivals."""
        if not getter.triggered:
            self.getter = None
            getter.succeed()

    def _line(self) -> Generator[simpy.Event, object, None]:
        """The head of the line of idle workers: forms one batch at a time and hands it to a worker."""
        env, queue, arrivals, cap = self.env, self.queue, self.arrivals, self.cap
        while True:
            if self.idle == 0:
                self.freed = env.event()
                yield self.freed
            waited = not queue
            if waited:
                self.getter = env.event()
                yield self.getter
            first = queue.popleft()
            batch = [first]
            deadline = arrivals[first] + self.timeout_s
            while len(batch) < cap:
                if queue:
                    batch.append(queue.popleft())
                    continue
                wait = deadline - env.now
                if wait <= 0:
                    break
                getter = self.getter = env.event()
                env.timeout(wait).callbacks.append(lambda ev, g=getter: self._wake(g, ev))
                yield getter
            self._start(batch, waited)

    def _start(self, batch: list[int], waited: bool) -> None:
        self.idle -= 1
        self.busy_threads += self.tpw
        s = self.service_s[len(batch)] * max(1.0, self.busy_threads / self.cores)
        if self.noise is not None:
            s *= self.noise[self.batches]
        if waited:  # the worker sat idle: its wake-up (and a cold first run) come before the batch is done
            s += self.wake_s
        self.batches += 1
        self.batched += len(batch)
        self.busy_s += s
        self.env.timeout(s).callbacks.append(lambda _ev: self._finish(batch))

    def _finish(self, batch: list[int]) -> None:
        self.idle += 1
        self.busy_threads -= self.tpw
        now = self.env.now
        for i in batch:
            self.finish[i] = now
        self._settled(len(batch))
        if self.freed is not None:
            freed, self.freed = self.freed, None
            freed.succeed()
