"""GiPH at inference: the policy proposes the moves of a monotone local search from the best of a portfolio.

``GiPH(policy).place(graph, cluster, budget, seed, init)`` (the default, what ``placement place`` runs):

1. evaluates the portfolio (:mod:`mlsysopt.placement.baselines.portfolio`: HEFT, all on the fastest feasible
   device, CPOP, the best of saga's schedulers; and ``init`` when given), one evaluation per distinct placement;
2. improves the best of them with :func:`~mlsysopt.placement.move_search.local_search`, the policy scoring every
   relocation, swap and chain move of the current placement (one forward pass per accepted move) and the search
   evaluating the best-scored K of them in one batch per step, restarting from the next member when stuck.

The result is the best placement evaluated, never worse than the best portfolio member; ``result.info`` has the
portfolio's makespans and what the search did. ``paper=True`` is the paper's GiPH instead: from ``init`` (or a
random placement), one sampled relocation per evaluation from the best placement so far (a rejected move is not
proposed again from it); ``walk=True`` follows every move, as GiPH's training episodes do.

``adapt`` re-places after devices were added or removed, with the same policy (no retraining): the carried-over
placement (tasks of removed devices parked on their fastest feasible device) joins the portfolio on the new
cluster, so the result is never worse than keeping the placement or re-running HEFT; with ``paper=True`` the
orphaned tasks are moved first and the rest of the budget is the paper's search.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import check_placement
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule
from mlsysopt.placement.base import Evaluator, PlacementResult, Placer, SearchContext
from mlsysopt.placement.baselines.portfolio import PORTFOLIO, run_portfolio
from mlsysopt.placement.checkpoint import load_policy
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.limits import gpnet_elements
from mlsysopt.placement.move_search import SearchConfig, local_search
from mlsysopt.placement.moves import MoveSet, node_ids
from mlsysopt.placement.policy import GiPHPolicy
from mlsysopt.placement.state import PlacementState
from mlsysopt.runtime.threads import torch_threads

#: gpNet elements (nodes + edges) above which the policy scores the critical path's neighbourhood only.
FULL_GPNET_LIMIT = 400_000
#: Elements of that neighbourhood's gpNet: the critical path, then its tasks' parents and children, latest first.
FOCUS_ELEMENTS = 100_000


class PolicyScorer:
    """The local search's scorer of a policy: its logit for each move (its kind's column, or the relocation's).

    One forward pass per ``refresh`` placements (the logits are kept for further batches and, with ``refresh`` >
    1, for the next placements: the search spends less time in the policy per move). On a problem whose gpNet has
    more than :data:`FULL_GPNET_LIMIT` elements the policy sees the gpNet of the critical path's tasks with their
    parents and children (the induced subgraph, on every device; the neighbours that finish latest first, up to
    :data:`FOCUS_ELEMENTS` elements) instead; moves of other tasks then score lowest.
    """

    def __init__(self, policy: GiPHPolicy, problem: PlacementProblem, refresh: int = 1) -> None:

        self.policy, self.problem, self.refresh = policy, problem, max(1, int(refresh))
        self._age = 0  # placements scored with the current logits
        g = problem.graph
        self.focus = gpnet_elements(g.num_nodes, g.num_edges, problem.num_devices) > FULL_GPNET_LIMIT
        self.builder = None if self.focus else GpNetBuilder(problem)
        self.ids = node_ids(problem)
        self._key: bytes | None = None
        self._logits = np.zeros((0, 1))

    def __call__(self, placement: np.ndarray, schedule: Schedule, moves: MoveSet) -> np.ndarray:
        """One score per move of ``moves``."""
        key = placement.tobytes()
        if key != self._key:
            self._age += 1
            if self._age >= self.refresh or self._logits.size == 0:  # gpNet node ids are fixed per problem: an
                # older placement's logits still score every move, a little stale
                self._logits = (
                    self._focus_logits(placement, schedule) if self.focus else self._full(placement, schedule)
                )
                self._age = 0
            self._key = key
        logits = self._logits
        column = np.minimum(moves.kind, logits.shape[1] - 1)
        out = logits[moves.node, column]
        return np.where(np.isfinite(out), out, np.nanmin(logits) if np.isfinite(logits).any() else 0.0)

    def _full(self, placement: np.ndarray, schedule: Schedule) -> np.ndarray:
        with torch.no_grad():
            return self.policy.move_logits(self.builder.build(placement, schedule)).numpy().astype(np.float64)

    def _focus_logits(self, placement: np.ndarray, schedule: Schedule) -> np.ndarray:

        p, g = self.problem, self.problem.graph
        path = np.unique(np.asarray(schedule.critical_path, np.int64))
        near = np.unique(np.concatenate([g.parents(int(t)) for t in path] + [g.children(int(t)) for t in path]))
        near = near[~np.isin(near, path)]
        near = near[np.argsort(-schedule.finish[near], kind="stable")]
        degree = np.bincount(g.edge_index.ravel(), minlength=g.num_nodes)
        per_task = p.num_devices * (1 + 2 * degree)  # a task's nodes and (at most) its edges' share
        room = FOCUS_ELEMENTS - int(per_task[path].sum())
        take = int(np.searchsorted(np.cumsum(per_task[near]), room, side="right")) if room > 0 else 0
        focus = np.unique(np.concatenate([path, near[:take]]))
        index = np.full(g.num_nodes, -1, np.int64)
        index[focus] = np.arange(focus.size)
        src, dst = g.edge_index
        keep = (index[src] >= 0) & (index[dst] >= 0)
        sub = CompGraph(
            [g.names[int(t)] for t in focus],
            g.opcodes[focus],
            g.x[focus],
            g.feature_names,
            np.stack([index[src[keep]], index[dst[keep]]]),
            g.edge_bytes[keep],
            g.hw_type[focus],
            g.vocab,
            g.meta,
        )
        builder = GpNetBuilder(PlacementProblem(sub, p.cluster))
        sched = Schedule(
            schedule.makespan,
            schedule.start[focus],
            schedule.finish[focus],
            schedule.ready[focus],
            placement[focus],
            [int(index[t]) for t in schedule.critical_path],
        )
        with torch.no_grad():
            logits = self.policy.move_logits(builder.build(placement[focus], sched)).numpy().astype(np.float64)
        out = np.full((int(p.mask.sum()), logits.shape[1]), np.nan)
        out[self.ids[focus[builder.task], builder.device]] = logits
        return out


class GiPH(Placer):
    """The learned placement policy used as a search method (one interface with the baselines).

    Args:
        policy: the trained policy.
        greedy: (paper mode) always take the policy's top move, following it.
        walk: (paper mode) follow every move, as GiPH's training episodes do.
        paper: the paper's search from ``init`` or a random placement instead of the portfolio local search.
        config: the local search's knobs (default :class:`SearchConfig`).
        portfolio: the portfolio's members (default :data:`~mlsysopt.placement.baselines.portfolio.PORTFOLIO`).
        saga_time_limit: seconds one saga scheduler may take by its estimate (default: saga's own default).
        refresh: the policy scores every ``refresh``-th placement the search moves to (the others reuse its
            scores; see :class:`PolicyScorer`).
    """

    name = "giph"

    def __init__(
        self,
        policy: GiPHPolicy,
        greedy: bool = False,
        walk: bool = False,
        paper: bool = False,
        config: SearchConfig | None = None,
        portfolio: tuple[str, ...] = PORTFOLIO,
        saga_time_limit: float | None = None,
        refresh: int = 1,
    ) -> None:
        self.policy = policy.eval()
        self.refresh = int(refresh)
        self.greedy = greedy
        self.walk = walk or greedy  # greedy proposals from a fixed best placement would repeat themselves
        self.paper = paper or self.walk
        self.config = config or SearchConfig()
        self.portfolio = tuple(portfolio)
        self.saga_time_limit = saga_time_limit

    @classmethod
    def load(
        cls, path: str | Path = "pretrained", greedy: bool = False, walk: bool = False, paper: bool = False
    ) -> GiPH:
        """A GiPH placer from a training checkpoint, or ``"pretrained"``: the policy shipped with mlsysopt."""

        return cls(load_policy(path), greedy=greedy, walk=walk, paper=paper)

    def variant(self, **changes: object) -> GiPH:
        """The same policy with other search settings (``paper``, ``walk``, ``config``, ...)."""
        keys = ("greedy", "walk", "paper", "config", "portfolio", "saga_time_limit", "refresh")
        kwargs = {k: getattr(self, k) for k in keys} | changes
        if "paper" not in changes and changes.get("walk"):
            kwargs["paper"] = True
        return GiPH(self.policy, **kwargs)  # type: ignore[arg-type]

    def search(self, ctx: SearchContext) -> None:
        """The portfolio local search (or, ``paper=True``, the paper's search from ``init`` or a random start)."""
        if self.paper:
            start = ctx.problem.random_placement(ctx.rng) if ctx.init is None else ctx.init
            self._improve(ctx.problem, ctx.evaluate, start, ctx.seed, first=None)
            return
        self._portfolio_search(ctx.problem, ctx.evaluate, ctx.rng, ctx.seed, ctx.init, ctx.info)

    def _portfolio_search(
        self,
        problem: PlacementProblem,
        ev: Evaluator,
        rng: np.random.Generator,
        seed: int,
        init: np.ndarray | None,
        info: dict,
        init_name: str = "init",
    ) -> None:
        starts = []
        if init is not None:
            starts.append((init_name, init, ev(init)))
        portfolio = run_portfolio(problem, ev, seed, self.portfolio, self.saga_time_limit)
        if init is not None:
            portfolio.makespans[init_name] = starts[0][2]
        info["portfolio"] = portfolio.to_dict()
        starts += portfolio.starts
        if init is not None:
            info["portfolio"]["best"] = min(starts, key=lambda s: s[2])[0]
        info["start_makespan"] = float(min(s[2] for s in starts)) if starts else None
        scorer = PolicyScorer(self.policy, problem, self.refresh)
        with torch_threads(1):
            trace = local_search(problem, ev, starts, scorer, rng, self.config)
        info["search"] = trace.to_dict()

    def adapt(
        self,
        graph: CompGraph,
        old_cluster: DeviceCluster,
        new_cluster: DeviceCluster | PlacementProblem,
        placement: np.ndarray,
        budget: int | None = None,
        seed: int = 0,
        timeout: float | None = None,
    ) -> PlacementResult:
        """Re-place ``placement`` (on ``old_cluster``) onto ``new_cluster``, moving orphaned tasks first.

        ``new_cluster`` may be given as its PlacementProblem (one problem for several re-placements);
        ``timeout`` (seconds of wall clock) stops the search before the budget is spent.
        """
        problem = PlacementProblem.of(graph, new_cluster)
        start, orphans = carry_over(graph, old_cluster, problem, placement)
        evaluator = Evaluator(problem, budget, timeout)
        info: dict = {}
        if self.paper:
            evaluator.run(lambda: self._improve(problem, evaluator, start, seed, first=orphans))
        else:
            rng = np.random.default_rng(seed)
            evaluator.run(lambda: self._portfolio_search(problem, evaluator, rng, seed, start, info, "keep"))
        return evaluator.result(self.name, info)

    def _improve(
        self, problem: PlacementProblem, ev: Evaluator, start: np.ndarray, seed: int, first: np.ndarray | None
    ) -> None:
        placement = start.copy()
        state = PlacementState(GpNetBuilder(problem), placement, ev.schedule(placement))
        gen = torch.Generator().manual_seed(seed)
        pending = [] if first is None else list(first)
        with torch_threads(1):
            self._loop(ev, gen, state, pending)

    def _loop(self, ev: Evaluator, gen: torch.Generator, state: PlacementState, pending: list[int]) -> None:
        rejected = torch.zeros(state.builder.num_nodes, dtype=torch.bool)  # moves already tried from this placement
        while ev.remaining > 0:
            gp = state.gpnet
            restrict = None
            if pending:
                restrict = torch.as_tensor(np.isin(gp.task, pending)) & gp.action_mask
                if not bool(restrict.any()):
                    pending, restrict = [], None
            if restrict is None and not self.walk and bool((gp.action_mask & ~rejected).any()):
                restrict = ~rejected
            with torch.no_grad():
                dist = self.policy.distribution(gp, restrict)
                action = (
                    int(dist.probs.argmax())
                    if self.greedy
                    else int(torch.multinomial(dist.probs, 1, generator=gen).item())
                )
            task, candidate = state.relocate(action, ev.schedule)
            forced = task in pending  # an orphan's move is always taken
            if forced:
                pending.remove(task)
            if self.walk or forced or candidate.makespan < state.makespan:
                state = candidate
                rejected = torch.zeros_like(rejected)
            else:
                rejected[action] = True


def carry_over(
    graph: CompGraph, old: DeviceCluster, new: DeviceCluster | PlacementProblem, placement: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Map a placement onto a changed cluster by device name; orphaned tasks go to their fastest feasible device.

    ``new`` is the changed cluster, or its PlacementProblem (whose feasibility mask is then reused).
    Returns the new placement and the ids of the orphaned tasks (device removed, or no longer feasible).

    Args:
        graph: The placed graph.
        old: The cluster ``placement`` is on.
        new: The changed cluster, or its PlacementProblem.
        placement: Device id (on ``old``) of every task.

    Returns:
        ``(new_placement, orphans)``: device ids on ``new``, and the ids of the tasks that had to move.

    Shapes:
        placement, new_placement: (num_tasks,) int64 device index per task
        orphans: (num_orphans,) int64 task ids

    Raises:
        InvalidPlacement: If ``placement`` is not a valid placement on ``old``.
        ConstraintViolation: If some task can run on no device of ``new``.
    """
    placement = check_placement(graph, old, placement)
    problem = PlacementProblem.of(graph, new)
    new, mask = problem.cluster, problem.mask
    index = {name: i for i, name in enumerate(new.names)}
    mapped = np.array([index.get(old.names[d], -1) for d in placement], dtype=np.int64)
    ok = mapped >= 0
    ok[ok] = mask[np.flatnonzero(ok), mapped[ok]]
    orphans = np.flatnonzero(~ok)
    fastest = np.argmax(np.where(mask, new.speed[None, :], -np.inf), axis=1)
    mapped[orphans] = fastest[orphans]
    return problem.check(mapped), orphans
