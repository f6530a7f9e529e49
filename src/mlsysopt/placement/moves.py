"""The moves of GiPH's local search around one placement: relocations, swaps, chain moves and order moves.

Every move is named by a gpNet node ``(task, device)`` and a *kind*:

* ``relocate`` (kind 0, GiPH's own action): move ``task`` to ``device``.
* ``swap`` (kind 1): move ``task`` to ``device`` and the task occupying ``device`` at ``task``'s start time (or
  the one starting nearest to it) to ``task``'s device: two tasks trade places, the loads stay balanced.
* ``chain`` (kind 2): move ``task`` together with its *critical-path chain* — the run of consecutive critical-path
  tasks around it linked by data edges — to ``device``, so the transfers inside the chain disappear at once.
* ``order`` (kind 3, ``ordered`` execution only, :func:`order_moves`): keep the map, move ``task``'s *priority*
  (its place in the topological sequence the insertion list scheduler follows, HEFT's upward rank at first) just
  before or just after ``partner`` (its neighbour in priority on its device: the two trade turns there; or the
  task after its last parent / before its first child: as early or as late as precedence allows).

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

KINDS: tuple[str, ...] = ("relocate", "swap", "chain", "order")
RELOCATE, SWAP, CHAIN, ORDER = range(4)
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
        """The placements after each move in ``rows``, shape (len(rows), tasks) (an order move keeps the map)."""
        out = np.repeat(placement[None, :], rows.size, axis=0)
        for j, m in enumerate(rows.tolist()):
            k, t, d = int(self.kind[m]), int(self.task[m]), int(self.device[m])
            if k == ORDER:
                continue
            if k == CHAIN:
                out[j, self.chain[m]] = d
            else:
                out[j, t] = d
                if k == SWAP:
                    out[j, int(self.partner[m])] = placement[t]
        return out

    def sequences(self, sequence: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The priority sequences after each move in ``rows``, shape (len(rows), tasks).

        A map move keeps ``sequence``; an order move takes its task out and puts it back just before its partner
        (when the partner came first) or just after it.

        Args:
            sequence: The current topological priority sequence of task ids.
            rows: Indices of the moves.

        Returns:
            One sequence per move, int64.
        """
        out = np.repeat(sequence[None, :], rows.size, axis=0)
        pos = np.empty(sequence.size, np.int64)
        pos[sequence] = np.arange(sequence.size)
        for j, m in enumerate(rows.tolist()):
            if int(self.kind[m]) != ORDER:
                continue
            t, q = int(self.task[m]), int(self.partner[m])
            rest = np.delete(sequence, pos[t])
            at = pos[q] - (pos[q] > pos[t])  # the partner's place once the task is out
            out[j] = np.insert(rest, at if pos[q] < pos[t] else at + 1, t)
        return out

    def __add__(self, other: MoveSet) -> MoveSet:
        """Both move sets, ``self``'s rows first."""
        return MoveSet(
            *(np.concatenate([a, b]) for a, b in zip(self._arrays(), other._arrays(), strict=True)),
            self.chain + other.chain,
        )

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return self.kind, self.task, self.device, self.node, self.tier, self.partner


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


def order_moves(
    problem: PlacementProblem, placement: np.ndarray, schedule: Schedule, sequence: np.ndarray, ids: np.ndarray
) -> MoveSet:
    """Every valid order move of ``placement`` scheduled in priority ``sequence``: tier 0, critical-path tasks only.

    Per critical-path task: up past its previous task in priority on its device, up past the task its device ran
    just before it when it waited for the device, down past its next task in priority on its device, and the two
    jumps: right after its last parent in the sequence, right before its first child. A move is valid when the
    sequence stays topological (the task's parents all still come before it, its children after).

    Args:
        problem: The problem.
        placement: The current map.
        schedule: Its schedule (``ordered``: its start times and critical path).
        sequence: The topological priority sequence the schedule was built in.
        ids: :func:`node_ids` of the problem.

    Returns:
        The order moves (kind ``ORDER``; ``partner`` the neighbour; ``device`` the task's own device).
    """
    n = problem.num_tasks
    pos = np.empty(n, np.int64)
    pos[sequence] = np.arange(n)
    src, dst = problem.graph.edge_index
    last_parent = np.full(n, -1, np.int64)
    np.maximum.at(last_parent, dst, pos[src])
    first_child = np.full(n, n, np.int64)
    np.minimum.at(first_child, src, pos[dst])
    # neighbours in priority on the same device
    by_dev = np.lexsort((pos, placement))
    same = placement[by_dev[1:]] == placement[by_dev[:-1]]
    prev_seq = np.full(n, -1, np.int64)
    next_seq = np.full(n, -1, np.int64)
    prev_seq[by_dev[1:][same]] = by_dev[:-1][same]
    next_seq[by_dev[:-1][same]] = by_dev[1:][same]
    # the task the device ran just before each one (by start time)
    by_start = np.lexsort((schedule.finish, schedule.start, placement))
    same = placement[by_start[1:]] == placement[by_start[:-1]]
    prev_run = np.full(n, -1, np.int64)
    prev_run[by_start[1:][same]] = by_start[:-1][same]
    waited = schedule.start > schedule.ready * (1 + 1e-12) + 1e-300
    cp = np.unique(np.asarray(schedule.critical_path, np.int64))
    tasks, partners = [], []
    for q in (prev_seq[cp], np.where(waited[cp], prev_run[cp], -1)):
        ok = (q >= 0) & (last_parent[cp] < pos[np.maximum(q, 0)]) & (pos[np.maximum(q, 0)] < pos[cp])
        tasks.append(cp[ok])
        partners.append(q[ok])
    q = next_seq[cp]
    ok = (q >= 0) & (first_child[cp] > pos[np.maximum(q, 0)])
    tasks.append(cp[ok])
    partners.append(q[ok])
    # jumps: as early as its parents allow, as late as its children allow
    up, down = last_parent[cp] + 1, first_child[cp] - 1
    ok = up < pos[cp]
    tasks.append(cp[ok])
    partners.append(sequence[up[ok]])
    ok = down > pos[cp]
    tasks.append(cp[ok])
    partners.append(sequence[down[ok]])
    task, partner = np.concatenate(tasks), np.concatenate(partners)
    _, keep = np.unique(task * n + partner, return_index=True)
    task, partner = task[np.sort(keep)], partner[np.sort(keep)]
    dev = placement[task].astype(np.int64)
    m = task.size
    return MoveSet(np.full(m, ORDER, np.int64), task, dev, ids[task, dev], np.zeros(m, np.int64), partner, [_NONE] * m)


_NONE = np.zeros(0, np.int64)


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
