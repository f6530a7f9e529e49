"""PNAS-like search (Liu et al., ECCV 2018): progressive stages and a predictor, without reinforcement learning.

Stage 1 lists candidates with ``min_blocks`` blocks (all of them when there are at most ``max_candidates``, else a
uniform sample). Each later stage expands the ``beam`` best evaluated architectures of the previous stage by one
block (every extension, or a sample when there are too many). Within a stage the predictor (trained on everything
evaluated, all block counts) ranks the remaining candidates and ``ask(n)`` returns the top ``n``; before two points
are known the order is random. The evaluation budget is split across stages like EPNAS's (:mod:`mlsysopt.nas.stages`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.predictor import OnlinePredictor, PredictorConfig
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation
from mlsysopt.nas.stages import SPLITS, Stages


@dataclass
class PNASConfig(PredictorConfig, SearcherConfig):
    """Beam width, candidate cap per stage, budget split and the predictor knobs (shared with EPNAS).

    Args:
        tries: as :class:`~mlsysopt.nas.searcher.SearcherConfig`.
        members, pred_hidden, pred_epochs, pred_lr, rank_weight, refit_growth: as
            :class:`~mlsysopt.nas.predictor.PredictorConfig`.
        beam: Best architectures of a stage expanded into the next, >= 1.
        max_candidates: Most candidates listed per stage (a uniform sample beyond), >= 1.
        stage_split: Budget split over stages: ``"auto"``, ``"linear"``, ``"equal"`` or ``"last"``.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    beam: int = knob(5, 1, MAX_POOL)
    max_candidates: int = knob(1000, 1, MAX_POOL)
    stage_split: str = knob("linear", choices=SPLITS)


class PNAS(Searcher[PNASConfig]):
    """Progressive beam search ranked by the performance predictor.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`PNASConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "pnas"
    Config: ClassVar[type[SearcherConfig]] = PNASConfig
    anytime = False  # the stages split the budget

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        self.stages = Stages.for_space(self.space, self.budget, self.cfg.stage_split)
        self.predictor = OnlinePredictor(self.space, self.cfg, self.seed)
        self.pool: list[Arch] = []
        self.stage = -1  # the stage whose candidates are in the pool

    def _random(self, blocks: int, k: int) -> list[Arch]:
        return list(dict.fromkeys(self.space.sample(self.rng, blocks) for _ in range(k)))

    def _build_pool(self, s: int) -> list[Arch]:
        cfg = self.cfg
        blocks = self.stages.blocks_list[s]
        if s == 0 or self.stage == s:  # first stage, or a refill of an exhausted stage
            opts = self.space.decisions(blocks)
            if math.prod(opts) <= cfg.max_candidates:
                return [Arch(c, blocks) for c in itertools.product(*(range(k) for k in opts))]
            return self._random(blocks, cfg.max_candidates)
        below = self.stages.blocks_list[s - 1]
        prev = sorted((p for p in self.predictor.data if p[0].blocks == below), key=lambda p: -p[1])
        parents = [a for a, _ in prev[: cfg.beam]]
        if not parents:
            return self._random(blocks, cfg.max_candidates)
        new = self.space.decisions(blocks)[len(self.space.decisions(blocks - 1)) :]
        per = cfg.max_candidates // len(parents)
        out: list[Arch] = []
        for p in parents:
            if math.prod(new) <= per:
                out += [Arch(p.choices + c, blocks) for c in itertools.product(*(range(k) for k in new))]
            else:
                out += [self.space.extend(p, self.rng) for _ in range(per)]
        return list(dict.fromkeys(out))

    def ask(self, n: int) -> list[Arch]:
        """The ``n`` best-predicted admissible candidates of the current stage's pool."""
        while True:
            s = self.stages.index
            for _ in range(2):  # the stage's pool, then one refill if it ran dry
                if s != self.stage or not self.pool:
                    self.pool = self._build_pool(s)
                    self.stage = s
                self.pool = [a for a in self.pool if self.admissible(a, costly=False)]  # costly: when popped
                if self.pool:
                    break
            if self.pool or not self.stages.advance():
                break
        if self.predictor.fitted and len(self.pool) > n:
            pred = self.predictor.predict(self.pool)
            self.pool = [self.pool[i] for i in np.argsort(-pred, kind="stable")]
        elif self.stage == 0 and not self.predictor.data:
            self.pool = [self.pool[i] for i in self.rng.permutation(len(self.pool))]
        chosen: list[Arch] = []
        while self.pool and len(chosen) < n:
            arch = self.pool.pop(0)
            if self.admissible(arch):  # two pool entries may be the same table cell
                chosen.append(arch)
                self.mark([arch])
        self.stages.consume(len(chosen))
        return chosen

    def tell(self, evals: list[Evaluation]) -> None:
        """Add usable evaluations to the predictor's data and refit it."""
        for ev in evals:
            if self.usable(ev):
                self.predictor.add(ev.arch, self.reward(ev))
        self.predictor.refit()

    def state_dict(self) -> dict[str, Any]:
        """Base state plus predictor data, the current pool and stage."""
        return {
            **super().state_dict(),
            **self.predictor.state_dict(),
            "pool": [(list(a.choices), a.blocks) for a in self.pool],
            "stage": self.stage,
            "stages": self.stages.state_dict(),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (the predictor is refit on the restored data)."""
        super().load_state_dict(d)
        self.pool = [Arch(tuple(c), b) for c, b in d["pool"]]
        self.stage = int(d["stage"])
        self.stages.load_state_dict(d["stages"])
        self.predictor.load_state_dict(d)
