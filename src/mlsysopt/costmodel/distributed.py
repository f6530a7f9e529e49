"""Data-parallel GST training: one rank per process in a torch.distributed (gloo) group, locally or on Ray actors.

``costmodel.train(..., workers=N)`` runs :func:`mlsysopt.costmodel.experiment.train_rank` in N processes through
:func:`mlsysopt.runtime.run_data_parallel`. Every rank builds the same trainer from the same seed and reads the
same data; the graphs of each step are split over the ranks (graph ``j`` of a step on rank ``j % workers``), the
gradients summed with one all-reduce per step, and the history-table writes exchanged, so every rank holds the
same model and table and the run gives the single-process loss curve up to float summation order. Rank 0 writes
the checkpoint (into the run folder, which must be at the same path on every node: a shared filesystem) and
returns the result. A lost rank or a lost Ray head fails the job with :class:`~mlsysopt.runtime.ExecutorLost`;
the last checkpoint stays and ``--resume`` continues it, with any backend.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from mlsysopt.errors import InvalidOption


class Comm:
    """The collectives the trainer needs, over the default torch.distributed group.

    The constructor takes no arguments; ``torch.distributed`` must already be initialized (it reads the rank and world
    size of the default group).
    """

    def __init__(self) -> None:

        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def any(self, flag: bool) -> bool:
        """True on every rank if ``flag`` is true on any."""
        t = torch.tensor([1.0 if flag else 0.0])
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def all_reduce_grads(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients over the ranks (one flat all-reduce); a parameter no rank touched keeps no gradient."""
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        has = torch.tensor([float(p.grad is not None) for p in params])
        self.dist.all_reduce(flat)
        self.dist.all_reduce(has, op=self.dist.ReduceOp.MAX)
        offset = 0
        for p, h in zip(params, has.tolist(), strict=True):
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone() if h > 0 else None
            offset += n


def check_workers(workers: int, graphs_per_step: int) -> None:
    """InvalidOption when the ranks cannot all get graphs: each step's graphs are split over the workers."""
    if workers > graphs_per_step:
        raise InvalidOption(
            f"--workers {workers} needs --graphs-per-step >= {workers}: each step's graphs are split over the ranks"
        )
