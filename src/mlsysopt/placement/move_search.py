"""The monotone local search GiPH proposes moves for: best-of-K proposals per step, restarts when stuck.

Read top to bottom: :class:`SearchConfig` holds the knobs; :func:`local_search` runs the search from a list of
start placements (the portfolio's, best first) with a *scorer* that rates the moves of a placement (GiPH's policy,
or None: uniform proposals, a plain randomized hill climb). Each step draws ``proposals`` untried moves of the
current placement (:mod:`mlsysopt.placement.moves`), without replacement, with probability ``softmax(score /
temperature)`` (Gumbel top-k), evaluates them in one batch (:meth:`Evaluator.batch`, one evaluation each) and moves
to the best if it is shorter. Critical-path moves (tier 0) are drawn first; when they are all tried the other
tasks' relocations (tier 1) are; after ``patience`` fruitless batches in tier 1, or when every move was tried, the
search restarts: from the next start within ``restart_within`` of the best makespan, otherwise from the best
placement with ``kick`` random critical-path relocations (an iterated local search). The result is the best
placement evaluated, so it is never worse than the best start.

Re-simulating the accepted placement for its schedule (critical path, start times) costs no evaluation: it was
evaluated in its batch already.

Under ``ordered`` execution with ``order_share > 0`` the search state is a map *and* a priority sequence (HEFT's
upward rank at first): map moves keep the sequence, order moves (:func:`~mlsysopt.placement.moves.order_moves`)
change it, and every candidate is list-scheduled with insertion in its own sequence
(:func:`~mlsysopt.graph.list_schedule.schedule_in_priority`) and charged one evaluation as its schedule's order
(``evaluate(placement, order)``), so the result carries the order that reproduces its makespan. Each batch gives
order moves ``order_share`` of its draws (when both kinds are left). A candidate in another sequence than the
rank's costs two simulations (the insertion pass and the evaluator's ordered re-run) instead of one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidOption
from mlsysopt.graph.list_schedule import ordered_args, schedule_in_priority
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule
from mlsysopt.placement.base import Evaluator
from mlsysopt.placement.moves import KINDS, ORDER, MoveSet, move_set, node_ids, order_moves, other_moves

#: A scorer: (placement, its schedule, its moves) -> one score per move (higher: proposed sooner), or None.
Scorer = Callable[[np.ndarray, Schedule, MoveSet], np.ndarray | None]


@dataclass
class SearchConfig:
    """The local search's knobs (defaults chosen on the training distribution's validation problems).

    Args:
        proposals: K, the moves evaluated per step in one batch.
        kinds: Move kinds drawn from: 0 relocate, 1 swap, 2 chain.
        temperature: Temperature of the proposal distribution ``softmax(score / temperature)``.
        patience: Fruitless batches of tier-1 moves before a restart.
        restart_within: Restart from a start whose makespan is within this fraction of the best.
        kick: Random critical-path relocations of a perturbation restart.
        improvement: Relative makespan decrease that counts as better (ignores float noise).
        order_share: Under ``ordered`` execution, the share of each batch's draws given to order moves (moves of
            a task's priority on its device; 0: off, the order re-derived from the map by upward rank and
            insertion only). Ignored under ``fifo``.

    Raises:
        InvalidOption: If ``order_share`` is not in [0, 1).
    """

    proposals: int = 8  # K: moves evaluated per step, in one batch
    kinds: tuple[int, ...] = (0, 1, 2)  # move kinds (relocate, swap, chain)
    temperature: float = 1.0  # of the proposal distribution softmax(score / temperature)
    patience: int = 4  # fruitless batches of tier-1 moves before a restart
    restart_within: float = 0.05  # restart from a start within this fraction of the best makespan
    kick: int = 3  # critical-path relocations of a perturbation restart
    improvement: float = 1e-9  # relative decrease that counts as better (ignores float noise)
    order_share: float = 0.0  # ordered execution: share of each batch's draws given to order moves (0: off)

    def __post_init__(self) -> None:
        if not 0.0 <= self.order_share < 1.0:
            raise InvalidOption(f"order_share must be in [0, 1), got {self.order_share}")


@dataclass
class SearchTrace:
    """What one local search did: accepted moves per kind, restarts, the start it began from."""

    start: str = ""
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    steps: int = 0
    restarts: int = 0
    states: list[np.ndarray] = field(default_factory=list)  # every placement moves were drawn from (for training)
    # per batch: (state, tier 1 listed, the moves it could draw from, the moves drawn, makespan gain)
    batches: list[tuple[int, bool, np.ndarray, np.ndarray, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"start": self.start, "steps": self.steps, "restarts": self.restarts, "accepted": self.accepted}


def gumbel_top_k(scores: np.ndarray, k: int, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` indices drawn without replacement with probability softmax(scores / temperature), in draw order."""
    g = scores / temperature - np.log(-np.log(rng.random(scores.size)))
    k = min(k, scores.size)
    top = np.argpartition(-g, k - 1)[:k]
    return top[np.argsort(-g[top], kind="stable")]


