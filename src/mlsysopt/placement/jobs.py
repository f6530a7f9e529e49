"""The placement commands as library calls: a typed request, checked once, then a job that writes its run folder.

``mlsysopt placement place|compare|adapt`` build a :class:`PlaceRequest`, :class:`CompareRequest` or
:class:`AdaptRequest` and run it; a Python user gets the same checks, bounds and outputs::

    from mlsysopt.placement.jobs import PlaceRequest, place
    from mlsysopt.placement.problem_spec import ProblemSpec

    outcome = place(PlaceRequest(ProblemSpec("montage", devices=8), out="runs/p", budget=200))
    outcome.result["makespan"], outcome.files  # result.json's figures (seconds), the files written

Every request is checked when it is built (sizes bounded before anything is loaded or drawn, names and options
refused with one :class:`~mlsysopt.errors.MlsysoptError` naming the option), and :func:`prepare_place` (and its
siblings) check the run folder before anything is created. Nothing is written until the job runs. ``status`` is a
context-manager factory the command line passes to show what is going on (``rich``'s ``console.status``); the
library's default shows nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.graph.placement import load_placement, placement_to_dict
from mlsysopt.graph.units import implausible, mismatch
from mlsysopt.io import RunDir
from mlsysopt.placement.base import default_budget
from mlsysopt.placement.experiment import compare, comparison, run_method
from mlsysopt.placement.limits import check_devices, check_seeds
from mlsysopt.placement.methods import DEFAULT_METHOD, METHODS, get_method, heft_placement, select_methods
from mlsysopt.placement.problem_spec import (  # the problem every job places, and what the jobs share
    LoadedProblem,
    LoadsProblem,
    Outcome,
    ProblemSpec,
    Status,
    check_policy,
    one_shot_run,
    quiet,
    write_device_map,
)
from mlsysopt.runtime import check_parallel, make_executor

if TYPE_CHECKING:
    from mlsysopt.runtime import Executor

INITS = ("heft", "random")


# ---------------------------------------------------------------------------- place
@dataclass(frozen=True)
class PlaceRequest:
    """``placement place``: one method on one problem.

    Args:
        problem: the graph and cluster.
        out: the run folder to write (created when the job runs).
        method: a registered method (:data:`~mlsysopt.placement.methods.METHODS`).
        policy: GiPH checkpoint or ``"pretrained"`` (methods that need a policy).
        init: ``heft`` or ``random``: a start placement (GiPH adds it to its portfolio).
        budget: simulator evaluations (default: 10 x tasks, within 100-20,000).
    """

    problem: ProblemSpec
    out: str | Path
    method: str = DEFAULT_METHOD
    policy: str = "pretrained"
    init: str | None = None
    budget: int | None = None

    def __post_init__(self) -> None:
        spec = get_method(self.method)
        if self.init not in (None, *INITS):
            raise MlsysoptError(f"unknown --init '{self.init}' (choose from: {', '.join(INITS)})")
        if spec.needs_policy or self.policy != "pretrained":
            check_policy(self.policy)
        if self.policy != "pretrained" and not spec.needs_policy:
            # the default used to be giph: a policy given to a method that has none must not be ignored silently
            raise InvalidOption(
                f"--policy {self.policy}: method {self.method} uses no policy; add --method giph to place with it"
            )

    def settings(self) -> dict[str, Any]:
        """settings.json of the run (every option but ``--out``)."""
        p = self.problem.settings()
        return {"graph_source": p.pop("graph_source"), "cluster_path": p.pop("cluster_path"),
                "devices": p.pop("devices"), "method": self.method, "policy": self.policy, "init": self.init,
                "budget": self.budget, **p}  # fmt: skip


@dataclass
class PlaceJob(LoadsProblem):
    """A checked ``placement place`` (nothing written yet); :meth:`run` writes the run folder."""

    request: PlaceRequest
    run_dir: RunDir
    status: Status = quiet
    notes: list[str] = field(default_factory=list)

    def load(self) -> LoadedProblem:
        """The policy (when the method needs one) and the problem, loaded and checked once."""
        req = self.request
        return self._load(req.problem, req.policy if METHODS[req.method].needs_policy else None, req.budget, 1,
                          self.status)  # fmt: skip

    def run(self) -> Outcome:
        """Load, place, plot and write result.json, placement.json, cluster.json, gantt.png, search.png (and
        device_map.json for a PyTorch model)."""
        # deferred: imports PIL, matplotlib
        from mlsysopt.report.gantt import plot_gantt

        # deferred: imports PIL, matplotlib
        from mlsysopt.report.search import plot_search

        req = self.request
        needs_policy = METHODS[req.method].needs_policy
        problem, about, owners = self.load()
        giph = self.giph
        graph, cluster = problem.graph, problem.cluster
        spend = default_budget(graph) if req.budget is None else req.budget
        seed, source = req.problem.seed, req.problem.source
        t0 = time.perf_counter()
        with self.status(f"placing {graph.num_nodes} tasks with {req.method} (budget {spend} evaluations)"):
            start = heft_placement(problem) if req.init == "heft" else None
            if req.init == "random":
                start = problem.random_placement(np.random.default_rng(seed))
            res = run_method(req.method, problem, spend, seed, giph, start, req.problem.timeout)
        seconds = time.perf_counter() - t0
        compared = comparison(problem, res)
        sched = problem.simulate(res.placement, res.order)
        result = {"command": "placement place", "source": source, "seed": seed, "budget": spend, "init": req.init}
        result.update(policy=req.policy if needs_policy else None, **res.to_dict(graph, cluster), seconds=seconds)
        result.update({k: v for k, v in problem.describe(sched).items() if k != "placement"}, **about)
        result["comparison"] = compared
        result["units"] = {"makespan": "s", "cp_min": "s", "seconds": "s"}

        said = mismatch(graph, cluster)  # said when the cluster was loaded
        result["warnings"] = [w for w in implausible(graph, cluster, res.makespan, problem.cp_min) if w != said]
        files = ["result.json", "placement.json", "schedule.json", "cluster.json", "gantt.png", "search.png"]
        run = self.run_dir
        with run:
            title = f"{source}: {req.method} ({sched.execution} execution)"
            plot_gantt(graph, cluster, sched, run.file("gantt.png"), title=title)
            plot_search({req.method: res.history}, run.file("search.png"),
                        title=f"{source}: {req.method} (budget {spend})")  # fmt: skip
            run.write_json("placement.json", result["placement"])
            run.write_json("schedule.json", sched.to_file(graph, cluster))
            run.write_json("cluster.json", cluster.to_dict())
            if write_device_map(run, problem, res.placement, owners, source):
                files.append("device_map.json")
            run.write_json("result.json", result)
        return Outcome(result, problem, files)


def prepare_place(request: PlaceRequest, status: Status = quiet) -> PlaceJob:
    """Check the run folder of ``request`` (nothing is created) and return the job; notes say what is ignored."""
    job = PlaceJob(request, one_shot_run("placement place", request.out, request.settings()), status)
    if request.init is not None and request.method not in ("giph", "giph_paper", "annealing", "local_search"):
        job.notes.append(f"--init is ignored by {request.method}")
    return job


def place(request: PlaceRequest, status: Status = quiet) -> Outcome:
    """``placement place`` in one call: :func:`prepare_place`, then run it."""
    return prepare_place(request, status).run()


# ---------------------------------------------------------------------------- compare
@dataclass(frozen=True)
class CompareRequest:
    """``placement compare``: every method (or ``methods``) over ``seeds`` seeds with one budget.

    Args:
        problem: the graph and cluster.
        out: the run folder.
        methods: registered methods (None: every default one; GiPH's when a policy is given).
        policy: GiPH checkpoint or ``"pretrained"``.
        budget: simulator evaluations per search.
        seeds: seeds per method (``problem.seed``, +1, ...).
        workers, backend, address: where the (method, seed) searches run (same results everywhere).
    """

    problem: ProblemSpec
    out: str | Path
    methods: tuple[str, ...] | None = None
    policy: str = "pretrained"
    budget: int | None = None
    seeds: int = 3
    workers: int = 1
    backend: str = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        check_seeds(self.seeds)
        if self.needs_policy:
            check_policy(self.policy)
        check_parallel(self.workers, self.backend, self.address)

    @property
    def names(self) -> list[str]:
        """The methods that run."""
        return select_methods(None if self.methods is None else list(self.methods), True)[0]

    @property
    def needs_policy(self) -> bool:
        """Whether one of the methods needs a GiPH policy."""
        return any(METHODS[m].needs_policy for m in self.names)

    def settings(self) -> dict[str, Any]:
        """settings.json of the run (every option but ``--out``)."""
        p = self.problem.settings()
        methods = None if self.methods is None else ",".join(self.methods)
        return {"graph_source": p.pop("graph_source"), "cluster_path": p.pop("cluster_path"),
                "devices": p.pop("devices"), "policy": self.policy, "methods": methods, "budget": self.budget,
                "timeout": p.pop("timeout"), "seeds": self.seeds, "seed": p.pop("seed"), "workers": self.workers,
                "backend": self.backend, "address": self.address, **p}  # fmt: skip


@dataclass
class CompareJob(LoadsProblem):
    """A checked ``placement compare``; :meth:`run` writes result.json, cluster.json and search.png."""

    request: CompareRequest
    run_dir: RunDir
    status: Status = quiet

    def load(self) -> LoadedProblem:
        """The policy (when a method needs one) and the problem, loaded and checked once."""
        req = self.request
        runs = len(req.names) * req.seeds
        return self._load(req.problem, req.policy if req.needs_policy else None, req.budget, runs, self.status)

    def run(self, on_run: Callable[[int, str, int], None] | None = None, executor: Executor | None = None) -> Outcome:
        """Run every (method, seed) search (``on_run(done, method, seed)`` before each batch) and write the folder.

        Args:
            on_run: progress callback.
            executor: where the searches run (default: ``make_executor(backend, workers, address)``, closed after).
        """
        # deferred: imports PIL, matplotlib
        from mlsysopt.report.search import plot_search

        req = self.request
        names, seeds = req.names, req.seeds
        problem, about, _ = self.load()
        giph = self.giph
        source = req.problem.source
        with self.run_dir as run:
            own = executor is None
            executor = executor or make_executor(req.backend, req.workers, req.address)
            try:
                seed_list = [req.problem.seed + k for k in range(seeds)]
                cmp = compare(problem, None, names, seed_list, req.budget, giph, on_run, executor, req.problem.timeout)
            finally:
                if own:
                    executor.close()
            result = {"command": "placement compare", "source": source,
                      "policy": req.policy if req.needs_policy else None}  # fmt: skip
            result.update(cmp.to_dict(), **about, workers=req.workers, backend=req.backend)
            result["units"] = {"makespan": "s", "cp_min": "s", "seconds": "s"}
            curves = {name: r["curve"] for name, r in result["results"].items()}
            plot_search(curves, run.file("search.png"), title=f"{source}: mean over {seeds} seed(s)")
            run.write_json("cluster.json", problem.cluster.to_dict())
            run.write_json("result.json", result)
        return Outcome(result, problem, ["result.json", "cluster.json", "search.png"])


def prepare_compare(request: CompareRequest, status: Status = quiet) -> CompareJob:
    """Check the run folder of ``request`` (nothing is created) and return the job."""
    return CompareJob(request, one_shot_run("placement compare", request.out, request.settings()), status)


def compare_methods(request: CompareRequest, status: Status = quiet) -> Outcome:
    """``placement compare`` in one call."""
    return prepare_compare(request, status).run()


# ---------------------------------------------------------------------------- adapt
@dataclass(frozen=True)
class AdaptRequest:
    """``placement adapt``: re-place after devices leave (``remove``) or join (``add``).

    Args:
        problem: the graph and its cluster before the change.
        out: the run folder.
        remove: device names that leave.
        add: new devices (drawn like ``devices``).
        placement: a start placement JSON on the old cluster (default: HEFT's).
        policy: GiPH checkpoint or ``"pretrained"``.
        budget: simulator evaluations per GiPH seed.
        seeds: GiPH re-placements (the best kept).
        workers, backend, address: where GiPH's seeds run.
    """

    problem: ProblemSpec
    out: str | Path
    remove: tuple[str, ...] = ()
    add: int = 0
    placement: str | None = None
    policy: str = "pretrained"
    budget: int | None = None
    seeds: int = 1
    workers: int = 1
    backend: str = "local"
    address: str | None = None

    def __post_init__(self) -> None:
        if not self.remove and self.add == 0:
            raise MlsysoptError("nothing changes: give --remove dev3,dev5 and/or --add N")
        if self.add < 0:
            raise InvalidOption(f"--add {self.add}: must be >= 0")
        check_seeds(self.seeds)
        check_policy(self.policy)
        if self.add:
            check_devices(self.add + (self.problem.devices or 0))
        check_parallel(self.workers, self.backend, self.address)

    def settings(self) -> dict[str, Any]:
        """settings.json of the run (every option but ``--out``)."""
        p = self.problem.settings()
        return {"graph_source": p.pop("graph_source"), "cluster_path": p.pop("cluster_path"),
                "devices": p.pop("devices"), "policy": self.policy, "placement_path": self.placement,
                "remove": ",".join(self.remove) or None, "add": self.add, "budget": self.budget,
                "timeout": p.pop("timeout"), "seeds": self.seeds, "seed": p.pop("seed"), "workers": self.workers,
                "backend": self.backend, "address": self.address, **p}  # fmt: skip


@dataclass
class AdaptJob(LoadsProblem):
    """A checked ``placement adapt``; :meth:`run` writes result.json, placement.json, cluster.json (the changed
    cluster), old_cluster.json, gantt.png (and device_map.json for a PyTorch model)."""

    request: AdaptRequest
    run_dir: RunDir
    status: Status = quiet
    old_devices: int = 0  # devices before the change (known once the job ran)

    def load(self) -> LoadedProblem:
        """The policy and the problem before the change, loaded and checked once."""
        req = self.request
        return self._load(req.problem, req.policy, req.budget, req.seeds, self.status)

    def run(self) -> Outcome:
        """Change the cluster, adapt with GiPH (its seeds on the executor), compare with a HEFT re-run and keeping."""
        # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
        from mlsysopt.placement.adaptation import adapt, change_cluster

        # deferred: imports PIL, matplotlib
        from mlsysopt.report.gantt import plot_gantt

        req = self.request
        seed, source = req.problem.seed, req.problem.source
        problem, about, owners = self.load()
        giph = self.giph
        graph, old = problem.graph, problem.cluster
        self.old_devices = old.num_devices
        start = heft_placement(problem) if req.placement is None else load_placement(req.placement, graph, old)
        new, added = change_cluster(graph, old, list(req.remove), req.add, seed)
        spend = default_budget(graph) if req.budget is None else req.budget
        seed_list = [seed + k for k in range(req.seeds)]
        with self.run_dir as run:
            with make_executor(req.backend, req.workers, req.address) as executor:
                what = f"adapting {graph.num_nodes} tasks ({req.seeds} x {spend} evaluations, {executor.describe()})"
                with self.status(what):
                    res = adapt(graph, old, new, start, giph, spend, seed, seed_list, executor, req.problem.timeout)
            result = {"command": "placement adapt", "source": source, "seed": seed, "budget": spend}
            result.update(added=added, removed=list(req.remove), start_placement=req.placement or "heft")
            result.update(
                res.to_dict(graph, new), cp_min=res.problem.cp_min, old_cluster_source=about["cluster_source"]
            )
            result["units"] = {"makespan": "s", "cp_min": "s"}
            files = ["result.json", "placement.json", "cluster.json", "old_cluster.json", "gantt.png"]
            title = f"{source}: GiPH adapted placement"
            plot_gantt(graph, new, res.problem.simulate(res.giph.placement), run.file("gantt.png"), title=title)
            run.write_json("placement.json", placement_to_dict(graph, new, res.giph.placement))
            run.write_json("cluster.json", new.to_dict())
            run.write_json("old_cluster.json", old.to_dict())
            if write_device_map(run, res.problem, res.giph.placement, owners, source):
                files.append("device_map.json")
            result = {**result, "cluster": new.to_dict()}
            run.write_json("result.json", result)
        return Outcome(result, res.problem, files)


def prepare_adapt(request: AdaptRequest, status: Status = quiet) -> AdaptJob:
    """Check the run folder of ``request`` (nothing is created) and return the job."""
    return AdaptJob(request, one_shot_run("placement adapt", request.out, request.settings()), status)
