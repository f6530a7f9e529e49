"""An ask/tell study over any search space, with any NAS method, as Optuna users know it::

    from mlsysopt.nas import Blocks, Space, Study

    space = Space(knobs={"lr": [1e-3, 1e-2]}, blocks=Blocks({"width": [16, 32, 64]}, min=1, max=3),
                  resources=lambda p: {"params": sum(b["width"] ** 2 for b in p["blocks"])})
    study = Study(space, constraints={"max_params": 3000}, method="epnas", budget=20, seed=0)
    for _ in range(20):
        trial = study.ask()                      # trial.params: {"lr": ..., "blocks": [{"width": ...}, ...]}
        study.tell(trial, train(trial.params))   # the validation score (higher is better by default)
    print(study.best_trial.params, study.best_value)

With ``method="auto"`` (the default) and ``budget=None`` it is the CLI's search: ``optimize(train, n_trials=30)``
plans for 30 trials and runs the method ``nas search --budget 30`` runs (:mod:`mlsysopt.nas.defaults`), so the
Python study and ``mlsysopt nas search --seed S --budget 30`` propose the same architectures for the same seed.

``ask`` may be called several times before the matching ``tell`` calls (parallel workers); a trial is told once,
with a value, or with ``None`` (failed). Resources your training measured go with ``tell(..., resources={...})``;
constraints on them are judged then. In hard mode (the default) the method never proposes an architecture that the
space's own resources (``Space(resources=...)``) already show to be infeasible. :meth:`Study.records` gives the
told trials as the history records (``result.json["evaluations"]`` entries) that a later study's transfer prior
reads (:func:`mlsysopt.nas.prior.prior_from_records`).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlsysopt.errors import MlsysoptError, MlsysoptWarning
from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.defaults import resolve_method
from mlsysopt.nas.objective import DIRECTIONS, invoke, parse_result
from mlsysopt.nas.registry import get_method
from mlsysopt.nas.report import eval_record
from mlsysopt.nas.search import PATIENCE
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace

STATES = ("running", "complete", "failed")
DEFAULT_BUDGET = 100  # what a study without a budget plans for when trials are asked for before any optimize call


@dataclass
class Trial:
    """One proposed architecture: ``params`` is what to train; ``value`` and ``state`` are filled by ``tell``.

    Args:
        number: Position of the trial in the study, from 0.
        arch: The proposed architecture.
        params: The decoded parameters to train.
        state: ``"running"``, ``"complete"`` or ``"failed"``.
        value: Objective value told (None while running).
        test_value: Test value told, for reports only (None if not given).
        resources: Resource values of the architecture (cheap ones, plus any the objective reported).
        feasible: Whether it meets the constraints (None while unknown).
        error: Why it failed (None otherwise).
        duration_s: Seconds from ask to tell (None while running).
        _t0: Internal: ``time.perf_counter()`` at ask.
    """

    number: int
    arch: Arch
    params: dict[str, Any]
    state: str = "running"
    value: float | None = None
    test_value: float | None = None
    resources: dict[str, float] = field(default_factory=dict)
    feasible: bool | None = None
    error: str | None = None
    duration_s: float | None = None
    _t0: float = field(default=0.0, repr=False)


class Study:
    """Ask/tell over ``space`` with NAS method ``method`` (any of :data:`mlsysopt.nas.METHOD_NAMES`).

    Args:
        space: any :class:`~mlsysopt.nas.spaces.base.SearchSpace`, e.g. a declared :class:`~mlsysopt.nas.Space`.
        constraints: a :class:`Constraints`, or limits such as ``{"max_params": 1e6, "max_latency_ms": 5}``.
        method: the NAS method, or ``"auto"`` (the default): the default of the budget's class, as ``nas search``.
        budget: the evaluations planned (methods with stages split it; asking beyond it is allowed, with one
            :class:`~mlsysopt.errors.MlsysoptWarning` at the first trial past it). None (the default): the
            ``n_trials`` of the first :meth:`optimize` call, or 100 when trials are asked for first.
        seed: seeds the method.
        direction: ``"maximize"`` (accuracy) or ``"minimize"`` (a loss).
        prior: a transfer prior for EPNAS and zero-shot (e.g. from earlier studies' :meth:`records`).
        knobs: the method's config knobs (``EPNASConfig`` fields, ...).
    """

    def __init__(
        self,
        space: SearchSpace,
        constraints: Constraints | Mapping[str, float] | None = None,
        method: str = "auto",
        budget: int | None = None,
        seed: int = 0,
        direction: str = "maximize",
        prior: Any = None,
        **knobs: Any,
    ) -> None:
        if direction not in DIRECTIONS:
            raise MlsysoptError(f"unknown direction '{direction}' (choose from: {', '.join(DIRECTIONS)})")
        if constraints is None:
            cons = Constraints()
        elif isinstance(constraints, Constraints):
            cons = constraints
        elif isinstance(constraints, Mapping):
            cons = Constraints.from_limits(**dict(constraints))
        else:
            raise MlsysoptError(
                f"constraints must be a Constraints or a dict of limits, not {type(constraints).__name__}"
            )
        self.space, self.constraints, self.direction = space, cons, direction
        self._planned = budget is not None
        self._spec = (method, seed, prior, knobs)
        self._plan(DEFAULT_BUDGET if budget is None else budget)  # every argument checked now, not at the first ask
        self.trials: list[Trial] = []
        self._evals: dict[int, Evaluation] = {}

    def _plan(self, budget: int) -> None:
        """Build the method for ``budget`` evaluations (``method="auto"``: the default of its class)."""
        method, seed, prior, knobs = self._spec
        name = resolve_method(method, budget, self.space, prior)
        self.searcher = get_method(name, self.space, self.constraints, budget=budget, seed=seed, prior=prior, **knobs)
        self.budget = int(budget)

    @property
    def method(self) -> str:
        """The method's name."""
        return self.searcher.name

    def ask(self) -> Trial:
        """The next architecture to train (MlsysoptError when the method has nothing admissible left;
        :class:`~mlsysopt.errors.ConstraintUnreachable` when none of the many checked meets a costly limit).

        As ``nas search`` does, a proposal the space's own resources show infeasible (hard mode) is told back as
        failed without becoming a trial, and the method is asked again (:data:`~mlsysopt.nas.search.PATIENCE`
        times in a row at most)."""
        self._planned = True
        got: list[Arch] = []
        for _ in range(PATIENCE):
            got = list(self.searcher.ask(1))[:1]
            if not got:
                continue
            self.space.check(got[0])
            if not self.constraints.hard or self.searcher.feasible(got[0]):
                break
            a = got.pop()
            self.searcher.tell([Evaluation(a, math.nan, None, self.searcher.resources(a), 0.0, ok=False,
                                           error="infeasible (not evaluated)")])  # fmt: skip
        if not got:
            raise MlsysoptError(
                f"{self.method} has no new admissible architecture to propose in {self.space.name} "
                f"after {len(self.trials)} trial(s) (the space, or its feasible part, is exhausted)"
            )
        arch = got[0]
        if len(self.trials) == self.budget:  # once: asking on is allowed (as Optuna's), but the plan is spent
            warnings.warn(
                f"trial {self.budget} is past the budget of {self.budget} this {self.method} study planned for: "
                "its stages are spent and it keeps proposing (give a larger budget= to plan for more)",
                MlsysoptWarning,
                stacklevel=2,
            )
        decode = getattr(self.space, "params", None) or self.space.decode
        trial = Trial(len(self.trials), arch, decode(arch), _t0=time.perf_counter())
        self.trials.append(trial)
        return trial

    def tell(
        self,
        trial: Trial | int,
        value: float | None,
        resources: Mapping[str, float] | None = None,
        test_value: float | None = None,
    ) -> Trial:
        """Record ``trial``'s validation ``value`` (None or a non-finite number: failed) and measured resources."""
        t = self.trials[trial] if isinstance(trial, int) else trial
        if not isinstance(t, Trial) or t.number >= len(self.trials) or self.trials[t.number] is not t:
            raise MlsysoptError("tell() takes a trial this study's ask() returned (or its number)")
        if t.state != "running":
            raise MlsysoptError(f"trial {t.number} was already told ({t.state})")
        res = {}
        for k, v in dict(resources or {}).items():
            number = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
            if not (math.isfinite(number) and number >= 0):
                raise MlsysoptError(
                    f"trial {t.number}: resource '{k}' is {v!r}; a measured resource must be a finite number >= 0"
                )
            res[str(k)] = number
        ok = value is not None and isinstance(value, int | float) and math.isfinite(float(value))
        sign = 1.0 if self.direction == "maximize" else -1.0
        perf = sign * float(value) if ok else math.nan  # type: ignore[arg-type]
        test = None if test_value is None else sign * float(test_value)
        t.duration_s = time.perf_counter() - t._t0
        ev = Evaluation(t.arch, perf, test, {**self.searcher.resources(t.arch), **res}, t.duration_s, ok=ok,
                        error=None if ok else "failed (no finite value told)",
                        extra={"value": None if not ok else float(value)})  # type: ignore[arg-type]  # fmt: skip
        self.searcher.tell([ev])
        t.state = "complete" if ok else "failed"
        t.value, t.test_value, t.resources = (float(value) if ok else None), test_value, dict(ev.resources)  # type: ignore[arg-type]
        t.feasible = self.constraints.feasible(ev.resources)
        t.error = ev.error
        self._evals[t.number] = ev
        return t

    def optimize(
        self, objective: Callable[..., Any], n_trials: int, catch: tuple[type[BaseException], ...] = ()
    ) -> Study:
        """Run ``n_trials`` trials in this process: ``objective(params[, seed=])`` returns a value or a dict
        (:func:`mlsysopt.nas.objective.parse_result`). An exception of a type in ``catch`` fails its trial and the
        loop goes on; any other fails it and is raised (as Optuna does). A study made without a ``budget`` plans for
        the ``n_trials`` of its first call (as ``nas search --budget n_trials``)."""
        if not self._planned and not self.trials:
            self._plan(n_trials)
        self._planned = True
        for _ in range(n_trials):
            trial = self.ask()
            try:
                out = parse_result(invoke(objective, trial.params, self.searcher.seed))
            except Exception as exc:
                self.tell(trial, None)
                trial.error = f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, catch):
                    raise
                continue
            self.tell(trial, out["value"], out["resources"], out["test_value"])
        return self

    # ------------------------------------------------------------------ results
    def _ranked(self) -> list[Trial]:
        done = [t for t in self.trials if t.state == "complete" and (not self.constraints.hard or t.feasible)]
        sign = 1.0 if self.direction == "maximize" else -1.0
        return sorted(done, key=lambda t: (-sign * float(t.value), t.number))  # type: ignore[arg-type]

    @property
    def best_trial(self) -> Trial:
        """The best complete (and, in hard mode, feasible) trial; the first of equals."""
        ranked = self._ranked()
        if not ranked:
            raise MlsysoptError("no complete feasible trial yet")
        return ranked[0]

    @property
    def best_value(self) -> float:
        """The best trial's value."""
        return float(self.best_trial.value)  # type: ignore[arg-type]

    @property
    def best_params(self) -> dict[str, Any]:
        """The best trial's parameters."""
        return self.best_trial.params

    def records(self) -> list[dict[str, Any]]:
        """The told trials as history records (``result.json["evaluations"]`` entries, in trial order)."""
        return [eval_record(n, ev, self.space, self.constraints) for n, ev in sorted(self._evals.items())]

    def settings(self) -> dict[str, Any]:
        """What a history record's ``settings.json`` holds for this study (the space names the task)."""
        return {"space": self.space.name, "method": self.method, "direction": self.direction,
                "constraints": self.constraints.to_dict()}  # fmt: skip
