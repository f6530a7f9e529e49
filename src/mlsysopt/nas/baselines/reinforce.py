"""REINFORCE without progression or predictor (ENAS-like): the controller samples ``max_blocks`` architectures and
every admissible sample is evaluated; infeasible samples get the penalty reward in the next update. Where the block
count is a choice of the space (a user's ``Blocks(min, max)``) each sample's count is drawn uniformly first and the
controller decodes that many blocks (a prefix of its decisions, as EPNAS's stages use it): it learns the decisions,
not the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.nas.controller import ControllerConfig, Policy
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class ReinforceConfig(ControllerConfig, SearcherConfig):
    """Controller and policy-gradient knobs (the same defaults as EPNAS's controller).

    Args:
        tries: as :class:`~mlsysopt.nas.searcher.SearcherConfig`.
        hidden, temperature, tanh_c, lr, entropy, baseline_decay, penalty: as
            :class:`~mlsysopt.nas.controller.ControllerConfig`.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """


class ReinforceSearch(Searcher[ReinforceConfig]):
    """ENAS-style controller trained with REINFORCE on the evaluated architectures' rewards.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`ReinforceConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "reinforce"
    Config: ClassVar[type[SearcherConfig]] = ReinforceConfig

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        self.options = self.space.decisions(self.space.max_blocks)
        self.policy = Policy(self.options, self.cfg, self.seed)

    def ask(self, n: int) -> list[Arch]:
        """The controller's next ``n`` admissible samples (infeasible ones are kept for the penalty)."""
        out: list[Arch] = []
        keys: set[Any] = set()
        batch = max(n, 100)  # sampled together for speed; taken in order, the rest discarded unseen
        for _ in range(max(1, self.cfg.tries // batch)):
            for arch in self._sample(batch):
                if len(out) >= n:
                    break
                if not self.valid(arch) or (self.constraints.hard and not self.feasible(arch)):
                    self.policy.infeasible.append(arch)
                elif self.key(arch) not in self.seen and self.key(arch) not in keys:
                    out.append(arch)
                    keys.add(self.key(arch))
            if len(out) >= n:
                break
        self.mark(out)
        return out

    def _sample(self, batch: int) -> list[Arch]:
        sp = self.space
        if not (sp.depth_is_a_choice and sp.min_blocks < sp.max_blocks):
            return self.policy.sample(self.options, sp.max_blocks, batch)
        counts = self.rng.integers(sp.min_blocks, sp.max_blocks + 1, batch).tolist()
        by_count = {b: iter(self.policy.sample(sp.decisions(b), b, counts.count(b))) for b in sorted(set(counts))}
        return [next(by_count[b]) for b in counts]

    def tell(self, evals: list[Evaluation]) -> None:
        """One REINFORCE step on the told rewards plus up to as many penalised infeasible samples."""
        if not evals:
            return
        good = [ev for ev in evals if self.usable(ev)]
        failed = [ev.arch.choices for ev in evals if not self.usable(ev)]
        rewards = [self.reward(ev) for ev in good]
        self.policy.update([ev.arch.choices for ev in good], rewards, failed, len(evals), self.rng)

    def state_dict(self) -> dict[str, Any]:
        """Base state plus controller, optimizer, baseline, generator and pending penalties."""
        return {**super().state_dict(), **self.policy.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        self.policy.load_state_dict(d)
