"""The searcher interface every NAS method implements: Optuna-like ask/tell, plus cached validity/resource helpers.

A method subclasses :class:`Searcher` (and :class:`SearcherConfig` for its knobs: each method takes its own config
dataclass), builds its state in :meth:`Searcher.setup` and implements ``ask``/``tell``;
:func:`mlsysopt.nas.run_search` drives it. The helpers answer, once per architecture, whether it is in the space,
what its identity is (table spaces map equivalent cells to one key) and what its resources are, so methods never
propose an architecture twice and, in hard-constraint mode, never propose an infeasible one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from mlsysopt.errors import InvalidArchitecture, MlsysoptError
from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.knobs import MAX_TRIES, check_config, knob
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace


@dataclass
class SearcherConfig:
    """Knobs shared by every searcher (each method's config dataclass extends this one); checked on creation."""

    tries: int = knob(2000, 1, MAX_TRIES)  # random draws per ask before giving up finding a new admissible candidate

    def __post_init__(self) -> None:
        check_config(self)


ConfigT = TypeVar("ConfigT", bound=SearcherConfig)


class Searcher(ABC, Generic[ConfigT]):
    """One NAS method behind an Optuna-like ask/tell interface, configured by its own ``Config`` dataclass.

    Args:
        space: the search space.
        constraints: resource constraints (none: every architecture is feasible).
        budget: evaluations the driver spends.
        seed: seeds every random choice of the method.
        config: the method's knobs, an instance of its ``Config`` (default: ``Config()``).
        prior: a transfer prior (:class:`~mlsysopt.nas.prior.TransferPrior`) for the methods that read one
            (``uses_prior``); None lets such a method take the space's own (``space.default_prior()``).

    Helpers shared by every method cache each architecture's validity, resources and identity. The identity is
    ``space.key(arch)`` when the space has such a method (NAS-Bench-Graph maps isomorphic cells to one table key),
    so no method spends an evaluation on an architecture equivalent to one it already proposed. Only the resources
    the constraints read are asked for; the space's ``costly_resources`` among them (a timed latency) are fetched
    only when :meth:`feasible` needs them, so a method can filter on the cheap ones first (:meth:`feasible_cheap`,
    ``admissible(arch, costly=False)``) and check the costly ones for the few candidates it is about to propose.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[SearcherConfig]] = SearcherConfig
    #: Whether the method reads a transfer prior (EPNAS, zero-shot transfer).
    uses_prior: ClassVar[bool] = False
    #: Whether the first ``k`` proposals of a run with budget ``B`` are those of a run with budget ``k`` (the method
    #: never reads its budget), so one run's best-so-far curve gives every smaller budget's result.
    anytime: ClassVar[bool] = True

    def __init__(
        self,
        space: SearchSpace,
        constraints: Constraints | None = None,
        budget: int = 100,
        seed: int = 0,
        config: ConfigT | None = None,
        prior: Any = None,
    ) -> None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise MlsysoptError(f"budget must be an integer >= 1 (evaluations), got {budget!r}")
        cfg = self.Config() if config is None else config
        if type(cfg) is not self.Config:  # a config of another method would be silently misread
            raise MlsysoptError(f"method '{self.name}' takes a {self.Config.__name__}, not a {type(cfg).__name__}")
        self.cfg = cast(ConfigT, cfg)
        self.space = space
        self.constraints = constraints if constraints is not None else Constraints()
        self.constraints.check_resources(space)
        self.budget, self.seed = budget, int(seed)
        self.prior = prior
        self.rng = np.random.default_rng(seed)
        self.proposed: list[Arch] = []  # every architecture ever proposed, in order
        self.seen: set[Hashable] = set()  # their keys: no architecture (or table-equivalent one) is proposed twice
        self.worst: float | None = None  # lowest reward seen: the penalty for infeasible or failed candidates
        self._cache: dict[Arch, tuple[bool, Hashable, dict[str, float]]] = {}
        needed = self.constraints.resources
        costly = set(getattr(space, "costly_resources", ()))
        measured = set(getattr(space, "measured", ()))  # only an evaluation reports them: judged after it
        self._cheap_names = tuple(r for r in needed if r not in costly and r not in measured)
        self._costly_names = tuple(r for r in needed if r in costly and r not in measured)
        self._before = self._cheap_names + self._costly_names  # what feasibility is judged on before evaluating
        self._full: dict[Arch, dict[str, float]] = {}  # cheap + costly resources, once the costly ones were fetched
        # constraint -> met by any architecture looked at (None: its resource was never looked at, e.g. a costly one)
        self.met: dict[str, bool | None] = dict.fromkeys(self.constraints.names)
        self.setup()

    def setup(self) -> None:
        """Build the method's own state from ``self.cfg`` (called once, at the end of ``__init__``)."""

    def resolve_prior(self, setting: str) -> Any:
        """The prior a method with knob ``prior=setting`` uses: None for ``"none"``; for ``"auto"`` the one given
        to the constructor, else the space's own (``space.default_prior()``), else None (nothing to transfer)."""
        if setting == "none":
            return None
        if self.prior is not None:
            return self.prior
        default = getattr(self.space, "default_prior", None)
        return default() if callable(default) else None

    # ---------------------------------------------------------------- interface
    @abstractmethod
    def ask(self, n: int) -> list[Arch]:
        """Up to ``n`` new candidates to evaluate next, in parallel (fewer or none when nothing admissible is left)."""

    @abstractmethod
    def tell(self, evals: list[Evaluation]) -> None:
        """The outcomes of asked candidates (failed and never-evaluated infeasible ones have ``ok=False``)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume (plain data and tensors only)."""
        return {
            "rng": self.rng.bit_generator.state,
            "proposed": [[*a.choices, a.blocks] for a in self.proposed],
            "worst": self.worst,
            "met": dict(self.met),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.rng.bit_generator.state = d["rng"]
        self.proposed, self.seen = [], set()
        self.mark([Arch(tuple(s[:-1]), s[-1]) for s in d["proposed"]])
        self.worst = d["worst"]
        self.met = dict(d["met"])

    # ---------------------------------------------------------------- helpers for subclasses
    def _info(self, arch: Arch) -> tuple[bool, Hashable, dict[str, float]]:
        """(valid, key, cheap resources) of ``arch``, computed once: table spaces make each of these a look-up."""
        info = self._cache.get(arch)
        if info is None:
            key: Hashable = arch
            try:
                if callable(getattr(self.space, "key", None)):
                    key = self.space.key(arch)  # checks the architecture too
                else:
                    self.space.check(arch)
            except InvalidArchitecture:
                info = (False, arch, {})
            else:
                info = (True, key, dict(self.space.resources_for(arch, self._cheap_names)))
                self._note_met(info[2])
            self._cache[arch] = info
        return info

    def _note_met(self, res: dict[str, float]) -> None:
        for c in self.constraints.constraints:
            if c.resource in res:
                self.met[c.name] = bool(self.met[c.name]) or c.satisfied(res)

    def valid(self, arch: Arch) -> bool:
        """Whether ``arch`` is in the space (``space.is_valid``, cached)."""
        return self._info(arch)[0]

    def key(self, arch: Arch) -> Hashable:
        """Identity for de-duplication: ``space.key(arch)`` when the space has one (equivalent cells), else ``arch``."""
        return self._info(arch)[1]

    def resources(self, arch: Arch) -> dict[str, float]:
        """The resources the constraints read (costly ones fetched on first use; cached)."""
        valid, _, res = self._info(arch)
        if not valid:
            return dict(self.space.resources(arch))  # raises InvalidArchitecture with the reason
        if not self._costly_names:
            return res
        if arch not in self._full:
            self._full[arch] = {**res, **self.space.resources_for(arch, self.constraints.resources)}
            self._note_met(self._full[arch])
        return self._full[arch]

    def checked_costly(self, arch: Arch) -> bool:
        """Whether ``arch``'s costly resources were fetched already (or it has none to fetch)."""
        return not self._costly_names or arch in self._full

    def feasible(self, arch: Arch) -> bool:
        """Whether ``arch`` meets every constraint the space can judge before evaluating it (costly resources are
        fetched only if the cheap ones pass; those only an evaluation measures are judged by :meth:`usable`)."""
        if self._costly_names and not self.feasible_cheap(arch):
            return False
        return self.constraints.feasible(self.resources(arch), only=self._before)

    def feasible_cheap(self, arch: Arch) -> bool:
        """Whether ``arch`` meets every constraint on a cheap resource (all of them when none is costly)."""
        if not self._costly_names:
            return self.feasible(arch)
        return self.constraints.feasible(self._info(arch)[2], only=self._cheap_names)

    def fresh(self, arch: Arch) -> bool:
        """Valid and never proposed (nor any equivalent architecture)."""
        return self.valid(arch) and self.key(arch) not in self.seen

    def admissible(self, arch: Arch, costly: bool = True) -> bool:
        """Fresh and (in hard mode) feasible: worth spending an evaluation on (``costly=False``: on cheap resources)."""
        if not self.fresh(arch):
            return False
        return not self.constraints.hard or (self.feasible(arch) if costly else self.feasible_cheap(arch))

    def mark(self, archs: list[Arch]) -> None:
        """Record ``archs`` as proposed."""
        for a in archs:
            self.proposed.append(a)
            self.seen.add(self.key(a))

    def prior_from_histories(self, histories: list[dict[str, Any]], with_space: bool = True) -> Any:
        """A transfer prior trained on earlier runs' history records (the study store's ``--warm-start``), together
        with the space's own source tasks (``space.prior_tasks()``, when ``with_space``); MlsysoptError when no
        record holds a usable evaluation."""
        from mlsysopt.nas.prior import TransferPrior, history_tasks

        tasks = history_tasks(histories)
        if not sum(len(t.perf) for t in tasks):
            raise MlsysoptError("--warm-start: the earlier runs hold no usable evaluation to learn a prior from")
        base = getattr(self.space, "prior_tasks", None)
        sources = list(base()) if with_space and callable(base) else []
        return TransferPrior().fit(sources + tasks)

    def best_evaluated(self, data: list[tuple[Arch, float]], k: int) -> list[Arch]:
        """The ``k`` architectures of ``data`` (``(arch, reward)`` pairs) with the highest reward, best first."""
        order = sorted(range(len(data)), key=lambda i: (-data[i][1], i))
        return [data[i][0] for i in order[:k]]

    def draw(self, gen: Callable[[], Arch], n: int) -> list[Arch]:
        """Up to ``n`` admissible architectures from ``gen`` (at most ``cfg.tries`` draws), marked as proposed."""
        out: list[Arch] = []
        keys: set[Hashable] = set()
        for _ in range(max(self.cfg.tries, 1)):
            if len(out) >= n:
                break
            arch = gen()
            if self.admissible(arch) and self.key(arch) not in keys:
                out.append(arch)
                keys.add(self.key(arch))
        self.mark(out)
        return out

    def usable(self, ev: Evaluation) -> bool:
        """Evaluated, finite, and (in hard mode) feasible on its measured resources: a real data point."""
        if not ev.ok or not math.isfinite(ev.perf):
            return False
        return not self.constraints.hard or self.constraints.feasible({**self.resources(ev.arch), **ev.resources})

    def reward(self, ev: Evaluation) -> float:
        """``Constraints.reward`` of a usable evaluation; failed or infeasible ones get :meth:`penalty`."""
        if not self.usable(ev):
            return self.penalty()
        r = self.constraints.reward(ev.perf, {**self.resources(ev.arch), **ev.resources})
        self.worst = r if self.worst is None else min(self.worst, r)
        return r

    def penalty(self) -> float:
        """Reward for infeasible or failed candidates: the worst reward so far (at first, the constraints' penalty)."""
        return self.constraints.penalty if self.worst is None else self.worst
