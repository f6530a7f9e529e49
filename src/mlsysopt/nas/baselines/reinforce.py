"""REINFORCE without progression or predictor (ENAS-like): the controller samples ``max_blocks`` architectures and
every admissible sample is evaluated; infeasible samples get the penalty reward in the next update.

Where the block count is a choice of the space (a user's ``Blocks(min, max)``) the count is the controller's first
decision: one more LSTM step picks ``blocks - min_blocks``, then the controller decodes that many blocks' decisions
(a prefix of ``decisions(max_blocks)``, as EPNAS's stages use it). The count's log-probability is part of the
sample's, so the policy gradient learns the count with the decisions (Zoph & Le's controller, arXiv:1611.01578,
fixes the depth; here it is one more categorical decision). A checkpoint of a search that drew the count uniformly
(``learn_count=False``, or written before the count was learned) resumes that way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.nas.controller import ControllerConfig, Policy
from mlsysopt.nas.knobs import knob
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class ReinforceConfig(ControllerConfig, SearcherConfig):
    """Controller and policy-gradient knobs (the same defaults as EPNAS's controller).

    Args:
        tries: as :class:`~mlsysopt.nas.searcher.SearcherConfig`.
        hidden, temperature, tanh_c, lr, entropy, baseline_decay, penalty: as
            :class:`~mlsysopt.nas.controller.ControllerConfig`.
        learn_count: Where the block count is a choice of the space, make it the controller's first decision
            (False: draw it uniformly and learn only the blocks' decisions, the ablation).

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    learn_count: bool = knob(True)


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

    def setup(self, count_learned: bool | None = None) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready.

        Args:
            count_learned: Whether a space whose block count is a choice gets the count as the controller's first
                decision (None: ``learn_count``; False also for a checkpoint written before it was learned).
        """
        sp = self.space
        self.options = sp.decisions(sp.max_blocks)
        learn = self.cfg.learn_count if count_learned is None else count_learned
        self.count_learned = bool(learn and sp.depth_is_a_choice and sp.min_blocks < sp.max_blocks)
        counts = [sp.max_blocks - sp.min_blocks + 1] if self.count_learned else []
        self.policy = Policy([*counts, *self.options], self.cfg, self.seed)

    def _coded(self, arch: Arch) -> list[int]:
        """The controller's decisions of ``arch``: its choices, after its block count where the count is learned."""
        return [arch.blocks - self.space.min_blocks, *arch.choices] if self.count_learned else list(arch.choices)

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
                    self.policy.infeasible.append(Arch(tuple(self._coded(arch)), arch.blocks))
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
        if self.count_learned:  # the controller's first decision
            first = self.policy.controller.options[0]
            counts = [sp.min_blocks + a.choices[0] for a in self.policy.sample([first], sp.min_blocks, batch)]
        else:  # learn_count=False, or a checkpoint from before the count was learned
            counts = self.rng.integers(sp.min_blocks, sp.max_blocks + 1, batch).tolist()
        by_count = {b: iter(self._decode(b, counts.count(b))) for b in sorted(set(counts))}
        return [next(by_count[b]) for b in counts]

    def _decode(self, blocks: int, n: int) -> list[Arch]:
        """``n`` architectures of ``blocks`` blocks; where the count is learned, decoded after that count."""
        decisions = self.space.decisions(blocks)
        if not self.count_learned:
            return self.policy.sample(decisions, blocks, n)
        count = blocks - self.space.min_blocks
        coded = self.policy.sample([self.policy.controller.options[0], *decisions], blocks, n, [[count]] * n)
        return [Arch(a.choices[1:], blocks) for a in coded]

    def tell(self, evals: list[Evaluation]) -> None:
        """One REINFORCE step on the told rewards plus up to as many penalised infeasible samples."""
        if not evals:
            return
        good = [ev for ev in evals if self.usable(ev)]
        failed = [self._coded(ev.arch) for ev in evals if not self.usable(ev)]
        rewards = [self.reward(ev) for ev in good]
        self.policy.update([self._coded(ev.arch) for ev in good], rewards, failed, len(evals), self.rng)

    def state_dict(self) -> dict[str, Any]:
        """Base state plus controller, optimizer, baseline, generator and pending penalties."""
        return {**super().state_dict(), **self.policy.state_dict(), "count_learned": self.count_learned}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        if d.get("count_learned", False) != self.count_learned:  # the checkpoint's own mode (none: drawn, as before)
            self.setup(count_learned=d.get("count_learned", False))
        self.policy.load_state_dict(d)
