"""Adapting a placement to cluster changes: the adapt experiment, the multi-change adaptivity run, the changes.

* :func:`adapt`: after one change, GiPH's re-placement (``GiPH.adapt``, no retraining; over one or several seeds,
  optionally on a parallel ``mlsysopt.runtime`` executor) against a HEFT re-run and against keeping the placement
  (orphaned tasks parked on their fastest feasible device, no search).
* :func:`adaptivity`: the benchmark's run of successive changes cycling :data:`CHANGES` (remove 2, remove 4,
  add 2, add 4 devices); GiPH and "keep" each carry their own placement from change to change.
* Cluster changes: :func:`change_cluster` (named removals, generated additions), :func:`random_change` and
  :func:`removable_devices`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidCluster, MlsysoptError
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.generate import cluster_for, random_cluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.placement import placement_to_dict
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Simulator
from mlsysopt.placement.base import PlacementResult, default_budget
from mlsysopt.placement.baselines import HEFT
from mlsysopt.placement.giph import GiPH, carry_over
from mlsysopt.placement.tasks import AdaptTask, PolicySpec, run_adapt

if TYPE_CHECKING:
    from mlsysopt.runtime import Executor

#: The benchmark's cycle of cluster changes: (kind, number of devices).
CHANGES: tuple[tuple[str, int], ...] = (("remove", 2), ("remove", 4), ("add", 2), ("add", 4))


@dataclass
class Adaptation:
    """One cluster change: the placement before, GiPH's re-placement, HEFT's re-run and the kept placement.

    With several seeds, ``giph`` is the best of GiPH's re-placements (``giph_runs``, one per seed, each with the
    full budget).

    Args:
        problem: The graph on the changed cluster.
        before_makespan: Makespan of the start placement on the old cluster.
        kept: The start placement carried over (orphans on their fastest feasible device).
        orphans: Ids of the tasks whose device left (or no longer runs their type).
        keep_makespan: Makespan of ``kept`` on the changed cluster.
        heft: HEFT re-run on the changed cluster.
        giph: GiPH's best re-placement.
        giph_runs: GiPH's re-placement of each seed.
        seeds: The seeds of ``giph_runs``.

    Shapes:
        kept: (num_tasks,) int64 device index per task
        orphans: (num_orphans,) int64 task ids
    """

    problem: PlacementProblem  # the graph on the changed cluster
    before_makespan: float  # of the start placement on the old cluster
    kept: np.ndarray  # the start placement carried over (orphans on their fastest feasible device)
    orphans: np.ndarray  # ids of the tasks whose device left (or no longer runs their type)
    keep_makespan: float
    heft: PlacementResult
    giph: PlacementResult
    giph_runs: list[PlacementResult] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)

    @property
    def makespans(self) -> dict[str, float]:
        """Makespan after the change of each re-placement: ``giph_adapt`` (best seed), ``heft_rerun``, ``keep``."""
        return {"giph_adapt": self.giph.makespan, "heft_rerun": self.heft.makespan, "keep": self.keep_makespan}

    def to_dict(self, graph: CompGraph, new: DeviceCluster) -> dict[str, Any]:
        """JSON-ready, with task and device names (``new`` is the changed cluster)."""
        runs = self.giph_runs or [self.giph]
        return {
            "old_makespan": self.before_makespan,
            "orphaned_tasks": [graph.names[int(i)] for i in self.orphans],
            "makespans": self.makespans,
            "giph_seeds": {
                "seeds": self.seeds,
                "makespans": [r.makespan for r in runs],
                "stopped_by": [r.stopped_by for r in runs],  # per seed: "budget" or "timeout"
                "mean_makespan": float(np.mean([r.makespan for r in runs])),
            },
            "giph": self.giph.to_dict(graph, new),
            "heft": self.heft.to_dict(graph, new),
            "keep": {"makespan": self.keep_makespan, "placement": placement_to_dict(graph, new, self.kept)},
        }


def adapt(
    graph: CompGraph,
    old: DeviceCluster,
    new: DeviceCluster | PlacementProblem,
    placement: np.ndarray,
    giph: GiPH,
    budget: int | None = None,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    executor: Executor | None = None,
    timeout: float | None = None,
) -> Adaptation:
    """Re-place ``placement`` (on ``old``) after the cluster became ``new``: GiPH.adapt, HEFT re-run, keep.

    Args:
        budget: simulator evaluations of each GiPH re-placement (default: ``default_budget``).
        seed: GiPH's seed (when ``seeds`` is not given).
        seeds: GiPH's seeds: one re-placement each, the best one is ``giph``.
        executor: a parallel ``mlsysopt.runtime`` executor for the seeds (the caller closes it); the result is the
            same as serially.
        timeout: seconds of wall clock per GiPH re-placement.
    """
    problem = PlacementProblem.of(graph, new)
    kept, orphans = carry_over(graph, old, problem, placement)
    heft = HEFT().solve(problem, budget, seed)
    seed_list = [seed] if seeds is None else [int(s) for s in seeds]
    if not seed_list:
        raise MlsysoptError("adapt needs at least one seed")
    if executor is None or executor.workers <= 1:
        runs = [giph.adapt(graph, old, problem, placement, budget, s, timeout) for s in seed_list]
    else:
        spec, cluster = PolicySpec.of(giph), problem.cluster
        placement = np.asarray(placement, dtype=np.int64)
        runs = executor.map(
            run_adapt, [AdaptTask(graph, old, cluster, placement, spec, budget, s, timeout) for s in seed_list]
        )
    best = min(range(len(runs)), key=lambda k: (runs[k].makespan, k))
    before = Simulator(graph, old).makespan(placement)
    return Adaptation(problem, before, kept, orphans, problem.makespan(kept), heft, runs[best], runs, seed_list)


def adaptivity(
    giph: GiPH,
    graph: CompGraph,
    cluster: DeviceCluster,
    changes: int,
    seed: int = 0,
    on_change: Callable[[int, str, int, DeviceCluster, float, float], None] | None = None,
) -> dict[str, Any]:
    """Successive cluster changes (cycling :data:`CHANGES`) from HEFT's placement; ratios to a HEFT re-run.

    After each change GiPH adapts its own previous placement (the default budget), HEFT re-plans from scratch and
    "keep" only re-homes the orphans of its own previous placement. ``on_change(k, kind, count, new cluster,
    giph / heft, keep / heft)`` reports each change.

    Args:
        giph: The GiPH placer that adapts.
        graph: The placed graph.
        cluster: The starting cluster.
        changes: Number of successive changes.
        seed: Seed of the changes and of GiPH's searches.
        on_change: Called after each change (see above); None: silent.

    Returns:
        ``{"giph", "heft_rerun", "keep"}``: mean makespan / HEFT re-run makespan over the changes; ``per_change``:
        the ratios of every change; ``metric``: what the numbers are.

    Raises:
        InvalidCluster: If some change cannot remove devices and keep every task placeable.
    """
    rng = np.random.default_rng(seed)
    start = HEFT().place(graph, cluster).placement
    p_giph, p_keep = start.copy(), start.copy()
    ratios: dict[str, list[float]] = {"giph": [], "heft_rerun": [], "keep": []}
    fresh = 0
    for k in range(changes):
        kind, count = CHANGES[k % len(CHANGES)]
        new = random_change(cluster, graph, kind, count, rng, fresh)
        fresh += count if kind == "add" else 0
        problem = PlacementProblem(graph, new)
        heft = HEFT().solve(problem).makespan
        res = giph.adapt(graph, cluster, problem, p_giph, default_budget(graph), seed + k)
        keep, _ = carry_over(graph, cluster, problem, p_keep)
        keep_ms = problem.makespan(keep)
        ratios["giph"].append(res.makespan / heft)
        ratios["heft_rerun"].append(1.0)
        ratios["keep"].append(keep_ms / heft)
        if on_change is not None:
            on_change(k, kind, count, new, res.makespan / heft, keep_ms / heft)
        p_giph, p_keep, cluster = res.placement, keep, new
    return {
        **{m: float(np.mean(v)) for m, v in ratios.items()},
        "per_change": ratios,
        "metric": "mean makespan / HEFT re-run makespan after each change",
    }


# ---------------------------------------------------------------------------- cluster changes
def change_cluster(
    graph: CompGraph, cluster: DeviceCluster, remove: list[str], add: int, seed: int
) -> tuple[DeviceCluster, list[str]]:
    """``cluster`` without the ``remove``d devices and with ``add`` new ones; returns it and the new names.

    New devices are drawn like random clusters for the graph (:func:`~mlsysopt.graph.generate.cluster_for`, in
    the graph's units, seeded from ``seed``) and named ``devK`` with K past every old name, so no new device
    reuses a removed one's name. A change that leaves a task with no device that can run it is refused.

    Args:
        graph: The graph the cluster runs (sets the units and hardware types).
        cluster: The cluster to change.
        remove: Names of devices to remove (duplicates ignored).
        add: Number of devices to add (<= 0: none).
        seed: Seed of the added devices.

    Returns:
        ``(new_cluster, added_names)``.

    Raises:
        InvalidCluster: If a name is unknown or every device would be removed.
        ConstraintViolation: If some task has no device left that can run it.
    """
    new = cluster
    remove = list(dict.fromkeys(remove))
    if len(remove) >= cluster.num_devices and set(remove) == set(cluster.names):
        raise InvalidCluster(f"--remove names every device of the cluster ({', '.join(remove)}): one must stay")
    for name in remove:
        if name not in cluster.names:
            raise InvalidCluster(f"--remove: no device named '{name}' (have: {', '.join(cluster.names)})")
        new = new.remove_device(name)
    names: list[str] = []
    if add > 0:
        new, names = _add_devices(graph, cluster, new, add, seed)
    try:
        new.check_feasible(graph)
    except MlsysoptError as exc:
        raise type(exc)(f"after the change: {exc}") from None
    return new, names


def _add_devices(
    graph: CompGraph, cluster: DeviceCluster, new: DeviceCluster, add: int, seed: int
) -> tuple[DeviceCluster, list[str]]:

    base = new.num_devices
    gen = cluster_for(graph, base + add, seed=seed + 7919)
    names: list[str] = []
    k = cluster.num_devices
    for j in range(add):
        while f"dev{k}" in cluster.names or f"dev{k}" in new.names:
            k += 1
        g = base + j  # the generated device standing in for the new one; 0..base-1 stand in for the kept ones
        supports = np.zeros(new.num_types, bool)
        m = min(new.num_types, gen.num_types)
        supports[:m] = gen.supports[g, :m]
        new = new.add_device(
            float(gen.speed[g]), supports, gen.bandwidth[g, :g].copy(), gen.delay[g, :g].copy(), name=f"dev{k}"
        )
        names.append(f"dev{k}")
    return new, names


def random_change(
    cluster: DeviceCluster, graph: CompGraph, kind: str, count: int, rng: np.random.Generator, fresh: int
) -> DeviceCluster:
    """Remove ``count`` random devices (keeping every task placeable) or add ``count`` generated ones.

    Added devices are named ``new{fresh}``, ``new{fresh + 1}``, ...

    Args:
        cluster: The cluster to change.
        graph: The graph that must stay placeable.
        kind: ``add`` or ``remove`` (anything but ``add`` removes).
        count: Number of devices to add or remove.
        rng: Random generator for the choice and the new devices (links: bandwidth U(0.5, 1.5), delay U(0, 0.2)).
        fresh: First index of the added devices' names.

    Returns:
        The changed cluster.

    Raises:
        InvalidCluster: If 100 random draws of ``count`` devices to remove all left a task unplaceable.
    """

    if kind == "add":
        extra = random_cluster(count, num_types=cluster.num_types, seed=int(rng.integers(2**31)))
        new = cluster
        for j in range(count):
            bw = rng.uniform(0.5, 1.5, new.num_devices)
            dl = rng.uniform(0.0, 0.2, new.num_devices)
            new = new.add_device(extra.speed[j], extra.supports[j], bw, dl, name=f"new{fresh + j}")
        return new
    for _ in range(100):
        drop = rng.choice(cluster.num_devices, count, replace=False)
        new = cluster
        for name in [cluster.names[i] for i in drop]:
            new = new.remove_device(name)
        if new.feasible(graph).any(axis=1).all():
            return new
    raise InvalidCluster(f"could not remove {count} devices and keep every task placeable")


def removable_devices(graph: CompGraph, cluster: DeviceCluster, placement: np.ndarray, k: int) -> list[str]:
    """The ``k`` busiest devices of ``placement`` whose removal leaves every task a feasible device.

    Devices are tried from the most loaded (sum of ``compute`` placed on them); one device always stays.

    Args:
        graph: The placed graph.
        cluster: The cluster it is placed on.
        placement: Device id of every task, shape (num_tasks,) int.
        k: Most devices to return.

    Returns:
        Up to ``k`` device names, busiest first.
    """
    load = np.bincount(placement, weights=graph.compute, minlength=cluster.num_devices)
    chosen: list[str] = []
    current = cluster
    for dev in np.argsort(-load, kind="stable"):
        if len(chosen) == k or current.num_devices == 1:
            break
        candidate = current.remove_device(cluster.names[int(dev)])
        if candidate.feasible(graph).any(axis=1).all():
            chosen.append(cluster.names[int(dev)])
            current = candidate
    return chosen