def local_search(
    problem: PlacementProblem,
    evaluate: Evaluator,
    starts: list[tuple[str, np.ndarray, float]],
    scorer: Scorer | None,
    rng: np.random.Generator,
    cfg: SearchConfig | None = None,
    record: bool = False,
) -> SearchTrace:
    """Improve the best of ``starts`` ((name, placement, makespan), already evaluated) until the budget is spent.

    ``record=True`` keeps every state and batch in the trace (the training's replay reads them).

    Args:
        problem: The problem to place.
        evaluate: The evaluator; the search runs until its budget is spent and it keeps the best placement.
        starts: ``(name, placement, makespan)`` of every start placement, already evaluated; empty: no search.
        scorer: Rates the moves of a placement (higher: proposed sooner); None: uniform proposals.
        rng: Random generator of the proposals and restarts.
        cfg: The knobs (None: :class:`SearchConfig` defaults).
        record: Keep every state and batch in the trace.

    Returns:
        What the search did: its start, accepted moves per kind, steps and restarts (and, with ``record``, the
        states and batches).
    """
    cfg = cfg or SearchConfig()
    trace = SearchTrace()
    if not starts:
        return trace
    ids = node_ids(problem)
    order = sorted(range(len(starts)), key=lambda k: (starts[k][2], k))
    pending = [starts[k] for k in order]
    name, current, cur_ms = pending.pop(0)
    trace.start = name
    pri = _Priorities(problem, evaluate) if cfg.order_share > 0 and problem.execution == "ordered" else None
    rank_seq = problem.simulator.sequence if pri is not None else None
    seq = best_seq = rank_seq
    while evaluate.remaining > 0:
        sched = problem.simulate(current) if pri is None or seq is rank_seq else pri.schedule(current, seq)
        moves = move_set(problem, current, sched, ids, cfg.kinds)
        if pri is not None:
            moves = moves + order_moves(problem, current, sched, seq, ids)
        scores = _scores(scorer, current, sched, moves)
        tried = np.zeros(moves.size, bool)
        state = len(trace.states)
        if record:
            trace.states.append(current.copy())
        stall = 0
        improved = extended = False
        while evaluate.remaining > 0:
            avail = ~tried & (moves.tier == 0)
            if not avail.any() and not extended:  # tier 0 spent: add the other tasks' relocations
                moves, extended = other_moves(problem, current, moves, ids), True
                scores = _scores(scorer, current, sched, moves)
                tried = np.concatenate([tried, np.zeros(moves.size - tried.size, bool)])
            if not avail.any():
                avail = ~tried
            if not avail.any() or stall >= cfg.patience:
                break
            idx = np.flatnonzero(avail)
            logits = scores[idx] if pri is None else scores[idx] + _share(moves.kind[idx] == ORDER, cfg.order_share)
            picks = idx[gumbel_top_k(logits, cfg.proposals, cfg.temperature, rng)]
            if pri is None:
                ms, seqs = evaluate.batch(moves.apply(current, picks)), None
            else:
                best_before = evaluate.best_makespan
                picks, ms, seqs = pri.batch(moves, picks, current, seq, rank_seq)
                if ms.size == 0:  # the time ran out
                    break
                if ms.min() < best_before:
                    best_seq = seqs[int(np.argmin(ms))]
            picks = picks[: ms.size]
            tried[picks] = True
            trace.steps += 1
            j = int(np.argmin(ms))
            gain = 0.0
            if ms[j] < cur_ms * (1 - cfg.improvement):
                gain = cur_ms - float(ms[j])
                trace.accepted[KINDS[int(moves.kind[picks[j]])]] += 1
                current = moves.apply(current, picks[j : j + 1])[0]
                if seqs is not None and seqs[j] is not seq:
                    seq = seqs[j]
                cur_ms = float(ms[j])
                improved = True
            if record:
                trace.batches.append((state, extended, avail.copy(), picks.copy(), gain))
            if improved:
                break
            if extended:
                stall += 1
        if improved or evaluate.remaining <= 0:
            continue
        trace.restarts += 1
        best_ms = evaluate.best_makespan
        while pending and pending[0][2] > best_ms * (1 + cfg.restart_within):
            pending.pop(0)
        if pending:
            _, current, cur_ms = pending.pop(0)
            seq = rank_seq
        else:
            current = _kick(problem, evaluate.best_placement, sched if cur_ms == best_ms else None, cfg.kick, rng)
            seq = best_seq
            if pri is None or seq is rank_seq:
                cur_ms = evaluate(current)
            else:
                ms = pri.evaluate(current[None, :], seq[None, :])
                if ms.size == 0:  # the time ran out
                    break
                cur_ms = float(ms[0])
    return trace


