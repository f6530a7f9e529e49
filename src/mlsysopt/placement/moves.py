"""The moves of GiPH's local search around one placement: relocations, swaps and chain moves on the critical path.

Every move is named by a gpNet node ``(task, device)`` and a *kind*:

* ``relocate`` (kind 0, GiPH's own action): move ``task`` to ``device``.
* ``swap`` (kind 1): move ``task`` to ``device`` and the task occupying ``device`` at ``task``'s start time (or
  the one starting nearest to it) to ``task``'s device: two tasks trade places, the loads stay balanced.
* ``chain`` (kind 2): move ``task`` together with its *critical-path chain* — the run of consecutive critical-path
  tasks around it linked by data edges — to ``device``, so the transfers inside the chain disappear at once.

:class:`MoveSet` lists the moves of one placement in two tiers: tier 0 (:func:`move_set`) holds every move of a
critical-path task (the only tasks whose move can shorten the makespan directly), tier 1 (:func:`other_moves`,
built only when tier 0 is spent) the relocations of every other task. A move
that would repeat another (a swap with no partner, a chain of one task) or break a hardware type is invalid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule

KINDS: tuple[str, ...] = ("relocate", "swap", "chain")
RELOCATE, SWAP, CHAIN = range(3)
#: Longest chain moved at once (critical-path tasks on each side of the chosen one).
MAX_CHAIN = 16


def critical_chains(problem: PlacementProblem, path: list[int]) -> np.ndarray:
    """Per position on ``path``: the id of its chain (runs of path tasks where each feeds the next by data)."""
    if not path:
        return np.zeros(0, np.int64)
    cp = np.asarray(path, np.int64)
    indptr, par, _ = problem.graph.parents_csr
    linked = np.array([np.isin(cp[k], par[indptr[cp[k + 1]] : indptr[cp[k + 1] + 1]]) for k in range(cp.size - 1)])
    return np.concatenate([[0], np.cumsum(~linked)]) if cp.size > 1 else np.zeros(1, np.int64)


@dataclass
class MoveSet:
    """The candidate moves of one placement, as parallel arrays (one row per move), valid ones only.

    Shapes: every array is (M,). ``node`` is the gpNet node id of (task, device) under the builder's numbering
    (row-major over feasible pairs), so a policy's per-node scores index it directly.
    """

    kind: np.ndarray
    task: np.ndarray
    device: np.ndarray
    node: np.ndarray
    tier: np.ndarray
    partner: np.ndarray  # swap partner task (-1 for other kinds)
    chain: list[np.ndarray]  # per move: the tasks a chain move moves (empty for other kinds)

    @property
    def size(self) -> int:
        """Number of moves."""
        return int(self.kind.size)

    def apply(self, placement: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The placements after each move in ``rows``, shape (len(rows), tasks)."""
        out = np.repeat(placement[None, :], rows.size, axis=0)
        for j, m in enumerate(rows.tolist()):
            k, t, d = int(self.kind[m]), int(self.task[m]), int(self.device[m])
            if k == CHAIN:
                out[j, self.chain[m]] = d
            else:
                out[j, t] = d
                if k == SWAP:
                    out[j, int(self.partner[m])] = placement[t]
        return out


def node_ids(problem: PlacementProblem) -> np.ndarray:
    """(tasks, devices) gpNet node id of every feasible pair, -1 elsewhere (the numbering of GpNetBuilder)."""
    ids = np.full(problem.mask.shape, -1, np.int64)
    t, d = np.nonzero(problem.mask)
    ids[t, d] = np.arange(t.size)
    return ids


