"""Size limits of GiPH training and the placement searches, from this machine's memory and a bound on run time.

Every size a user gives (tasks, devices, updates, episodes, hidden units, evaluations, seeds) is checked here
*before* anything is allocated, against estimates calibrated on the development machine (2 shared cores; see the
README's placement section):

* **Memory.** Training's replay keeps the autograd graph of every step of an episode: about
  :data:`REPLAY_BYTES` per gpNet element per hidden unit per step, where a gpNet of ``n`` tasks on ``d`` devices
  has ``n·d`` nodes and about ``2·E·d`` edges, and a layered DAG has ``E ≈ edge_p·n²/2`` edges (measured: 10 GB
  for one episode of 200 tasks on 10 devices with 32 hidden units). A search holds one gpNet
  (:data:`SEARCH_BYTES` per element per hidden unit), a drawn cluster three ``d × d`` float matrices and a WfCommons
  recipe about :data:`RECIPE_BYTES_PER_TASK` per task while it is generated. The limit is
  :data:`MEMORY_FRACTION` of this machine's physical memory.
* **Time.** About :data:`STEP_NS` per gpNet element per hidden unit per training step (rollout and replay) and
  :data:`SEARCH_NS` per element per hidden unit per GiPH evaluation; the estimated run time of one command must stay
  under :data:`TIME_LIMIT_S` (a week). A ``--timeout`` bounds a search's time by itself.

The errors name the options, the estimate and the limit, and the largest value that fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mlsysopt.errors import InvalidOption
from mlsysopt.limits import physical_memory


class TrainConfig(Protocol):
    """The sizes of a :class:`~mlsysopt.placement.config.TrainConfig` these checks read (config calls them)."""

    updates: int
    episodes_per_update: int
    max_tasks: int
    max_devices: int
    hidden: int
    steps_per_task: int
    edge_p: float
    imitation_problems: int
    teacher_steps: int
    imitation_epochs: int


#: Share of physical memory one command may plan to use.
MEMORY_FRACTION = 0.5
#: Longest estimated run time of one command, in seconds (7 days).
TIME_LIMIT_S = 7 * 24 * 3600
#: Autograd memory kept per gpNet element per hidden unit per step of a replayed episode (measured ~13-14).
REPLAY_BYTES = 16
#: Peak memory of one search step per gpNet element per hidden unit (measured RSS growth ~90).
SEARCH_BYTES = 100
#: Training time per gpNet element per hidden unit per step, rollout + replay (measured 40-60 ns).
STEP_NS = 60
#: GiPH search time per gpNet element per hidden unit per evaluation (measured ~11 ns).
SEARCH_NS = 15
#: Simulator time per (task + edge) per evaluation, for the baselines (a generous bound).
SIM_NS = 500
#: Memory of the WfCommons recipe generator per requested task (measured ~18 KB).
RECIPE_BYTES_PER_TASK = 20_000
#: Beyond these the estimates are not computed (the value is refused at once): they keep the arithmetic small.
HARD_MAX = 10**12
#: Most seeds per method of one ``compare`` or ``adapt`` (each seed is one search per method; a figure over more
#: seeds gains nothing a second command would not, and 100,000 of them filled a store for minutes).
MAX_SEEDS = 1_000
#: Most imitation problems, teacher steps per start and imitation epochs of one training (defaults 120, 8 and 6):
#: the teacher solves every problem before the first update, so these bound the imitation phase's time and the size
#: of ``teacher.pt`` (a larger imitation phase is not a policy a CPU trains in a week).
MAX_IMITATION_PROBLEMS = 100_000
MAX_TEACHER_STEPS = 10_000
MAX_IMITATION_EPOCHS = 100_000
#: Widest policy (as ``costmodel train --hidden``): wider gpNets are not policies a CPU trains.
MAX_HIDDEN = 4096
#: Training memory that grows with hidden x hidden: gpNet's ~9 weight matrices, their grads, Adam's two moments and
#: temporaries (measured RSS growth ~360 bytes per hidden^2 at hidden 1024-2048 on 8-task graphs, 20 devices).
PARAM_BYTES_PER_HIDDEN2 = 400
#: Wide policies are bound by arithmetic, not per-op overhead: ~90 hidden^2 FLOPs per element per training step
#: (forward + backward of ~15 hidden x hidden products), at ~5e10 FLOP/s (measured: ~2 s per step at hidden 2048
#: on 440 gpNet elements, 2 shared cores).
STEP_FLOPS_PER_HIDDEN2 = 90
FLOPS_PER_S = 5e10


def memory_limit() -> int:
    """Bytes one command may plan to use: :data:`MEMORY_FRACTION` of this machine's physical memory.

    Returns:
        The limit, in bytes.
    """
    return int(physical_memory() * MEMORY_FRACTION)


def gpnet_elements(tasks: int, edges: int, devices: int) -> int:
    """Nodes + edges of a gpNet of ``tasks`` tasks with ``edges`` edges on ``devices`` devices (upper estimate)."""
    return tasks * devices + 2 * edges * devices


def layered_edges(tasks: int, edge_p: float) -> int:
    """Expected edges of a layered DAG of ``tasks`` tasks (edges to earlier layers with probability ``edge_p``)."""
    return max(tasks - 1, int(edge_p * tasks * tasks / 2))


def episode_bytes(tasks: int, devices: int, hidden: int, steps_per_task: int = 2, edge_p: float = 0.2) -> int:
    """Estimated memory of replaying one training episode of ``tasks`` tasks on ``devices`` devices."""
    elements = gpnet_elements(tasks, layered_edges(tasks, edge_p), devices)
    return REPLAY_BYTES * steps_per_task * tasks * elements * hidden


def training_bytes(tasks: int, devices: int, hidden: int, steps_per_task: int = 2, edge_p: float = 0.2) -> int:
    """Estimated peak memory of a training: one replayed episode plus the policy's weights, grads and Adam state."""
    return episode_bytes(tasks, devices, hidden, steps_per_task, edge_p) + PARAM_BYTES_PER_HIDDEN2 * hidden * hidden


