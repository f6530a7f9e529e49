"""BANANAS-style search (White, Neiswanger & Savani, AAAI 2021): an ensemble predictor and mutation acquisition.

The first ``init`` architectures are uniform samples. After that, every round trains an ensemble of ``members``
MLPs (:class:`~mlsysopt.nas.predictor.OnlinePredictor`, different initialisations) on every evaluated architecture,
makes ``candidates`` new architectures by mutating the ``parents`` best evaluated ones (one decision changed,
"Mutation is all you need": the acquisition is optimised locally around the incumbents), scores them by
independent Thompson sampling (a draw from a normal with the ensemble's mean and spread, per candidate) and
evaluates the top ``n``. The ensemble is trained again once ``refit_every`` new evaluations arrived (NASLib's
BANANAS trains once per ``k = 10`` queries; 1: before every ask that has new data). BANANAS' path encoding is for
DAG cells with ops on nodes; here the predictor reads the space's own one-hot encoding, hence "BANANAS-style".
Architectures have ``max_blocks`` blocks, or any count where the block count is a choice of the space (a user's
``Blocks(min, max)``): then the starts draw it and a mutation may drop or append a block
(:meth:`~mlsysopt.nas.spaces.base.SearchSpace.mutate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from mlsysopt.nas.knobs import MAX_MEMBERS, MAX_POOL, MAX_PRED_EPOCHS, MAX_WIDTH, knob
from mlsysopt.nas.predictor import OnlinePredictor, PredictorConfig
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation

ACQUISITIONS = ("its", "ucb", "mean")


@dataclass
class BananasConfig(SearcherConfig):
    """The paper's defaults scaled to these budgets: 10 random starts, 5 members, 10 parents, 100 candidates; the
    ensemble trained every 5 new evaluations (``benchmarks/nas_bananas_refit.py``: the longest interval tied with the
    best on the tuning tables, then a tie with training before every ask on the held-out ones).

    Args:
        tries: Random draws per ask before giving up on finding a new admissible candidate, 1 to 1e6.
        init: Uniform random architectures before the predictor is used, >= 1.
        members: Ensemble size, 1 to 64.
        pred_hidden: Predictor hidden width, 1 to 4096.
        pred_epochs: Predictor training epochs per round, 1 to 100000.
        parents: Best evaluated architectures that are mutated, >= 1.
        candidates: Mutated candidates scored per round, >= 1.
        acquisition: ``"its"`` (independent Thompson sampling), ``"ucb"`` or ``"mean"``.
        refit_every: Train the ensemble again once this many new evaluations arrived since its last training, >= 1.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    init: int = knob(10, 1, MAX_POOL)
    members: int = knob(5, 1, MAX_MEMBERS)
    pred_hidden: int = knob(32, 1, MAX_WIDTH)
    pred_epochs: int = knob(100, 1, MAX_PRED_EPOCHS)
    parents: int = knob(10, 1, MAX_POOL)
    candidates: int = knob(100, 1, MAX_POOL)
    acquisition: str = knob("its", choices=ACQUISITIONS)
    refit_every: int = knob(5, 1, MAX_POOL)  # chosen on the tuning tables (BENCHMARKS.md, issue #34)


class Bananas(Searcher[BananasConfig]):
    """Ensemble predictor + mutation acquisition.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`BananasConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "bananas"
    Config: ClassVar[type[SearcherConfig]] = BananasConfig

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        cfg = self.cfg
        # regression only (no ranking loss); the data and the size of the last training are its state
        knobs = PredictorConfig(members=cfg.members, pred_hidden=cfg.pred_hidden, pred_epochs=cfg.pred_epochs,
                                rank_weight=0.0)  # fmt: skip
        self.predictor = OnlinePredictor(self.space, knobs, self.seed)

    def _fit(self) -> None:
        p = self.predictor
        n = len(p.data)
        if n >= 2 and (p.fitted_n == 0 or n - p.fitted_n >= self.cfg.refit_every):
            p.fit_first(n)

    def ask(self, n: int) -> list[Arch]:
        """Random architectures for the first ``init``; then the ``n`` best-acquired mutations of the incumbents."""
        cfg = self.cfg
        if len(self.proposed) < cfg.init or len(self.predictor.data) < 2:
            return self.draw(lambda: self.space.sample(self.rng), min(n, max(cfg.init - len(self.proposed), 1)))
        self._fit()
        parents = self.best_evaluated(self.predictor.data, cfg.parents)
        pool: list[Arch] = []
        keys: set[Any] = set()
        for _ in range(max(1, cfg.tries // cfg.candidates)):
            for _ in range(cfg.candidates):
                arch = self.space.mutate(parents[int(self.rng.integers(len(parents)))], self.rng)
                if self.admissible(arch, costly=False) and self.key(arch) not in keys:
                    pool.append(arch)
                    keys.add(self.key(arch))
            if len(pool) >= n:
                break
        if not pool:
            return self.draw(lambda: self.space.sample(self.rng), n)
        mean, std = self.predictor.predict_dist(pool)
        if cfg.acquisition == "its":
            score = mean + std * self.rng.standard_normal(len(pool))
        elif cfg.acquisition == "ucb":
            score = mean + std
        else:
            score = mean
        out: list[Arch] = []
        for i in np.argsort(-score, kind="stable"):
            if len(out) >= n:
                break
            if self.admissible(pool[i]):
                out.append(pool[i])
                self.mark([pool[i]])
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """Add the usable evaluations to the predictor's data (it is refit at the next ask)."""
        for ev in evals:
            if self.usable(ev):
                self.predictor.add(ev.arch, self.reward(ev))

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the predictor's (its data and the size of its last training)."""
        return {**super().state_dict(), **self.predictor.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (the predictor is trained again on the points of its last training)."""
        super().load_state_dict(d)
        # a checkpoint from before the size was kept: its search trained on all of its data at the next ask
        self.predictor.load_state_dict({**d, "fitted_n": d.get("fitted_n", len(d["data"]))})