def move_set(
    problem: PlacementProblem,
    placement: np.ndarray,
    schedule: Schedule,
    ids: np.ndarray,
    kinds: tuple[int, ...] = (RELOCATE, SWAP, CHAIN),
) -> MoveSet:
    """Every valid tier-0 move of ``placement``: relocations, swaps and chain moves of its critical-path tasks.

    ``ids`` is :func:`node_ids` of the problem; ``kinds`` the move kinds to list.
    """
    mask, d = problem.mask, problem.num_devices
    path = list(dict.fromkeys(schedule.critical_path))
    cp = np.asarray(path, np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    chains: list[np.ndarray] = []
    # path task x other feasible device: the pairs every kind is built from
    t0, d0 = np.nonzero(mask[cp] & (np.arange(d)[None, :] != placement[cp][:, None]))
    tasks, devs = cp[t0], d0.astype(np.int64)
    none = np.zeros(0, np.int64)
    if RELOCATE in kinds:
        parts.append((np.full(tasks.size, RELOCATE), tasks, devs, np.full(tasks.size, -1)))
        chains += [none] * tasks.size
    if SWAP in kinds and tasks.size:
        partner = _swap_partners(placement, schedule, tasks, devs)
        ok = partner >= 0
        ok[ok] = mask[partner[ok], placement[tasks[ok]]]
        parts.append((np.full(int(ok.sum()), SWAP), tasks[ok], devs[ok], partner[ok]))
        chains += [none] * int(ok.sum())
    if CHAIN in kinds and cp.size > 1:
        chain_id = critical_chains(problem, path)
        positions = np.arange(cp.size)
        for k in range(cp.size):
            members = cp[(chain_id == chain_id[k]) & (np.abs(positions - k) <= MAX_CHAIN)]
            if members.size < 2:
                continue
            movable = mask[members] & (placement[members][:, None] != np.arange(d)[None, :])
            ok = movable.sum(axis=0) > 1
            ok &= mask[cp[k]] & (np.arange(d) != placement[cp[k]])
            for dev in np.flatnonzero(ok).tolist():
                chains.append(members[movable[:, dev]])
            sel = np.flatnonzero(ok)
            parts.append((np.full(sel.size, CHAIN), np.full(sel.size, cp[k]), sel, np.full(sel.size, -1)))
    if not parts:
        parts.append((none, none, none, none))
    kind, task, device, partner = (np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(4))
    return MoveSet(kind, task, device, ids[task, device], np.zeros(kind.size, np.int64), partner, chains)


def other_moves(problem: PlacementProblem, placement: np.ndarray, moves: MoveSet, ids: np.ndarray) -> MoveSet:
    """``moves`` with tier 1 appended: the relocations of every task not on the critical path."""
    on_path = np.zeros(problem.num_tasks, bool)
    on_path[moves.task[moves.tier == 0]] = True
    d = problem.num_devices
    t1, d1 = np.nonzero(problem.mask & ~on_path[:, None] & (np.arange(d)[None, :] != placement[:, None]))
    t1, d1 = t1.astype(np.int64), d1.astype(np.int64)
    return MoveSet(
        np.concatenate([moves.kind, np.full(t1.size, RELOCATE)]),
        np.concatenate([moves.task, t1]),
        np.concatenate([moves.device, d1]),
        np.concatenate([moves.node, ids[t1, d1]]),
        np.concatenate([moves.tier, np.ones(t1.size, np.int64)]),
        np.concatenate([moves.partner, np.full(t1.size, -1)]),
        moves.chain + [np.zeros(0, np.int64)] * t1.size,
    )


def _swap_partners(placement: np.ndarray, schedule: Schedule, tasks: np.ndarray, devs: np.ndarray) -> np.ndarray:
    """Per (task, device): the task on ``device`` running at ``task``'s start (or starting nearest it), or -1."""
    out = np.full(tasks.size, -1, np.int64)
    start, finish = schedule.start, schedule.finish
    for dev in np.unique(devs).tolist():
        on = np.flatnonzero(placement == dev)
        if on.size == 0:
            continue
        on = on[np.argsort(start[on], kind="stable")]
        rows = np.flatnonzero(devs == dev)
        s = start[tasks[rows]]
        k = np.clip(np.searchsorted(start[on], s, side="right") - 1, 0, on.size - 1)
        running = finish[on[k]] > s
        nxt = np.clip(k + 1, 0, on.size - 1)
        nearer = np.abs(start[on[nxt]] - s) < np.abs(start[on[k]] - s)
        out[rows] = np.where(running | ~nearer, on[k], on[nxt])
    return out