def step_seconds(elements: int, hidden: int) -> float:
    """Estimated time of one training step on a gpNet of ``elements`` (per-op overhead or arithmetic, the larger)."""
    return elements * max(STEP_NS * hidden * 1e-9, STEP_FLOPS_PER_HIDDEN2 * hidden * hidden / FLOPS_PER_S)


def training_seconds(cfg: TrainConfig) -> float:
    """Estimated run time of a training (every episode at the largest sizes: an upper estimate)."""
    steps = cfg.steps_per_task * cfg.max_tasks
    elements = gpnet_elements(cfg.max_tasks, layered_edges(cfg.max_tasks, cfg.edge_p), cfg.max_devices)
    return cfg.updates * cfg.episodes_per_update * steps * step_seconds(elements, cfg.hidden)


def human_bytes(n: float) -> str:
    """``1.5 GB``-style text."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


def human_seconds(s: float) -> str:
    """``3.2 days``-style text."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


def _largest(fits: Callable[[int], bool], low: int, high: int = HARD_MAX) -> int:
    """The largest ``v`` in ``[low, high]`` with ``fits(v)`` (``fits`` monotone); ``low - 1`` when none fits."""
    if not fits(low):
        return low - 1
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def check_seeds(seeds: int) -> None:
    """InvalidOption naming ``--seeds`` and its bound when ``seeds`` is below 1 or above :data:`MAX_SEEDS`.

    Args:
        seeds: Seeds per method.

    Raises:
        InvalidOption: If it is out of bounds.
    """
    if not 1 <= seeds <= MAX_SEEDS:
        raise InvalidOption(
            f"--seeds {seeds:,}: must be between 1 and {MAX_SEEDS:,} (seeds per method; each is one search of "
            "every method)"
        )


def _hard_max(**values: int) -> None:
    for name, value in values.items():
        if value > HARD_MAX:
            raise InvalidOption(f"--{name.replace('_', '-')} {value} is beyond any limit (at most {HARD_MAX:.0e})")


