"""Optuna's TPE sampler with constraints: one categorical parameter per decision of a ``max_blocks`` architecture.

Constraint values go to Optuna through ``Trial.set_constraint`` (Optuna 5's replacement for
``TPESampler(constraints_func=...)``, same ≤ 0-is-feasible floats), so c-TPE models the feasible region. In hard
mode a suggestion that is infeasible on cheap resources is told back at once with the penalty value and its
constraint values: Optuna learns from it and no evaluation is spent. A suggestion already evaluated is told its
known value; one already in flight is told as failed. For an exact resume the sampler is re-created before every
suggestion with a seed derived from the search seed and the trial count, and the trials are replayed from the state.
Where the block count is a choice of the space (a user's ``Blocks(min, max)``) it is one more parameter, ``blocks``,
suggested first, and only that many blocks' decisions follow (a conditional space, as a user writes it in Optuna;
multivariate TPE then samples by group).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from mlsysopt.nas.knobs import MAX_POOL, MAX_TRIES, knob
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class TPEConfig(SearcherConfig):
    """TPE knobs: random start-up trials, multivariate TPE, and refused suggestions allowed per ask.

    Args:
        tries: Refused suggestions allowed per ask, 1 to 1e6.
        n_startup: Random start-up trials before TPE models the space, >= 0.
        multivariate: Whether to use multivariate TPE.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    tries: int = knob(50, 1, MAX_TRIES)  # every refused suggestion is a trial TPE conditions on: fewer than others
    n_startup: int = knob(10, 0, MAX_POOL)
    multivariate: bool = knob(True)


class OptunaTPE(Searcher[TPEConfig]):
    """Constrained TPE over the decisions of ``max_blocks``-block architectures (of any count where the block count
    is a choice of the space).

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`TPEConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "tpe"
    Config: ClassVar[type[SearcherConfig]] = TPEConfig

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        blocks = self.space.max_blocks
        self.names = [f"{i}:{n}" for i, n in enumerate(self.space.decision_names(blocks))]
        self.dists = {
            n: CategoricalDistribution(list(range(k)))
            for n, k in zip(self.names, self.space.decisions(blocks), strict=True)
        }
        sp = self.space
        self.depth = sp.depth_is_a_choice and sp.min_blocks < sp.max_blocks
        self.blocks_dist = IntDistribution(sp.min_blocks, sp.max_blocks)
        self.study = optuna.create_study(direction="maximize")
        self.records: list[dict[str, Any]] = []  # every finished trial, in order, for the resume replay
        self.pending: dict[Arch, optuna.Trial] = {}
        self.known: dict[Hashable, tuple[float, dict[str, float]]] = {}  # key -> told value, constraints

    def _constraint_values(self, resources: dict[str, float]) -> dict[str, float]:
        if not self.constraints.hard:
            return {}
        return {k: (v if math.isfinite(v) else 1.0) for k, v in self.constraints.values(resources).items()}

    def _finish(self, trial: optuna.Trial, value: float | None, cons: dict[str, float]) -> None:
        for k, v in cons.items():
            trial.set_constraint(k, v)
        state = TrialState.COMPLETE if value is not None else TrialState.FAIL
        self.study.tell(trial, value, state=state)
        self.records.append(
            {"params": dict(trial.params), "value": value, "constraints": cons, "ok": value is not None}
        )

    def _arch(self, params: dict[str, Any]) -> Arch:
        # a trial recorded before the depth was searched (a checkpoint of an earlier version) has max_blocks blocks
        blocks = int(params.get("blocks", self.space.max_blocks)) if self.depth else self.space.max_blocks
        names = self.names[: len(self.space.decisions(blocks))]
        return Arch(tuple(int(params[k]) for k in names), blocks)

    def _distributions(self, params: dict[str, Any]) -> dict[str, BaseDistribution]:
        """The distributions of the parameters a trial has (a replayed one: its block count's decisions only)."""
        return {k: self.blocks_dist if k == "blocks" else self.dists[k] for k in params}

    def _suggest(self) -> tuple[optuna.Trial, Arch]:
        cfg = self.cfg
        n = len(self.study.get_trials(deepcopy=False))  # study.trials deep-copies every trial on each ask
        with warnings.catch_warnings():  # group (a conditional space) is experimental in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.sampler = optuna.samplers.TPESampler(
                n_startup_trials=cfg.n_startup, multivariate=cfg.multivariate,
                group=self.depth and cfg.multivariate, seed=(self.seed * 1_000_003 + n) % 2**32,
            )  # fmt: skip
        if not self.depth:
            trial = self.study.ask(self.dists)
            return trial, self._arch(trial.params)
        trial = self.study.ask()
        blocks = trial.suggest_int("blocks", self.space.min_blocks, self.space.max_blocks)
        for k in self.names[: len(self.space.decisions(blocks))]:
            trial.suggest_categorical(k, self.dists[k].choices)
        return trial, self._arch(trial.params)

    def ask(self, n: int) -> list[Arch]:
        """Up to ``n`` new admissible suggestions (others are told back at once, costing no evaluation)."""
        out: list[Arch] = []
        for _ in range(max(self.cfg.tries, 1)):
            if len(out) >= n:
                break
            trial, arch = self._suggest()
            if not self.valid(arch):
                self._finish(trial, None, {})
            elif self.key(arch) in self.known:
                self._finish(trial, *self.known[self.key(arch)])
            elif self.key(arch) in self.seen:  # in flight
                self._finish(trial, None, {})
            elif self.constraints.hard and not self.feasible(arch):
                self.known[self.key(arch)] = (self.penalty(), self._constraint_values(self.resources(arch)))
                self._finish(trial, *self.known[self.key(arch)])
            else:
                self.pending[arch] = trial
                out.append(arch)
                self.mark([arch])
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """Complete the pending trials with the rewards (failed ones as FAIL)."""
        for ev in evals:
            trial = self.pending.pop(ev.arch, None)
            if trial is None:
                continue
            cons = self._constraint_values({**self.resources(ev.arch), **ev.resources})
            if ev.ok:
                value = self.reward(ev) if self.usable(ev) else self.penalty()
                self.known[self.key(ev.arch)] = (value, cons)
                self._finish(trial, value, cons)
            else:
                self._finish(trial, None, {})

    def state_dict(self) -> dict[str, Any]:
        """Base state plus every finished trial (replayed on load)."""
        return {**super().state_dict(), "records": list(self.records)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Rebuild the study by replaying the recorded trials."""
        super().load_state_dict(d)
        self.study = optuna.create_study(direction="maximize")
        self.records, self.pending = [], {}
        for r in d["records"]:
            state = TrialState.COMPLETE if r["ok"] else TrialState.FAIL
            self.study.add_trial(
                optuna.trial.create_trial(
                    state=state,
                    value=r["value"] if r["ok"] else None,
                    params=r["params"],
                    distributions=self._distributions(r["params"]),
                    constraints=r["constraints"] or None,
                )
            )
            self.records.append(r)
        self.known = {}
        for r in d["records"]:
            if r["ok"]:
                arch = self._arch(r["params"])
                self.known[self.key(arch)] = (r["value"], r["constraints"])
