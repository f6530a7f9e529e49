"""One NAS search as an experiment: user options -> validated space, constraints and method -> a run folder.

What ``mlsysopt nas search`` does, as a library::

    options = SearchOptions(space="nasbench-graph:cora", budget=40, limits={"max_params": 1.2e6})
    job = prepare_search("runs/nas", options)      # validates everything; creates nothing
    out = job.run()                                 # RUN_DIR/settings.json, checkpoint.pt, result.json, two plots

:func:`prepare_search` checks the run folder (not a file, not busy, a ``resume`` that matches), builds the
constraints, loads the space and builds the searcher before anything is written, so a refused input leaves no
folder and no file. :meth:`SearchJob.run` opens the :class:`~mlsysopt.io.RunDir` (exclusive lock,
``settings.json``), runs :func:`~mlsysopt.nas.run_search` with the folder's checkpoint after every batch, and writes
``result.json`` and the plots. On resume only :data:`RESUMABLE` settings may change.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir
from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.defaults import AUTO, resolve_method
from mlsysopt.nas.limits import MAX_SEED, check_search_size
from mlsysopt.nas.objective import DIRECTIONS, ObjectiveSpace, is_user_source, load_space
from mlsysopt.nas.regimes import (  # noqa: F401  (re-exported: mlsysopt.nas.experiment's public names)
    REGIMES,
    build_constraints,
    check_limits,
    median_constraints,
    table_constraints,
)
from mlsysopt.nas.registry import check_method, method_class, method_config
from mlsysopt.nas.report import best_feasible_test, eval_record, plot_search, regret, space_info
from mlsysopt.nas.resources import with_measures
from mlsysopt.nas.search import SearchResult, read_checkpoint, run_search
from mlsysopt.nas.spaces import get_space
from mlsysopt.nas.spaces.base import Evaluation
from mlsysopt.nas.stored import objective_name, trial_params
from mlsysopt.runtime import LocalExecutor, make_executor
from mlsysopt.store.records import nas_trial, record, record_objective
from mlsysopt.store.run import RunStore

if TYPE_CHECKING:
    from mlsysopt.nas.searcher import Searcher
    from mlsysopt.nas.spaces.base import SearchSpace
    from mlsysopt.runtime import Executor

#: Settings that may change when a run is resumed (everything else must match the run being continued).
RESUMABLE = ("budget", "workers", "backend", "address", "timeout", "count_failed")
#: The CNN spaces' options, by the command-line flag that sets them.
SPACE_OPTIONS = {"epochs": "--epochs", "ops": "--ops", "max_blocks": "--max-blocks", "lr": "--lr"}
CHECKPOINT = "checkpoint.pt"
PLOTS = ("pareto.png", "best_so_far.png")


def build_space(
    spec: str,
    options: dict[str, Any],
    objective: str | None = None,
    direction: str = "maximize",
    measures: tuple[Any, ...] = (),
) -> SearchSpace:
    """The space of ``spec``: a built-in one, or your own (``file.py:space`` with ``objective``, ``file.py:train``);
    the CNN-only options (``epochs`` ...) are refused elsewhere; ``measures`` add resources (:mod:`..resources`).

    Args:
        spec: A built-in space (``nasbench-graph:<dataset>``, ``digits``, ``cifar10:/folder``) or ``file.py:space``.
        options: CNN-space options (``epochs``, ``ops``, ``max_blocks``, ``lr``); None values are ignored.
        objective: Your training function (``file.py:train``); required for, and only for, your own space.
        direction: ``"maximize"`` or ``"minimize"`` (your own space only).
        measures: Resource measures adding resources to the space.

    Returns:
        SearchSpace: The space.

    Raises:
        MlsysoptError: For options the space does not take, a missing or misplaced ``objective``, a bad
            ``direction``, or an unknown space.
    """
    given = {k: v for k, v in options.items() if v is not None}
    user = is_user_source(spec)
    if given and (user or spec.startswith("nasbench-graph")):
        flags = ", ".join(SPACE_OPTIONS.get(k, k) for k in given)
        verb = "apply" if len(given) > 1 else "applies"
        raise MlsysoptError(f"{flags} {verb} only to the CNN spaces (digits, cifar10:/folder), not to '{spec}'")
    if direction not in DIRECTIONS:
        raise MlsysoptError(f"unknown --direction '{direction}' (choose from: {', '.join(DIRECTIONS)})")
    if user:
        if objective is None:
            raise MlsysoptError(f"--space {spec} is your own space: give the training function with --objective "
                                "FILE.py:train")  # fmt: skip
        user_space = ObjectiveSpace(load_space(spec), None, spec, objective, direction)
        _ = user_space.objective  # imported now: a missing file or name is one error before any folder exists
        space: SearchSpace = user_space
    else:
        if objective is not None:
            raise MlsysoptError(f"--objective applies to your own space (--space FILE.py:space), not to '{spec}', "
                                "which evaluates itself")  # fmt: skip
        if direction != "maximize":
            raise MlsysoptError(f"--direction applies to your own space, not to '{spec}' (it maximises accuracy)")
        space = get_space(spec, **given)
    return with_measures(space, measures)


MAX_METRIC_CHARS = 100  # an objective name the dashboard can show
_METRIC_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_.\- ]{{0,{MAX_METRIC_CHARS - 1}}}")


def _is_metric_name(name: object) -> bool:
    """A name a table or a dashboard cannot mistake for markup or for a value (``nan``, ``inf`` read as numbers)."""
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        return False
    try:
        float(name)
    except ValueError:
        return True
    return False


@dataclass
class SearchOptions:
    """What a user chooses for one search (``mlsysopt nas search``'s options); the cheap checks run on creation.

    ``limits`` maps constraint names (``max_latency_ms``, ``max_params``, ``max_flops``, ``min_intensity``) to
    limits, ``None`` for none; ``space_options`` go to the CNN spaces (``epochs``, ``ops``, ``max_blocks``, ``lr``).

    Args:
        space: Space spec (see :func:`build_space`).
        method: NAS method name (e.g. ``epnas``, ``random``, ``evolution``), or ``"auto"`` (the default): the
            default of the budget's class (:mod:`mlsysopt.nas.defaults`).
        budget: Evaluations, >= 1.
        limits: Constraint name to limit (> 0), None for none.
        mode: Constraint mode, ``"hard"`` or ``"soft"``.
        workers: Evaluations run in parallel, >= 1.
        backend: Executor backend, ``"local"`` or ``"ray"``.
        address: Ray cluster address (None: a private local instance).
        space_options: CNN-space options (``epochs``, ``ops``, ``max_blocks``, ``lr``).
        seed: Seed of the search, >= 0.
        knobs: The method's config knobs (checked against its config).
        timeout: Wall-clock seconds per run, >= 0 (None: no limit).
        latency_model: Cost-model run predicting ``latency_ms`` (CNN spaces; None: timed latency).
        objective: Your training function (``file.py:train``) for your own space.
        direction: ``"maximize"`` or ``"minimize"`` (your objective returns a loss).
        measures: :class:`ResourceMeasure` plug-ins adding resources constraints may read.
        prior: A transfer prior for EPNAS and zero-shot (None: the space's own).
        count_failed: Failed evaluations count against the budget (default: only successful ones do).
        metric: The objective's name in the study store (None: your objective's function name, else
            ``validation_accuracy``).

    Raises:
        MlsysoptError: For an out-of-range budget, workers, seed or timeout, bad limits, unknown space options, an
            unknown method or an invalid knob.
    """

    space: str = "nasbench-graph:cora"
    method: str = "auto"  # "auto": the budget class's default (mlsysopt.nas.defaults)
    budget: int = 100
    limits: dict[str, float | None] = field(default_factory=dict)
    mode: str = "hard"
    workers: int = 1
    backend: str = "local"
    address: str | None = None
    space_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    knobs: dict[str, Any] = field(default_factory=dict)  # the method's config knobs (``--knob NAME=VALUE``)
    timeout: float | None = None  # wall-clock seconds per run (None: no limit)
    latency_model: str | None = None  # a cost-model run predicting latency_ms (CNN spaces; see nas/latency_model.py)
    objective: str | None = None  # your training function (``file.py:train``) for your own space
    direction: str = "maximize"  # "minimize" when your objective returns a loss
    measures: tuple[Any, ...] = ()  # ResourceMeasure plug-ins adding resources constraints may read
    prior: Any = None  # a TransferPrior for EPNAS / zero-shot (e.g. from earlier runs' records); None: the space's
    count_failed: bool = False  # failed evaluations use up the budget too (``--count-failed``)
    metric: str | None = None  # the objective's name in the study store (``--metric``)
    auto: bool = field(default=False, init=False, repr=False)  # whether the budget-class rule chose the method

    def __post_init__(self) -> None:
        for name, v, lo, hi in (("--budget", self.budget, 1, None), ("--workers", self.workers, 1, None),
                                ("--seed", self.seed, 0, MAX_SEED)):  # fmt: skip
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
                bound = f">= {lo}" + ("" if hi is None else f" and <= {hi:,}")
                raise MlsysoptError(f"{name} must be {bound} (an integer), got {v!r}")
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or not 0 <= self.timeout < math.inf
        ):
            raise MlsysoptError(f"--timeout must be a finite number of seconds >= 0, got {self.timeout!r}")
        if self.metric is not None and not _is_metric_name(self.metric):
            raise MlsysoptError(
                f"--metric {str(self.metric)[:40]!r}: the objective's name in the study store is a letter or _ and "
                f"then letters, digits, _ . - or spaces, at most {MAX_METRIC_CHARS} characters, and does not read "
                "as a number (e.g. val_accuracy)"
            )
        check_limits(self.mode, self.limits)
        unknown = sorted(set(self.space_options) - set(SPACE_OPTIONS))
        if unknown:
            raise MlsysoptError(f"unknown space option(s) {unknown} (known: {', '.join(SPACE_OPTIONS)})")
        self.auto = self.method == AUTO  # the rule chose it (a resumed run keeps the method it started with)
        self.method = resolve_method(self.method, self.budget, str(self.space), self.prior)
        check_method(self.method)
        if self.knobs:  # every knob's type and range (this imports the method, so only when there are knobs)
            method_config(self.method, **self.knobs)

    def settings(self) -> dict[str, Any]:
        """The run's settings.json: every option that shapes the search, limits and space options given only."""
        return {
            "space": self.space,
            "method": self.method,
            "budget": self.budget,
            "constraints": {"mode": self.mode, "limits": {k: v for k, v in self.limits.items() if v is not None}},
            "space_options": {k: v for k, v in self.space_options.items() if v is not None},
            "seed": self.seed,
            "knobs": dict(self.knobs),
            "workers": self.workers,
            "backend": self.backend,
            "address": self.address,
            "timeout": self.timeout,
            **({"latency_model": self.latency_model} if self.latency_model else {}),
            **({"objective": self.objective} if self.objective is not None else {}),
            **({"direction": self.direction} if self.direction != "maximize" else {}),
            **({"measures": [m.describe() for m in self.measures]} if self.measures else {}),
            **({"prior": self.prior.describe()} if self.prior is not None else {}),
            **({"count_failed": True} if self.count_failed else {}),
            **({"metric": self.metric} if self.metric else {}),
        }


@dataclass
class SearchOutput:
    """A finished search: the result, what result.json holds, and the files written to the run folder.

    Args:
        result: The search result.
        record: The contents of ``result.json``.
        files: Files written to the run folder.
    """

    result: SearchResult
    record: dict[str, Any]
    files: list[str]

    @property
    def regret(self) -> float | None:
        """Regret against the table's best feasible cell (None without a table)."""
        return self.record["regret"]  # type: ignore[no-any-return]


@dataclass
class SearchJob:
    """A validated search, ready to run in its folder (:func:`prepare_search` builds it; nothing is written yet).

    Args:
        run_dir: The run folder (opened by :meth:`run`).
        options: The user's options.
        space: The search space.
        constraints: The constraints.
        searcher: The NAS method, ready (restored from the checkpoint when resuming).
        resumed_from: Evaluations the resumed checkpoint holds (0: a fresh run).
    """

    run_dir: RunDir
    options: SearchOptions
    space: SearchSpace
    constraints: Constraints
    searcher: Searcher[Any]
    resumed_from: int = 0  # evaluations the checkpoint being resumed holds

    def run(
        self, executor: Executor | None = None, on_eval: Callable[[Evaluation, int], None] | None = None
    ) -> SearchOutput:
        """Open the run folder, search to the budget (checkpointing every batch), write result.json and the plots."""
        with self.run_dir as run:
            opts = self.options

            record_objective(opts.direction, objective_name(opts.objective, opts.metric))
            if self.resumed_from:  # the store may lack the last trials before a kill: their keys keep one copy
                for i, d in enumerate(read_checkpoint(run)["history"]):
                    self._store(Evaluation.from_dict(d), i + 1)
            result = run_search(self.searcher, executor, opts.workers, checkpoint=run, on_eval=self._stored(on_eval),
                                timeout=opts.timeout, count_failed=opts.count_failed)  # fmt: skip
            record = self._record(result)
            if opts.latency_model:
                from mlsysopt.nas.latency_model import confirm  # deferred: mlsysopt.nas.latency_model imports torch

                record["latency_confirmation"] = confirm(self.space, result.history, self.constraints)
            sp, cons = self.space, self.constraints
            n = len(result.history)
            title = f"{result.method} on {sp.name}"
            plot_search([result], sp, cons, run.file(PLOTS[0]), run.file(PLOTS[1]),
                        pareto_title=f"{title}: {n} evaluations ({cons.describe()})", curve_title=title)  # fmt: skip
            run.write_json("result.json", record)
        return SearchOutput(result, record, ["result.json", CHECKPOINT, "settings.json", *PLOTS])

    def executor(self) -> Executor:
        """The executor the options ask for; your own objective always runs in worker processes (one at least),
        so a crash, an exit or a signal in it ends a worker, never the search. A worker your code killed is not
        re-run by the pool (your code would kill it again); the trial fails after the driver's one retry."""
        opts = self.options
        if opts.backend == "local" and getattr(self.space, "interruptible", False):
            return LocalExecutor(max(1, opts.workers), max_retries=0)
        return make_executor(opts.backend, opts.workers, opts.address)

    def _store(self, ev: Evaluation, n: int) -> None:
        """Record evaluation ``n`` in the run's study (its result.json record, see :mod:`mlsysopt.store.records`)."""
        params, dists = trial_params(self.space, ev.arch)
        rec = eval_record(n - 1, ev, self.space, self.constraints)
        record(nas_trial(rec, params, dists, self.options.direction), self.options.direction)

    def _stored(self, on_eval: Callable[[Evaluation, int], None] | None) -> Callable[[Evaluation, int], None]:
        """``on_eval`` that first records the evaluation in the run's study."""

        def stored(ev: Evaluation, n: int) -> None:
            self._store(ev, n)
            if on_eval is not None:
                on_eval(ev, n)

        return stored

    def _record(self, result: SearchResult) -> dict[str, Any]:
        """result.json: the settings, the space, every evaluation, the best feasible one and its regret."""
        sp, cons, best = self.space, self.constraints, result.best
        top = best_feasible_test(sp, cons)
        best_rec = None if best is None else eval_record(-1, best, sp, cons)
        if best_rec is not None:
            best_rec["index"] = next(i for i, ev in enumerate(result.history) if ev is best)
        return {
            "command": "nas search",
            "settings": self.options.settings(),
            "space": space_info(sp),
            "method": result.method,
            "evaluations": [eval_record(i, ev, sp, cons) for i, ev in enumerate(result.history)],
            "evaluated": len(result.history),
            "resumed_from": result.resumed_from,
            "failed": result.failed,
            "skipped_infeasible": result.skipped,
            "wall_s": result.wall_s,
            "stopped_by": result.stopped,
            "best": best_rec,
            "best_decoded": result.best_decoded,
            "best_test_perf": None if best is None else best.test_perf,
            "best_feasible_test_in_table": top,
            "regret": regret(top, None if best is None else best.test_perf),
            "message": result.message,
            "plots": list(PLOTS),
        }


def _started_with(out: Path, method: str) -> str:
    """The method a run folder's settings.json names (``method`` when there is none to read)."""
    try:
        started = json.loads((out / "settings.json").read_text()).get("method")
    except (OSError, ValueError, AttributeError):
        return method
    return started if isinstance(started, str) and started else method


def prepare_search(out: str | Path, options: SearchOptions, resume: bool = False) -> SearchJob:
    """Check the run folder, build the constraints, the space and the method: every input, before any file exists.

    Args:
        out: the run folder (``--out``).
        options: the search's options.
        resume: continue the checkpoint in ``out`` (its settings must match, :data:`RESUMABLE` aside).
    """
    if resume and options.auto:  # a larger --budget may fall in another class: the run keeps the method it began with
        options.method = _started_with(Path(out), options.method)
    run = RunDir(
        out, options.settings(), resume=resume, resumable=RESUMABLE, checkpoint=CHECKPOINT, sink=RunStore
    ).check()
    cons = build_constraints(options.mode, options.limits)
    space = build_space(options.space, options.space_options, options.objective, options.direction, options.measures)
    if options.auto and not resume:  # a default that needs a prior gives way on a space without one
        options.method = resolve_method(AUTO, options.budget, space, options.prior)
        run.settings["method"] = options.method
    if options.latency_model:
        from mlsysopt.nas.latency_model import predicted_space  # deferred: mlsysopt.nas.latency_model imports torch

        space = predicted_space(space, options.latency_model)
    check_search_size(space, options)  # budget, workers, blocks, epochs, images: bounded before anything is allocated
    # the config first: a method's knob may be called `prior` (EPNAS: auto | none) beside the prior object itself
    config = method_config(options.method, **options.knobs)
    searcher = method_class(options.method)(space, cons, budget=options.budget, seed=options.seed, config=config,
                                            prior=options.prior)  # fmt: skip
    done = len(read_checkpoint(run)["history"]) if resume else 0
    return SearchJob(run, options, space, cons, searcher, resumed_from=done)
