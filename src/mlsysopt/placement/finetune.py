"""Stage 2 of the shipped policy's training: REINFORCE on the local search the policy proposes moves for.

An episode is GiPH's own search (:func:`~mlsysopt.placement.move_search.local_search`) on a training problem,
from the better of HEFT's and the all-on-the-fastest-device placement, with ``search_budget_per_task`` evaluations
per task. Each batch of K proposals is one action: an ordered draw without replacement from ``softmax(score /
temperature)`` over the untried moves, whose log-probability is the Plackett-Luce sum
``sum_j score(p_j)/T - logsumexp(untried after j-1 draws)``; its reward is the makespan decrease it achieved, divided by
the episode's start makespan. Returns are discounted with γ, a running mean per batch index is the baseline, and the
advantages are scaled to unit deviation over the update's episodes. :func:`search_episode` plays an episode
without grad (any executor); :func:`episode_loss` replays it deterministically with grad.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import Evaluator
from mlsysopt.placement.baselines.fastest_device import fastest_placement
from mlsysopt.placement.baselines.heft import heft_schedule
from mlsysopt.placement.giph import PolicyScorer
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.imitation import training_problem
from mlsysopt.placement.move_search import SearchConfig, local_search
from mlsysopt.placement.moves import move_set, node_ids, other_moves
from mlsysopt.placement.policy import GiPHPolicy, PolicyConfig
from mlsysopt.runtime.threads import torch_threads


@dataclass
class Episode:
    """One recorded search: its problem seed, the states moves were drawn from, each batch and its reward."""

    seed: int
    states: list[np.ndarray]
    batches: list[tuple[int, bool, np.ndarray, np.ndarray, float]]
    start_makespan: float
    best_makespan: float

    @property
    def rewards(self) -> list[float]:
        """Per batch: makespan decrease / start makespan."""
        return [b[4] / self.start_makespan if self.start_makespan > 0 else 0.0 for b in self.batches]


def search_episode(args: tuple[dict[str, Any], dict[str, Any], str, int, int, int, int]) -> Episode:
    """Play one recorded search episode with a copy of the policy (picklable arguments)."""

    config, state, distribution, seed, per_task, max_tasks, proposals = args
    policy = GiPHPolicy(PolicyConfig(**config))
    policy.load_state_dict(state)
    policy.eval()
    problem = training_problem(seed, distribution, max_tasks)
    ev = Evaluator(problem, per_task * problem.num_tasks)
    starts = [(n, p, ev(p)) for n, p in (("heft", heft_schedule(problem)[0]), ("fastest", fastest_placement(problem)))]
    start_ms = min(s[2] for s in starts)
    rng = np.random.default_rng([seed, 97])
    with torch_threads(1):
        trace = local_search(
            problem, ev, starts, PolicyScorer(policy, problem), rng, SearchConfig(proposals=proposals), record=True
        )
    return Episode(seed, trace.states, trace.batches, start_ms, ev.best_makespan)


def episode_loss(
    policy: GiPHPolicy, episode: Episode, advantages: np.ndarray, distribution: str, max_tasks: int, temperature: float
) -> torch.Tensor:
    """``-sum_b advantage_b * log P(batch b's draws)`` of a recorded episode under ``policy`` (with grad)."""

    problem: PlacementProblem = training_problem(episode.seed, distribution, max_tasks)
    builder = GpNetBuilder(problem)
    ids = node_ids(problem)
    by_state: dict[int, list[int]] = {}
    for b, batch in enumerate(episode.batches):
        by_state.setdefault(batch[0], []).append(b)
    total = torch.zeros(())
    for s, batches in by_state.items():
        placement = episode.states[s]
        sched = problem.simulate(placement)
        logits = policy.move_logits(builder.build(placement, sched))
        moves = move_set(problem, placement, sched, ids)
        if any(episode.batches[b][1] for b in batches):
            moves = other_moves(problem, placement, moves, ids)
        column = torch.as_tensor(np.minimum(moves.kind, logits.shape[1] - 1))
        scores = logits[torch.as_tensor(moves.node), column] / temperature
        for b in batches:
            _, _, avail, picks, _ = episode.batches[b]
            if advantages[b] == 0.0:
                continue
            total = total - float(advantages[b]) * _plackett_luce(scores[: avail.size], avail, picks)
    return total


def _plackett_luce(scores: torch.Tensor, avail: np.ndarray, picks: np.ndarray) -> torch.Tensor:
    """Log-probability of drawing ``picks`` in order, without replacement, from softmax(scores) over ``avail``."""
    idx = np.flatnonzero(avail)
    where = {int(m): k for k, m in enumerate(idx.tolist())}
    sub = scores[torch.as_tensor(idx)]
    taken = torch.zeros(idx.size, dtype=torch.bool)
    out = torch.zeros(())
    for p in picks.tolist():
        k = where[int(p)]
        out = out + sub[k] - torch.logsumexp(sub.masked_fill(taken, float("-inf")), dim=0)
        taken = taken | (torch.arange(idx.size) == k)
    return out
