"""Bounds on every size a NAS search takes, from this machine's memory and a time ceiling, checked before it starts.

:func:`check_search_size` runs after the space is built and before the run folder exists or anything is allocated;
each refusal names the option, the value, the limit and what it was derived from:

* ``--budget``: every evaluation is kept in memory, in the checkpoint and in result.json (:data:`BYTES_PER_EVALUATION`
  each), so at most :data:`MEMORY_SHARE` of the available memory's worth; a table space also has only so many
  distinct architectures (NAS-Bench-Graph cora: 26,206; proteins: 2,021).
* ``--workers``: a local worker is a process with torch (CNN) or the table (NAS-Bench-Graph) loaded
  (:data:`WORKER_BYTES`); on Ray the driver holds each task in flight (:data:`RAY_TASK_BYTES`).
* ``--max-blocks``, ``--epochs`` (CNN spaces): training the largest candidate must fit in memory (weights, gradients,
  Adam state and a batch's activations, per worker) and in :data:`MAX_EVALUATION_S` (a timeout cannot interrupt a
  candidate mid-training); an image folder's images must fit in memory in every worker that loads them.
* Without ``--timeout`` the whole search must fit in :data:`MAX_SEARCH_S`.

Time estimates are lower bounds (an optimistic :data:`TRAIN_FLOPS_PER_S` and :data:`STEP_OVERHEAD_S`), so only
searches that certainly exceed a ceiling are refused.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidOption
from mlsysopt.limits import available_memory
from mlsysopt.nas.spaces.cnn_resources import static_resources

if TYPE_CHECKING:
    from mlsysopt.nas.spaces.base import SearchSpace
    from mlsysopt.nas.spaces.cnn import CnnSpace

MEMORY_SHARE = 0.5  # of the available memory a search may plan to use
BYTES_PER_EVALUATION = 4096  # one evaluation in memory, in the checkpoint and in result.json (measured ~1.5 KB)
WORKER_BYTES = {"cnn": 512 * 2**20, "table": 256 * 2**20}  # a pool worker with torch / the table loaded
RAY_TASK_BYTES = 2**20  # a task in flight in the driver: the pickled space and a result with trained weights
MAX_EVALUATION_S = 86_400.0  # one candidate's training: a day at most
MAX_SEARCH_S = 30 * 86_400.0  # a search without --timeout: 30 days at most
TRAIN_FLOPS_PER_S = 5e11  # FLOP/s per training thread: above any CPU core's float32 peak, so estimates are lower bounds
STEP_OVERHEAD_S = 2e-5  # optimistic fixed cost of one optimizer step
MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _duration(s: float) -> str:
    if s >= 2 * 86_400:
        return f"{s / 86_400:,.0f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:,.0f} h"
    return f"{s:,.0f} s"


def max_budget(space: SearchSpace, memory: int | None = None) -> tuple[int, str]:
    """The largest ``--budget`` for ``space`` and why (memory, or the table's distinct architectures)."""
    memory = available_memory() if memory is None else memory
    by_memory = int(memory * MEMORY_SHARE // BYTES_PER_EVALUATION)
    table = getattr(space, "table", None)
    if isinstance(table, dict) and len(table) < by_memory:
        return len(table), f"{space.name} has {len(table):,} distinct architectures"
    why = f"{BYTES_PER_EVALUATION:,} bytes per evaluation in {MEMORY_SHARE:.0%} of the {_gib(memory)} available"
    return by_memory, why


def max_workers(kind: str, backend: str, memory: int | None = None) -> tuple[int, str]:
    """The largest ``--workers`` and why: a local worker process each, or a Ray task in flight each."""
    memory = available_memory() if memory is None else memory
    if backend == "ray":
        each, what = RAY_TASK_BYTES, "per Ray task in flight in the driver"
    else:
        each, what = WORKER_BYTES[kind], "per local worker process"
    n = max(1, int(memory * MEMORY_SHARE // each))
    return n, f"{_gib(each)} {what} in {MEMORY_SHARE:.0%} of the {_gib(memory)} available"


# ---------------------------------------------------------------------------- CNN training cost
def _block(space: CnnSpace, smallest: bool) -> tuple[str, int]:
    """The op and width of the costliest block (both ops that op, the widest width), or of the cheapest."""
    w = min(space.widths) if smallest else max(space.widths)
    flops = {op: static_resources([(op, op, w)] * 2, space.input_shape, space.n_classes, space.stem_width)["flops"]
             for op in space.ops}  # fmt: skip
    pick = min if smallest else max
    return pick(flops, key=lambda op: flops[op]), w


def training_cost(space: CnnSpace, blocks: int, smallest: bool = False) -> dict[str, float]:
    """Lower bounds for training the costliest (or cheapest) ``blocks``-block candidate: ``seconds``, ``bytes``."""
    op, w = _block(space, smallest)
    shape, n_cls, stem = space.input_shape, space.n_classes, space.stem_width
    r1 = static_resources([(op, op, w)], shape, n_cls, stem)
    r2 = static_resources([(op, op, w)] * 2, shape, n_cls, stem)

    def node_bytes(r: dict[str, float]) -> float:
        return r["flops"] / r["intensity"] - 4 * r["params"] if r["intensity"] > 0 else 0.0

    def at(v1: float, v2: float) -> float:  # blocks after the first are identical: every figure is linear in blocks
        return v1 + (blocks - 1) * (v2 - v1)

    params, flops = at(r1["params"], r2["params"]), at(r1["flops"], r2["flops"])
    activations = at(node_bytes(r1), node_bytes(r2))
    images = space.train_images()
    steps = math.ceil(images / space.batch_size)
    rate = TRAIN_FLOPS_PER_S * space.threads
    seconds = space.epochs * (3 * flops * images / rate + steps * STEP_OVERHEAD_S)
    # weights, gradients and Adam's two moments (float32), and a batch's activations kept for the backward pass
    nbytes = 16 * params + space.batch_size * activations
    return {"seconds": seconds, "bytes": nbytes, "images": float(images)}


def _check_cnn(space: CnnSpace, memory: int, workers_here: int) -> None:
    """``--max-blocks``, ``--epochs`` and the dataset against memory and :data:`MAX_EVALUATION_S`."""
    per_worker = memory * MEMORY_SHARE / workers_here
    data_bytes = 2 * 4 * space.dataset_images() * math.prod(space.input_shape)  # raw + normalised float32
    if data_bytes > per_worker:
        raise InvalidOption(
            f"the images of {space.name} need ~{_gib(data_bytes)} in every process that trains ({workers_here} here), "
            f"more than the {_gib(per_worker)} each can have ({MEMORY_SHARE:.0%} of the {_gib(memory)} available): "
            "use fewer workers or smaller images"
        )
    blocks = space.max_blocks
    cost = training_cost(space, blocks)
    per_block = training_cost(space, 2)["bytes"] - training_cost(space, 1)["bytes"]
    if cost["bytes"] > per_worker - data_bytes:
        most = max(1, int((per_worker - data_bytes - training_cost(space, 1)["bytes"]) // max(per_block, 1)) + 1)
        raise InvalidOption(
            f"--max-blocks {blocks}: training the largest candidate needs at least {_gib(cost['bytes'])} per worker, "
            f"more than the {_gib(per_worker - data_bytes)} each of {workers_here} can have; the limit here is "
            f"--max-blocks {most:,}"
        )
    if cost["seconds"] > MAX_EVALUATION_S:
        epochs = max(0, int(MAX_EVALUATION_S // (cost["seconds"] / space.epochs)))
        raise InvalidOption(
            f"--epochs {space.epochs:,} with --max-blocks {blocks:,}: training the largest candidate on "
            f"{int(cost['images']):,} images takes at least {_duration(cost['seconds'])}, more than the "
            f"{_duration(MAX_EVALUATION_S)} one candidate may take; the limit at {blocks:,} block(s) is "
            f"--epochs {epochs:,}"
        )


def check_search_size(space: SearchSpace, options: Any, memory: int | None = None) -> None:
    """Refuse a budget, worker count, block count, epoch count or dataset beyond this machine (see the module doc).

    ``options`` is a :class:`~mlsysopt.nas.experiment.SearchOptions` (``budget``, ``workers``, ``backend``,
    ``timeout``, ``space_options``).

    Args:
        space: The search space.
        options: The search options (``budget``, ``workers``, ``backend``, ``timeout``, ``space_options``).
        memory: Available memory in bytes (None: measured on this machine).

    Raises:
        InvalidOption: If the budget, workers, blocks, epochs or dataset exceed what this machine allows.
    """
    memory = available_memory() if memory is None else memory
    most, why = max_budget(space, memory)
    if options.budget > most:
        raise InvalidOption(f"--budget {options.budget:,} is more than the {most:,} evaluations allowed here ({why})")
    cnn = hasattr(space, "train_images")
    most, why = max_workers("cnn" if cnn else "table", options.backend, memory)
    if options.workers > most:
        raise InvalidOption(f"--workers {options.workers:,} is more than the {most:,} allowed here ({why})")
    if not cnn:
        return
    workers_here = 1 if options.backend == "ray" else max(1, min(options.workers, options.budget))
    _check_cnn(space, memory, workers_here)  # type: ignore[arg-type]
    if options.timeout is None:
        fastest = training_cost(space, space.min_blocks, smallest=True)["seconds"]  # type: ignore[arg-type]
        total = options.budget * fastest / max(1, options.workers)
        if total > MAX_SEARCH_S:
            raise InvalidOption(
                f"--budget {options.budget:,}: even at its smallest candidates the search takes at least "
                f"{_duration(total)} on {options.workers} worker(s), more than {_duration(MAX_SEARCH_S)}; "
                "lower --budget or set --timeout SECONDS"
            )
