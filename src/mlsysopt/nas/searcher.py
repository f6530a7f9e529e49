"""The searcher interface every NAS method implements: Optuna-like ask/tell, and state to resume from.

A method subclasses :class:`Searcher` (and :class:`SearcherConfig` for its knobs: each method takes its own config
dataclass), builds its state in :meth:`Searcher.setup` and implements ``ask``/``tell``;
:func:`mlsysopt.nas.run_search` drives it. What every method needs besides comes from three small mixins:
:class:`~mlsysopt.nas.candidates.Candidates` (validity, identity, resources, feasibility of a candidate, cached),
:class:`~mlsysopt.nas.rewards.Rewards` (constrained rewards, the penalty of failed or infeasible ones) and
:class:`~mlsysopt.nas.prior_source.PriorSource` (where a transfer prior comes from).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.candidates import Candidates
from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.knobs import MAX_TRIES, check_config, knob
from mlsysopt.nas.prior_source import PriorSource
from mlsysopt.nas.rewards import Rewards
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace


@dataclass
class SearcherConfig:
    """Knobs shared by every searcher (each method's config dataclass extends this one); checked on creation.

    Args:
        tries: random draws per ``ask`` before a method gives up finding a new admissible candidate (1 to
            ``MAX_TRIES``).
    """

    tries: int = knob(2000, 1, MAX_TRIES)  # random draws per ask before giving up finding a new admissible candidate

    def __post_init__(self) -> None:
        check_config(self)


ConfigT = TypeVar("ConfigT", bound=SearcherConfig)


class Searcher(Candidates, Rewards, PriorSource, ABC, Generic[ConfigT]):
    """One NAS method behind an Optuna-like ask/tell interface, configured by its own ``Config`` dataclass.

    Args:
        space: the search space.
        constraints: resource constraints (none: every architecture is feasible).
        budget: evaluations the driver spends.
        seed: seeds every random choice of the method.
        config: the method's knobs, an instance of its ``Config`` (default: ``Config()``).
        prior: a transfer prior (:class:`~mlsysopt.nas.prior.TransferPrior`) for the methods that read one
            (``uses_prior``); None lets such a method take the space's own (``space.default_prior()``).

    Raises:
        MlsysoptError: ``budget`` < 1, or ``config`` is not an instance of the method's ``Config``.
        InvalidConstraint: a constraint reads a resource the space does not report.

    The helpers every method uses come from the mixins: :class:`~mlsysopt.nas.candidates.Candidates` (a
    candidate's validity, identity, resources and feasibility, cached; costly resources fetched last),
    :class:`~mlsysopt.nas.rewards.Rewards` and :class:`~mlsysopt.nas.prior_source.PriorSource`.
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
        self.worst: float | None = None  # lowest reward seen: the penalty for infeasible or failed candidates
        self.init_candidates()
        self.setup()

    def setup(self) -> None:
        """Build the method's own state from ``self.cfg`` (called once, at the end of ``__init__``)."""

    def check_ready(self) -> None:
        """Raise :class:`~mlsysopt.errors.MlsysoptError` if the method cannot search yet: a transfer method given no
        prior (``--warm-start`` may still give it one, so ``nas search`` checks after the warm start;
        :func:`~mlsysopt.nas.registry.get_method` checks at once)."""

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
