"""Graph structure on flat arrays: CSR adjacency, Kahn's algorithm, topological orders and longest paths.

These are the CSR-level entry points every package uses (the simulator, the cost-model data generators, the
placement baselines and gpNet), so no package re-implements Kahn's algorithm or reaches into another's kernels.
A CSR view is ``(indptr, neighbour ids, edge ids)``: the neighbours of node ``i`` are
``nbr[indptr[i]:indptr[i + 1]]`` and ``eid`` maps each entry back to its column of ``edge_index``.
"""

from __future__ import annotations

import heapq

import numpy as np

from mlsysopt.graph.jit import njit_on_first_call

CSR = tuple[np.ndarray, np.ndarray, np.ndarray]


def build_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> CSR:
    """CSR of ``dst`` grouped by ``src``: (indptr, dst ids sorted by src then dst, edge ids).

    Children of a graph: ``build_csr(src, dst, n)``; parents: ``build_csr(dst, src, n)``.

    Args:
        src: Node id each edge groups under (the source for children, the consumer for parents).
        dst: Node id each edge points to.
        num_nodes: Number of nodes ``n``; every id must be in ``[0, n)``.

    Returns:
        ``(indptr, nbr, eid)``: the neighbours of node ``i`` are ``nbr[indptr[i]:indptr[i + 1]]``, and ``eid``
        maps each entry back to its edge (column of ``edge_index``).

    Shapes:
        src, dst: (m,) int
        indptr: (num_nodes + 1,) int64
        nbr, eid: (m,) int64
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    order = np.lexsort((dst, src))
    indptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    return indptr, dst[order].astype(np.int64), order.astype(np.int64)


@njit_on_first_call(cache=True)
def kahn_levels(indptr: np.ndarray, child: np.ndarray, indeg: np.ndarray) -> tuple[np.ndarray, int]:
    """Kahn's algorithm on children CSR: longest-path level per node and the number of nodes ordered.

    ``indeg`` (in-degrees) is consumed: it is left > 0 on the nodes of cycles, and fewer than n are ordered.
    """
    n = indeg.shape[0]
    level = np.zeros(n, np.int64)
    queue = np.empty(n, np.int64)
    head, tail = 0, 0
    for i in range(n):
        if indeg[i] == 0:
            queue[tail] = i
            tail += 1
    while head < tail:
        u = queue[head]
        head += 1
        for k in range(indptr[u], indptr[u + 1]):
            v = child[k]
            if level[u] + 1 > level[v]:
                level[v] = level[u] + 1
            indeg[v] -= 1
            if indeg[v] == 0:
                queue[tail] = v
                tail += 1
    return level, tail


def priority_order(indptr: np.ndarray, child: np.ndarray, indeg: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """A topological order that always takes the ready node of smallest ``priority`` (ties by id).

    With random priorities this draws a uniformly random ready task at every step.

    Args:
        indptr: Children CSR row pointers.
        child: Children CSR neighbour ids.
        indeg: In-degree of every node (not modified).
        priority: Priority of every node; smaller is taken first.

    Returns:
        Node ids in topological order.

    Shapes:
        indptr: (n + 1,) int
        child: (m,) int
        indeg, priority: (n,)
        return: (n,) int64
    """
    n = indeg.shape[0]
    remaining = np.array(indeg, dtype=np.int64, copy=True)
    heap = [(float(priority[i]), int(i)) for i in np.flatnonzero(remaining == 0)]
    heapq.heapify(heap)
    order = np.empty(n, np.int64)
    for k in range(n):
        _, i = heapq.heappop(heap)
        order[k] = i
        for c in child[indptr[i] : indptr[i + 1]]:
            remaining[c] -= 1
            if remaining[c] == 0:
                heapq.heappush(heap, (float(priority[c]), int(c)))
    return order


@njit_on_first_call(cache=True)
def _longest_paths(order: np.ndarray, indptr: np.ndarray, par: np.ndarray, dur: np.ndarray) -> np.ndarray:
    out = np.empty(dur.shape[0])
    finish = np.zeros(dur.shape[1])
    for b in range(dur.shape[0]):
        best = 0.0
        for i in order:
            r = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                if finish[par[k]] > r:
                    r = finish[par[k]]
            finish[i] = r + dur[b, i]
            if finish[i] > best:
                best = finish[i]
        out[b] = best
    return out


def longest_paths_csr(order: np.ndarray, indptr: np.ndarray, parents: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Longest node-weighted path lengths, one per row of ``durations``.

    Args:
        order: a topological order of the n nodes, shape (n,).
        indptr, parents: parents CSR (``build_csr(dst, src, n)[:2]``).
        durations: node weights, shape (n,) or (B, n).

    Returns:
        Shape (B,) (or (1,) for a 1-D ``durations``): the length of the longest path for each row.
    """
    dur = np.ascontiguousarray(np.atleast_2d(durations), dtype=np.float64)
    return _longest_paths(
        np.ascontiguousarray(order, np.int64),
        np.ascontiguousarray(indptr, np.int64),
        np.ascontiguousarray(parents, np.int64),
        dur,
    )
