"""Stage 1 of the shipped policy's training: imitate a steepest-descent teacher.

Read top to bottom: :func:`training_problem` draws problem ``seed`` of the training distribution;
:func:`teacher_samples` walks the teacher on it — at each placement it evaluates *every* critical-path move
(relocations, swaps, chain moves: :func:`~mlsysopt.placement.moves.move_set`) in one batch, scores them by how much
they shorten the makespan, and takes the best — from HEFT's placement and from a random one, for ``teacher_steps``
moves or until no move helps; each visited placement is one :class:`TeacherSample`. :func:`imitation_loss` is the
listwise cross-entropy between the policy's distribution over those moves and the teacher's
``softmax(gain / tau)``, ``tau`` a quarter of the best gain (so the best few moves carry the target). Samples hold
placements, not gpNets: the gpNet is rebuilt (deterministically) when the loss is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.baselines.heft import heft_schedule
from mlsysopt.placement.distribution import sample_problem
from mlsysopt.placement.gpnet import GpNetBuilder
from mlsysopt.placement.moves import move_set, node_ids
from mlsysopt.placement.policy import GiPHPolicy

#: Most moves the teacher scores at one placement (a random subset beyond it).
MAX_MOVES = 3000


@dataclass(frozen=True)
class TeacherSample:
    """One teacher state: the problem's seed, the placement, its critical-path moves and the teacher's target."""

    seed: int
    placement: np.ndarray
    node: np.ndarray  # (M,) gpNet node of each move
    kind: np.ndarray  # (M,) move kind
    target: np.ndarray  # (M,) the teacher's distribution over the moves


def training_problem(seed: int, distribution: str, max_tasks: int = 200) -> PlacementProblem:
    """Problem ``seed`` of the training distribution (``mixed``: :mod:`mlsysopt.placement.distribution`;
    ``layered``: GiPH's layered DAGs on random clusters only)."""

    graph, cluster, _ = sample_problem(seed, "layered" if distribution == "layered" else None, max_tasks)
    return PlacementProblem(graph, cluster)


def teacher_samples(problem: PlacementProblem, seed: int, steps: int) -> list[TeacherSample]:
    """The steepest-descent teacher's states on ``problem`` from HEFT's placement and from a random one."""

    rng = np.random.default_rng([seed, 31])
    ids = node_ids(problem)
    out: list[TeacherSample] = []
    for start in (heft_schedule(problem)[0], problem.random_placement(rng)):
        current = start.copy()
        current_ms = problem.makespan(current)
        for _ in range(steps):
            moves = move_set(problem, current, problem.simulate(current), ids)
            if moves.size == 0:
                break
            rows = np.arange(moves.size)
            if rows.size > MAX_MOVES:
                rows = np.sort(rng.choice(rows, MAX_MOVES, replace=False))
            ms = problem.simulator.makespans(moves.apply(current, rows), check=False)
            gain = (current_ms - ms) / current_ms if current_ms > 0 else np.zeros(rows.size)
            best = int(np.argmax(gain))
            if gain[best] <= 1e-9:
                break
            tau = 0.25 * float(gain[best])
            target = np.exp((gain - gain[best]) / tau)
            out.append(
                TeacherSample(
                    seed,
                    current.copy(),
                    moves.node[rows],
                    moves.kind[rows],
                    (target / target.sum()).astype(np.float32),
                )
            )
            current = moves.apply(current, rows[best : best + 1])[0]
            current_ms = float(ms[best])
    return out


def imitation_loss(
    policy: GiPHPolicy, builder: GpNetBuilder, sample: TeacherSample, with_top: bool = False
) -> torch.Tensor | tuple[torch.Tensor, int]:
    """Cross-entropy of the teacher's target under the policy's softmax over the sample's moves (with grad);
    ``with_top``: also the index of the policy's top-scored move."""
    problem = builder.problem
    gp = builder.build(sample.placement, problem.simulate(sample.placement))
    logits = policy.move_logits(gp)
    column = torch.as_tensor(np.minimum(sample.kind, logits.shape[1] - 1))
    scores = logits[torch.as_tensor(sample.node), column]
    loss = -(torch.as_tensor(sample.target) * torch.log_softmax(scores, dim=0)).sum()
    return (loss, int(scores.argmax())) if with_top else loss


def collect(args: tuple[int, str, int, int]) -> list[TeacherSample]:
    """Picklable unit of work for the executors: the teacher's samples of training problem ``seed``."""
    seed, distribution, steps, max_tasks = args
    return teacher_samples(training_problem(seed, distribution, max_tasks), seed, steps)
