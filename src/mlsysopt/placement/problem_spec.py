"""What every placement command places, as the library's checked request: a graph source on a cluster.

:class:`ProblemSpec` bounds every size when it is built (before anything is loaded or drawn) and
:meth:`ProblemSpec.load` loads the graph and the cluster, validated; the jobs of :mod:`mlsysopt.placement.jobs`
build on it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mlsysopt.costmodel.oracle.op_costs import check_op_costs, with_op_costs
from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.graph.importers.source import resolve_source
from mlsysopt.graph.limits import parse_shape
from mlsysopt.graph.list_schedule import check_execution
from mlsysopt.graph.presets import load_cluster
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.problem import load_problem as problem_of
from mlsysopt.io import RunDir
from mlsysopt.placement.base import default_budget
from mlsysopt.placement.devicemap import device_map, node_owners
from mlsysopt.placement.limits import check_devices, check_num_tasks, check_search
from mlsysopt.report.summary import graph_summary
from mlsysopt.store.run import RunStore

if TYPE_CHECKING:
    from mlsysopt.graph.problem import PlacementProblem
    from mlsysopt.placement.giph import GiPH

Status = Callable[[str], AbstractContextManager[Any]]


@contextlib.contextmanager
def quiet(_what: str) -> Iterator[None]:
    """The default ``status``: shows nothing."""
    yield


def check_timeout(timeout: float | None) -> None:
    """``--timeout`` must be a finite number of seconds > 0."""
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise InvalidOption(f"--timeout {timeout}: must be a finite number of seconds > 0")


def check_policy(policy: str) -> None:
    """Fail fast (before torch is imported) when ``--policy`` is neither 'pretrained' nor a file."""
    if policy != "pretrained" and not Path(policy).is_file():
        raise MlsysoptError(
            f"--policy {policy}: no such checkpoint file (train one with 'mlsysopt placement train --out RUN', "
            "or use --policy pretrained, the policy shipped with mlsysopt)"
        )


def load_giph(policy: str) -> GiPH:
    """The GiPH placer of ``--policy`` (a checkpoint or 'pretrained'); a clear error when it is unusable."""
    # deferred: mlsysopt.placement.giph imports torch; only once the inputs are checked
    from mlsysopt.placement.giph import GiPH

    return GiPH.load(policy)  # GiPH's search runs with one torch thread itself


# ---------------------------------------------------------------------------- the problem
class LoadedProblem(NamedTuple):
    """A validated placement problem, what result.json says of it, and the fx node owners of a PyTorch model."""

    problem: PlacementProblem
    about: dict[str, Any]
    owners: dict[str, Any] | None


def graph_and_owners(src: Any, input_shape: tuple[int, ...] | None) -> tuple[Any, dict[str, Any]]:
    """The CompGraph of a PyTorch source and its fx node owners, from one build of the model."""
    from mlsysopt.graph.importers.torch_fx import from_module  # deferred: torch_fx imports torch; a PyTorch source only

    module, inputs = src.pytorch(input_shape)
    # one node per fx node: a device map places whole module calls (a GRU's steps cannot run on two devices)
    return from_module(module, inputs, name=src.name, expand_layers=False), node_owners(module)


@dataclass(frozen=True)
class ProblemSpec:
    """Which graph on which cluster: what every placement command places, bounded when it is built.

    Args:
        source: any graph source (``.npz``, WfFormat JSON, a recipe name, ``zoo:NAME``, ONNX, ``file.py:factory``).
        cluster: a cluster JSON file or ``preset:NAME``; or None with ``devices``.
        devices: with no ``cluster``: a random heterogeneous cluster of this many devices in the graph's units.
        num_tasks: tasks of a workflow recipe.
        input_shape: the example input of a PyTorch factory returning a bare module (``"1,3,32,32"`` or a tuple).
        seed: seeds the recipe and the drawn cluster.
        timeout: seconds a user's factory may take, and each search.
        execution: how devices run their tasks: ``fifo`` (ready tasks in arrival order, as a dataflow runtime or a
            workflow manager releasing jobs when ready does; the default) or ``ordered`` (each device follows a
            static schedule's order, HEFT's own for HEFT; ``place`` then writes ``schedule.json``).
        op_costs: ``builtin`` or a latency-oracle folder: a CPU device's per-op times from the oracle instead of
            FLOPs / speed (:mod:`mlsysopt.costmodel.oracle.op_costs`; an ONNX source only); or an op-profile
            ``.json`` file (:mod:`mlsysopt.graph.op_profile`; a PyTorch or ONNX source).
        op_costs_device: the CPU device ``op_costs`` is for (default: the first named like ``cpu``).
    """

    source: str
    cluster: str | None = None
    devices: int | None = None
    num_tasks: int = 100
    input_shape: str | tuple[int, ...] | None = None
    seed: int = 0
    timeout: float | None = None
    execution: str = "fifo"
    op_costs: str | None = None
    op_costs_device: str | None = None

    def __post_init__(self) -> None:
        check_execution(self.execution)
        check_timeout(self.timeout)
        if self.devices is not None:
            check_devices(self.devices)
        check_num_tasks(self.num_tasks)
        self.shape()  # a malformed or oversized shape is refused now
        if self.op_costs is not None or self.op_costs_device is not None:
            check_op_costs(self.op_costs, self.op_costs_device)

    def shape(self) -> tuple[int, ...] | None:
        """The example input shape as a tuple (checked against this machine's memory)."""
        if isinstance(self.input_shape, tuple):
            return parse_shape(",".join(map(str, self.input_shape)))
        return parse_shape(self.input_shape)

    def load(
        self, budget: int | None = None, runs: int = 1, giph: GiPH | None = None, status: Status = quiet
    ) -> LoadedProblem:
        """The graph on its cluster, validated, and the search's size checked (``runs`` searches of ``budget``).

        Returns:
            The problem, what result.json says of it (``graph``, ``cluster_source``, ``cluster``) and, for a PyTorch
            source, the fx node owners (the model is built once, for the graph and for them).
        """

        owners = None
        shape = self.shape()
        with status("loading graph and cluster"):
            src = resolve_source(self.source)
            if src.runs_user_code:  # the user's factory runs in a child process, bounded by the timeout
                graph, owners = src.isolated(graph_and_owners, src, shape, timeout=self.timeout)
            elif src.kind == "pytorch":
                graph, owners = graph_and_owners(src, shape)
            else:
                graph = src.graph(num_tasks=self.num_tasks, seed=self.seed, input_shape=shape)
            cluster = None if self.cluster is None else load_cluster(str(self.cluster), graph, self.seed)
            devices = cluster.num_devices if cluster is not None else (self.devices or 1)
            hidden = None if giph is None else giph.policy.config.hidden
            check_search(graph.num_nodes, graph.num_edges, devices, budget or default_budget(graph), runs, hidden,
                         self.timeout)  # fmt: skip
            problem, how = problem_of(graph, cluster, self.devices, self.seed, self.execution)
            if self.op_costs is not None:
                graph, costed, op_costs = with_op_costs(graph, problem.cluster, self.op_costs, self.op_costs_device)
                problem = PlacementProblem(graph, costed, self.execution)
            if cluster is not None:
                how = str(cluster.meta.get("source", how))
        about = {"graph": graph_summary(graph, name=str(graph.meta.get("name") or self.source))}
        if self.op_costs is not None:
            about["op_costs"] = op_costs
        return LoadedProblem(problem, {**about, "cluster_source": how, "cluster": problem.cluster.to_dict()}, owners)

    def settings(self) -> dict[str, Any]:
        """The problem's part of a run's settings (the command line's option names)."""
        shape = self.input_shape if not isinstance(self.input_shape, tuple) else ",".join(map(str, self.input_shape))
        costs = {"op_costs": self.op_costs, "op_costs_device": self.op_costs_device} if self.op_costs else {}
        return {"graph_source": self.source, "cluster_path": self.cluster, "devices": self.devices,
                "timeout": self.timeout, "seed": self.seed, "num_tasks": self.num_tasks,
                "input_shape": shape, "execution": self.execution, **costs}  # fmt: skip


def one_shot_run(command: str, out: str | Path, settings: dict[str, Any]) -> RunDir:
    """The checked (not yet created) run folder of a one-shot command (no checkpoint)."""
    return RunDir(out, {"command": command, **settings}, checkpoint=None, sink=RunStore).check()


def write_device_map(run: RunDir, problem: PlacementProblem, placement: Any, owners: Any, source: str) -> bool:
    """Write ``device_map.json`` when the graph came from PyTorch (torch.fx); whether it was written."""
    if problem.graph.meta.get("source") != "torch.fx":
        return False

    run.write_json("device_map.json", device_map(problem.graph, problem.cluster, placement, owners, source))
    return True


class LoadsProblem:
    """Mixin of the jobs: :meth:`load` reads the policy and the problem once (a problem the cluster cannot run is
    refused there, before the job writes anything or shows progress)."""

    giph: GiPH | None = None
    loaded: LoadedProblem | None = None

    def _load(
        self, spec: ProblemSpec, policy: str | None, budget: int | None, runs: int, status: Status
    ) -> LoadedProblem:
        if self.loaded is None:
            self.giph = load_giph(policy) if policy is not None else None
            self.loaded = spec.load(budget, runs=runs, giph=self.giph, status=status)
        return self.loaded


class Outcome(NamedTuple):
    """What a placement job wrote: result.json's contents, the problem, and the files in the run folder."""

    result: dict[str, Any]
    problem: PlacementProblem
    files: list[str]