def check_training(cfg: TrainConfig) -> None:
    """InvalidOption when a training's largest episode does not fit in memory or its run time is beyond the limit."""
    _hard_max(
        updates=cfg.updates,
        episodes_per_update=cfg.episodes_per_update,
        max_tasks=cfg.max_tasks,
        max_devices=cfg.max_devices,
        hidden=cfg.hidden,
    )
    for flag, value, most in (
        ("--imitation-problems", cfg.imitation_problems, MAX_IMITATION_PROBLEMS),
        ("--teacher-steps", cfg.teacher_steps, MAX_TEACHER_STEPS),
        ("--imitation-epochs", cfg.imitation_epochs, MAX_IMITATION_EPOCHS),
    ):
        if value > most:
            raise InvalidOption(f"{flag} {value:,} is above the limit of {most:,} (the teacher's imitation phase "
                                "runs in full before the first update)")  # fmt: skip
    if cfg.hidden > MAX_HIDDEN:
        raise InvalidOption(
            f"--hidden {cfg.hidden:,} is above the limit of {MAX_HIDDEN:,} (wider policies do not fit a CPU "
            "training step: their weights alone grow with hidden x hidden)"
        )
    limit = memory_limit()
    n, d, h, k, p = cfg.max_tasks, cfg.max_devices, cfg.hidden, cfg.steps_per_task, cfg.edge_p
    need = training_bytes(n, d, h, k, p)
    if need > limit:
        tasks = _largest(lambda t: training_bytes(t, d, h, k, p) <= limit, 2)
        hidden = _largest(lambda u: training_bytes(n, d, u, k, p) <= limit, 1)
        hints = [f"--max-tasks {tasks}" if tasks >= 2 else "", f"--hidden {hidden}" if hidden >= 1 else ""]
        hint = " or ".join(filter(None, hints)) or "fewer devices"
        hint = f"at most {hint} (the other sizes kept)" if tasks >= 2 or hidden >= 1 else hint
        raise InvalidOption(
            f"--max-tasks {n} --max-devices {d} --hidden {h}: one training episode needs an estimated "
            f"{human_bytes(need)} of memory, over the limit of {human_bytes(limit)} ({MEMORY_FRACTION:.0%} of this "
            f"machine's memory); {hint}"
        )
    seconds = training_seconds(cfg)
    if seconds > TIME_LIMIT_S:
        per_update = seconds / cfg.updates
        most = int(TIME_LIMIT_S // per_update)
        hint = f"at most --updates {most} of this size" if most >= 1 else "fewer episodes or smaller problems"
        raise InvalidOption(
            f"--updates {cfg.updates} x --episodes-per-update {cfg.episodes_per_update} at up to {n} tasks on {d} "
            f"devices: an estimated {human_seconds(seconds)} of training, over the limit of "
            f"{human_seconds(TIME_LIMIT_S)}; {hint} (--resume continues a run later)"
        )


def check_devices(devices: int) -> None:
    """InvalidOption when a drawn cluster of ``devices`` devices (three d x d float matrices) does not fit."""
    _hard_max(devices=devices)
    limit = memory_limit()
    need = 24 * devices * devices
    if need > limit:
        most = _largest(lambda d: 24 * d * d <= limit, 1)
        raise InvalidOption(
            f"--devices {devices}: the cluster's bandwidth and delay matrices need an estimated {human_bytes(need)}, "
            f"over the limit of {human_bytes(limit)}; at most --devices {most}"
        )


def check_num_tasks(num_tasks: int) -> None:
    """InvalidOption when a WfCommons recipe of ``num_tasks`` tasks would not fit in memory while it is built."""
    _hard_max(num_tasks=num_tasks)
    limit = memory_limit()
    need = RECIPE_BYTES_PER_TASK * num_tasks
    if need > limit:
        raise InvalidOption(
            f"--num-tasks {num_tasks}: generating the recipe needs an estimated {human_bytes(need)}, over the limit "
            f"of {human_bytes(limit)}; at most --num-tasks {limit // RECIPE_BYTES_PER_TASK}"
        )


def check_search(
    tasks: int,
    edges: int,
    devices: int,
    budget: int,
    runs: int = 1,
    hidden: int | None = None,
    timeout: float | None = None,
) -> None:
    """InvalidOption when ``runs`` searches of ``budget`` evaluations (GiPH's when ``hidden``) are out of bounds.

    Args:
        tasks, edges, devices: the problem's size.
        budget: simulator evaluations per search.
        runs: searches the command runs (methods x seeds).
        hidden: the GiPH policy's hidden units, when a GiPH method runs (its gpNet must fit in memory).
        timeout: seconds per search (bounds each search's time whatever the budget).
    """
    _hard_max(budget=budget, seeds=runs)
    limit = memory_limit()
    elements = gpnet_elements(tasks, edges, devices)
    need = 24 * tasks * devices + (SEARCH_BYTES * elements * hidden if hidden else 0)
    if need > limit:
        what = "the problem and GiPH's gpNet need" if hidden else "the problem needs"
        raise InvalidOption(
            f"{tasks} tasks ({edges} edges) on {devices} devices: {what} an estimated {human_bytes(need)}, over the "
            f"limit of {human_bytes(limit)}; use fewer devices (--devices) or a smaller graph"
        )
    per_eval = max(SIM_NS * (tasks + edges), SEARCH_NS * elements * hidden if hidden else 0) * 1e-9
    per_run = budget * per_eval if timeout is None else min(budget * per_eval, timeout)
    seconds = runs * per_run
    if seconds > TIME_LIMIT_S:
        most = int(TIME_LIMIT_S // (runs * per_eval))
        raise InvalidOption(
            f"--budget {budget} x {runs} search(es) on {tasks} tasks x {devices} devices: an estimated "
            f"{human_seconds(seconds)}, over the limit of {human_seconds(TIME_LIMIT_S)}; at most --budget {most}, "
            "or give --timeout SECONDS per search"
        )
