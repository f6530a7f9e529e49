"""The simulator's event loop: one numba-compiled kernel over flat arrays (CSR children, per-device speed, overhead,
delay and inverse bandwidth), and its batch over many placements of one graph. The semantics and the arrays'
meaning are :mod:`mlsysopt.graph.simulator`'s, which builds the arrays once per graph and calls these.
"""

from __future__ import annotations

import heapq

import numpy as np

from mlsysopt.graph.jit import njit_on_first_call

FIFO = np.empty(0, np.int64)  # an empty order selects the FIFO-by-readiness semantics


@njit_on_first_call(cache=True, nogil=True)
def event_loop(
    indptr: np.ndarray,
    child: np.ndarray,
    child_bytes: np.ndarray,
    n_parents: np.ndarray,
    compute: np.ndarray,
    speed: np.ndarray,
    overhead: np.ndarray,
    delay: np.ndarray,
    inv_bw: np.ndarray,
    place: np.ndarray,
    order: np.ndarray,
    start: np.ndarray,
    finish: np.ndarray,
    ready: np.ndarray,
) -> float:
    """Run every task once and return the makespan.

    With an empty ``order`` (FIFO semantics) the next task is the ready one with the earliest (ready time, id),
    popped from a heap. With a topological ``order`` (static list scheduling) tasks are taken in that order.
    """
    n = n_parents.shape[0]
    fifo = order.shape[0] == 0
    remaining = n_parents.copy()
    dev_free = np.zeros(speed.shape[0])
    ready[:] = 0.0
    heap = [(0.0, np.int64(0))]
    heap.pop()
    if fifo:
        for i in range(n):
            if remaining[i] == 0:
                heap.append((0.0, np.int64(i)))
        heapq.heapify(heap)
    makespan = 0.0
    for step in range(n):
        if fifo:
            r, i = heapq.heappop(heap)
        else:
            i = order[step]
            r = ready[i]
        d = place[i]
        s = r if r > dev_free[d] else dev_free[d]
        f = s + (compute[i] / speed[d] + overhead[d])
        start[i] = s
        finish[i] = f
        dev_free[d] = f
        if f > makespan:
            makespan = f
        for k in range(indptr[i], indptr[i + 1]):
            c = child[k]
            dc = place[c]
            a = f if dc == d else f + (delay[d, dc] + child_bytes[k] * inv_bw[d, dc])
            if a > ready[c]:
                ready[c] = a
            if fifo:
                remaining[c] -= 1
                if remaining[c] == 0:
                    heapq.heappush(heap, (ready[c], c))
    return makespan


@njit_on_first_call(cache=True, nogil=True)
def event_loop_batch(
    indptr: np.ndarray,
    child: np.ndarray,
    child_bytes: np.ndarray,
    n_parents: np.ndarray,
    compute: np.ndarray,
    speed: np.ndarray,
    overhead: np.ndarray,
    delay: np.ndarray,
    inv_bw: np.ndarray,
    places: np.ndarray,
) -> np.ndarray:
    """Makespans of many placements (rows of ``places``) of one graph."""
    n = n_parents.shape[0]
    out = np.empty(places.shape[0])
    start = np.empty(n)
    finish = np.empty(n)
    ready = np.empty(n)
    fifo = np.empty(0, np.int64)
    for b in range(places.shape[0]):
        out[b] = event_loop(
            indptr,
            child,
            child_bytes,
            n_parents,
            compute,
            speed,
            overhead,
            delay,
            inv_bw,
            places[b],
            fifo,
            start,
            finish,
            ready,
        )
    return out
