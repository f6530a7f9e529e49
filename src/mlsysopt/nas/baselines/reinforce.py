"""REINFORCE without progression or predictor (ENAS-like): the controller samples ``max_blocks`` architectures and
every admissible sample is evaluated; infeasible samples get the penalty reward in the next update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from mlsysopt.nas.controller import Controller, Reinforce, sample_archs
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class ReinforceConfig(SearcherConfig):
    """Controller and policy-gradient knobs (the same defaults as EPNAS's controller)."""

    hidden: int = 64
    temperature: float = 5.0
    tanh_c: float = 2.5
    lr: float = 0.01
    entropy: float = 1e-3
    baseline_decay: float = 0.9
    penalty: float = -1.0


class ReinforceSearch(Searcher):
    """ENAS-style controller trained with REINFORCE on the evaluated architectures' rewards."""

    name = "reinforce"
    Config: ClassVar[type[SearcherConfig]] = ReinforceConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg: ReinforceConfig = self.cfg  # type: ignore[assignment]
        self.options = self.space.decisions(self.space.max_blocks)
        self.controller = Controller(self.options, cfg.hidden, cfg.temperature, cfg.tanh_c, seed=self.seed)
        self.pg = Reinforce(self.controller, lr=cfg.lr, entropy=cfg.entropy, baseline_decay=cfg.baseline_decay)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.infeasible: list[Arch] = []

    def ask(self, n: int) -> list[Arch]:
        """The controller's next ``n`` admissible samples (infeasible ones are kept for the penalty)."""
        out: list[Arch] = []
        keys: set[Any] = set()
        batch = max(n, 100)  # sampled together for speed; taken in order, the rest discarded unseen
        for _ in range(max(1, self.cfg.tries // batch)):
            for arch in sample_archs(self.controller, self.options, self.space.max_blocks, batch, self.gen):
                if len(out) >= n:
                    break
                if not self.valid(arch) or (self.constraints.hard and not self.feasible(arch)):
                    self.infeasible.append(arch)
                elif self.key(arch) not in self.seen and self.key(arch) not in keys:
                    out.append(arch)
                    keys.add(self.key(arch))
            if len(out) >= n:
                break
        self.mark(out)
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """One REINFORCE step on the told rewards plus up to as many penalised infeasible samples."""
        if not evals:
            return
        good = [ev for ev in evals if self.usable(ev)]
        penalised = [ev.arch.choices for ev in evals if not self.usable(ev)]
        n_pen = min(len(self.infeasible), len(evals))
        if n_pen:
            idx = self.rng.choice(len(self.infeasible), n_pen, replace=False)
            penalised += [self.infeasible[i].choices for i in sorted(idx)]
        self.infeasible = []
        cfg: ReinforceConfig = self.cfg  # type: ignore[assignment]
        self.pg.update([ev.arch.choices for ev in good], [self.reward(ev) for ev in good], penalised, cfg.penalty)

    def state_dict(self) -> dict[str, Any]:
        """Base state plus controller, optimizer, baseline, generator and pending penalties."""
        return {
            **super().state_dict(),
            "pg": self.pg.state_dict(),
            "gen": self.gen.get_state(),
            "infeasible": [(list(a.choices), a.blocks) for a in self.infeasible],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        self.pg.load_state_dict(d["pg"])
        self.gen.set_state(d["gen"])
        self.infeasible = [Arch(tuple(c), b) for c, b in d["infeasible"]]