def _share(is_order: np.ndarray, share: float) -> np.ndarray:
    """Log-weights that give order moves ``share`` of the draws and map moves the rest (0 when one kind is absent)."""
    n_order = int(is_order.sum())
    if n_order in (0, is_order.size):
        return np.zeros(is_order.size)
    return np.where(is_order, np.log(share / n_order), np.log((1 - share) / (is_order.size - n_order)))


class _Priorities:
    """Evaluates (map, priority sequence) candidates under ``ordered`` execution, one evaluation each."""

    def __init__(self, problem: PlacementProblem, evaluate: Evaluator) -> None:
        self.problem = problem
        self.ev = evaluate
        self.args = ordered_args(problem.graph, problem.cluster)

    def schedule(self, placement: np.ndarray, seq: np.ndarray) -> Schedule:
        """The schedule of ``placement`` in priority ``seq`` (no evaluation: it was evaluated already)."""
        _, orders = schedule_in_priority(self.args, placement[None, :], seq[None, :])
        return self.problem.simulator.run(placement, order=orders[0])

    def evaluate(self, places: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Makespans of the rows, each run in the order its insertion schedule gives (one evaluation per row).

        Fewer rows are evaluated when the budget (or the time) runs out first; the result is then shorter.
        """
        n = min(places.shape[0], self.ev.remaining)
        _, orders = schedule_in_priority(self.args, places[:n], seqs[:n])
        out: list[float] = []
        for k in range(n):
            if self.ev.remaining <= 0:
                break
            out.append(self.ev(places[k], orders[k]))
        return np.asarray(out, np.float64)

    def batch(
        self, moves: MoveSet, picks: np.ndarray, current: np.ndarray, seq: np.ndarray, rank_seq: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Evaluate the picked moves; ``(picks, makespans, sequences)`` in evaluation order (a prefix when cut).

        Map moves in HEFT's rank sequence go through the evaluator's batch (one simulation each); the others
        through :meth:`evaluate`.
        """
        slow = np.full(picks.size, seq is not rank_seq) | (moves.kind[picks] == ORDER)
        picks = np.concatenate([picks[~slow], picks[slow]])
        places = moves.apply(current, picks)
        n_fast = int((~slow).sum())
        fast = self.ev.batch(places[:n_fast]) if n_fast else np.zeros(0)
        seqs: list[np.ndarray] = [seq] * fast.size
        if fast.size == n_fast and n_fast < picks.size and self.ev.remaining > 0:
            new = moves.sequences(seq, picks[n_fast:])
            rest = self.evaluate(places[n_fast:], new)
            kinds = moves.kind[picks[n_fast:]]
            seqs += [new[k] if kinds[k] == ORDER else seq for k in range(rest.size)]
            fast = np.concatenate([fast, rest])
        return picks, fast, seqs


def _scores(scorer: Scorer | None, placement: np.ndarray, sched: Schedule, moves: MoveSet) -> np.ndarray:
    scores = scorer(placement, sched, moves) if scorer is not None else None
    return np.zeros(moves.size) if scores is None else scores


def _kick(
    problem: PlacementProblem, best: np.ndarray, sched: Schedule | None, k: int, rng: np.random.Generator
) -> np.ndarray:
    """``best`` with ``k`` random tasks (critical-path ones when known) moved to random feasible devices."""
    if sched is None:
        sched = problem.simulate(best)
    out = best.copy()
    path = np.unique(np.asarray(sched.critical_path, np.int64))
    movable = path[problem.mask[path].sum(axis=1) > 1]
    if movable.size == 0:
        movable = np.flatnonzero(problem.mask.sum(axis=1) > 1)
    if movable.size == 0:
        return out
    for t in rng.choice(movable, size=min(k, movable.size), replace=False).tolist():
        devs = np.flatnonzero(problem.mask[t])
        devs = devs[devs != out[t]]
        out[t] = int(devs[rng.integers(devs.size)])
    return out
