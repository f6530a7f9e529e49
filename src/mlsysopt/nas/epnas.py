"""EPNAS (Zhou et al., BMVC 2019) with transfer: a REINFORCE controller, progressive stages, and a performance
predictor pretrained on other tasks that ranks controller samples and one-edit neighbours of the best so far.

The whole algorithm, read top to bottom (every knob is in :class:`EPNASConfig`):

1. **Prior.** With ``prior="auto"`` (the default) the predictor starts from a transfer prior
   (:mod:`mlsysopt.nas.prior`): one given to the method (e.g. built from earlier runs' history records), else the
   space's own -- for NAS-Bench-Graph, a network pretrained on the *other* datasets' tables, never the target's.
   ``prior="none"`` (method ``epnas_cold``, :mod:`mlsysopt.nas.epnas_cold`) starts cold. Without any prior (a new
   space with no history) EPNAS runs cold too.
2. **Stages.** The search grows architectures from ``space.min_blocks`` to ``space.max_blocks`` blocks, one stage per
   block count (:mod:`mlsysopt.nas.stages`), the budget split by ``stage_split`` (``"linear"``: stage ``s`` gets a
   share ∝ ``s + 1``; ``"equal"``; ``"last"``: everything in the final stage; ``"auto"``, the default: ``"last"``
   where the largest architectures contain the smaller ones, as on NAS-Bench-Graph, else ``"linear"``).
3. **Candidates.** Each round the controller samples architectures of the current stage's block count, a batch of
   ``candidates`` per LSTM pass, until ``candidates`` of them are admissible (or ``tries`` samples were drawn), and
   the one-edit neighbours of the ``neighbours`` best architectures of that block count evaluated so far join them
   (the mutation that makes local search and BANANAS strong on tabular NAS). Invalid, already-proposed and -- with
   hard constraints -- infeasible ones (judged on the resources the space gives without training) are dropped before
   any evaluation; a *costly* resource such as a timed latency is checked only in step 4. Infeasible and invalid
   controller samples are remembered and, at most as many as were evaluated, enter the next controller update with a
   fixed advantage ``penalty``, so the controller learns where the feasible region is. ``grow > 0`` makes that
   fraction of every batch complete prefixes of the ``beam`` best architectures (PNAS's "expand the top K").
4. **Ranking.** The predictor (``predictor="gp"``: a Gaussian process whose mean and linear kernel are the prior's
   per-task scores, :mod:`mlsysopt.nas.gp`; ``"mlp"``: the cold MLP ensemble with a ranking loss,
   :mod:`mlsysopt.nas.predictor`) scores the pool by ``mean + ucb · std`` and the round's top K are evaluated.
   With a prior it ranks from the first round; cold, only once ``warmup`` architectures have been evaluated (the
   controller's own order until then). K is ``ask``'s ``n`` (the parallel batch: ``run_search`` passes its
   ``workers``), or ``round_size`` when that is > 0, so the search is the same on any number of workers. Costly
   constraints are checked lazily in ranked order, stopping at the K-th feasible candidate or after
   :data:`COSTLY_CHECKS` checks; if they reject candidates, up to :data:`RESAMPLES` pools are drawn.
5. **Updates.** Once a round is all told, ``tell`` adds every evaluated architecture to the predictor's data and
   refits it (the GP every round; the MLP once its data grew by ``refit_growth``), then takes one REINFORCE step
   (moving-average baseline, entropy bonus; :mod:`mlsysopt.nas.controller`) on the rewards of the round's
   evaluated architectures (``Constraints.reward``); failures get the penalty. ``predicted_update > 0`` adds a
   policy step on the predictor's scores of each round's whole pool, which moves the controller towards what the
   (pretrained) predictor likes long before real rewards could.
6. **Handover.** The prior is worth most while the target's own evaluations are few, and later it holds the search
   back. Once ``handover`` architectures have been evaluated on the target (0: never), the prior steps aside: the
   predictor goes on cold on the same data (the GP without the prior's mean and kernel) and the policy steps on
   its scores stop, so from then on the search is cold EPNAS's, started from where the prior took it.

The best feasible architecture so far is what ``run_search`` returns. ``state_dict`` holds the controller, its
optimizer and baseline, the sampling generator, the predictor's data (the predictor is a deterministic function of
it and the prior), the numpy rng, the stage bookkeeping and the round in progress, so a resumed search continues
exactly where it stopped.

The defaults of ``epnas`` and ``epnas_cold`` were chosen on the NAS-Bench-Graph datasets the benchmark does not
report (physics, arxiv, proteins; tight and single-limit constraints, 3 seeds, 30 evaluations, batches of 2) by
*validation* regret, never by test performance (``benchmarks/nas.py --tune --quick``; BENCHMARKS.md has the grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from mlsysopt.nas.controller import ControllerConfig, Policy
from mlsysopt.nas.gp import OnlineGP
from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.predictor import OnlinePredictor, PredictorConfig
from mlsysopt.nas.prior import PriorScorer, TransferPrior
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation
from mlsysopt.nas.stages import SPLITS, Stages

RESAMPLES = 3  # candidate pools drawn per round at most, when costly constraints reject the top-ranked candidates
#: Costly-resource checks (a timed or predicted latency) per pool at most, top-ranked first (or 4 per candidate
#: asked for, if more): a limit that almost nothing meets ends the round instead of costing the whole 500-pool.
COSTLY_CHECKS = 64
PRIORS = ("auto", "none")
PREDICTORS = ("gp", "mlp")
#: Evaluations on the target after which EPNAS's prior steps aside (``handover``), chosen on the tuning datasets
#: only (physics, arxiv, proteins at 10, 30 and 100 evaluations: ``benchmarks/nas.py --tune``, BENCHMARKS.md).
HANDOVER = 30


@dataclass
class EPNASConfig(ControllerConfig, PredictorConfig, SearcherConfig):
    """Every EPNAS knob, the controller's and the predictor's included (see the module docstring for the defaults).

    Args:
        tries: as :class:`~mlsysopt.nas.searcher.SearcherConfig`.
        members, pred_hidden, pred_epochs, pred_lr, rank_weight, refit_growth: as
            :class:`~mlsysopt.nas.predictor.PredictorConfig`.
        hidden, temperature, tanh_c, lr, entropy, baseline_decay, penalty: as
            :class:`~mlsysopt.nas.controller.ControllerConfig`.
        prior: ``"auto"`` (the given prior, else the space's own) or ``"none"`` (cold); default ``"auto"``.
        predictor: ``"gp"`` (GP with the prior as mean) or ``"mlp"`` (MLP ensemble).
        neighbours: Best-so-far architectures whose one-edit neighbours join the pool, >= 0.
        candidates: Admissible controller samples the predictor ranks per round, >= 1.
        round_size: Architectures evaluated per round (0: ``ask``'s ``n``, i.e. the driver's workers).
        warmup: Evaluations before a cold predictor ranks, >= 0.
        stage_split: Budget split over stages: ``"auto"``, ``"linear"``, ``"equal"`` or ``"last"``.
        ucb: Rank by predicted mean + ``ucb`` * std, >= 0.
        grow: Fraction of each sample batch that completes prefixes of the best architectures, in [0, 1].
        beam: How many best architectures those prefixes come from, >= 1.
        predicted_update: Weight of a policy step on the predictor's scores of each pool (0: none; default 1.0).
        prior_steps: Policy steps on the prior's scores before the first round, >= 0 (default 20).
        prior_pool: The prior's best unevaluated architectures joining every round's pool, >= 0.
        handover: Evaluations on the target after which the prior steps aside (cold from then on), >= 0
            (0: never).

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    prior: str = knob("auto", choices=PRIORS)  # "auto": the given prior, else the space's own; "none": cold
    predictor: str = knob("gp", choices=PREDICTORS)  # "gp": GP with the prior as mean; "mlp": MLP ensemble
    neighbours: int = knob(5, 0, MAX_POOL)  # best-so-far architectures whose one-edit neighbours join the pool
    candidates: int = knob(500, 1, MAX_POOL)  # admissible controller samples the predictor ranks per round
    round_size: int = knob(0, 0, MAX_POOL)  # top-K evaluated per round (0: the driver's batch, i.e. ``workers``)
    warmup: int = knob(10, 0, MAX_POOL)  # evaluations before the predictor ranks (until then: the controller's order)
    stage_split: str = knob("auto", choices=SPLITS)  # "linear" (∝ stage number), "equal", "last"; "auto": see stages
    ucb: float = knob(0.5, 0)  # rank by predicted mean + ucb · ensemble std
    grow: float = knob(0.0, 0, 1)  # fraction of each sample batch that completes prefixes of the best archs so far
    beam: int = knob(5, 1, MAX_POOL)  # how many of the best architectures those prefixes come from
    predicted_update: float = knob(1.0, 0)  # >0: also a policy step on the predictor's scores of each round's pool
    prior_steps: int = knob(20, 0, MAX_POOL)  # policy steps on the prior's scores before the first round
    prior_pool: int = knob(0, 0, MAX_POOL)  # the prior's best unevaluated architectures joining every round's pool
    handover: int = knob(HANDOVER, 0, MAX_POOL)  # evaluations after which the prior steps aside (0: never)


class EPNAS(Searcher[EPNASConfig]):
    """Efficient Progressive NAS: controller and neighbours propose, the (pretrained) predictor ranks, the top ``n``
    are evaluated in parallel.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`EPNASConfig` (None: its defaults).
        prior: A transfer prior (:class:`~mlsysopt.nas.prior.TransferPrior`); None: the space's own (if any).
    """

    name = "epnas"
    Config: ClassVar[type[SearcherConfig]] = EPNASConfig
    uses_prior = True
    anytime = False  # the stages split the budget

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        cfg, space = self.cfg, self.space
        self.stages = Stages.for_space(space, self.budget, cfg.stage_split)
        self.queue: list[Arch] = []  # this round's candidates not handed out yet
        self.pending = 0  # handed out this round, not told yet
        self.told: list[Evaluation] = []  # this round's outcomes so far
        self.warm_prior: dict[str, Any] | None = None  # a prior from --warm-start: kept in the state for resume
        self._use_prior(self.resolve_prior(cfg.prior))

    def _use_prior(self, prior: Any) -> None:
        """Start from ``prior`` (None: cold): a fresh controller (pretrained on it) and predictor."""
        cfg, space = self.cfg, self.space
        self.prior = prior
        self.handed = False  # whether the prior has stepped aside (``handover``)
        self.policy = Policy(space.decisions(space.max_blocks), cfg, self.seed)
        self.scorer = None if prior is None else PriorScorer(prior, space)
        if cfg.predictor == "gp":
            self.predictor: OnlinePredictor | OnlineGP = OnlineGP(space, self.scorer, warmup=cfg.warmup)
        else:
            self.predictor = OnlinePredictor(space, cfg, self.seed, warmup=cfg.warmup)
        self.prior_ranked: list[Arch] = []  # every candidate the prior ranked, best first (prior_pool > 0)
        if self.scorer is not None:
            self._pretrain_controller()
            if cfg.prior_pool:
                self.prior_ranked = self._prior_ranking()

    def _prior_ranking(self) -> list[Arch]:
        """Every architecture of a table space (``iter_archs``), else ``10 · prior_pool`` samples, valid ones ranked
        by the prior's mean score (sampled with a generator of their own: the search's draws are untouched)."""
        assert self.scorer is not None
        lister = getattr(self.space, "iter_archs", None)
        if callable(lister):
            cands = list(lister())
        else:
            rng = np.random.default_rng([self.seed, 1])
            cands = [self.space.sample(rng) for _ in range(10 * self.cfg.prior_pool)]
        cands = [a for a in dict.fromkeys(cands) if self.valid(a)]
        score = self.scorer.score(cands)
        return [cands[i] for i in np.argsort(-score, kind="stable")]

    def warm_start(self, histories: list[dict[str, Any]]) -> int:
        """``--warm-start``: the prior is trained on earlier runs' records (with the space's own sources unless the
        method is cold) before the first ask; returns how many evaluations it learnt from."""
        prior = self.prior_from_histories(histories, with_space=self.cfg.prior != "none")
        self._use_prior(prior)
        self.warm_prior = prior.state_dict()
        return sum(1 for h in histories for r in h.get("records") or () if r.get("ok", True) and r.get("decoded"))

    def _pretrain_controller(self) -> None:
        """``prior_steps`` policy steps on the prior's scores of sampled batches, before any evaluation: the
        controller starts where the source tasks' good (and, in hard mode, the target's feasible) cells are."""
        cfg, space = self.cfg, self.space
        assert self.scorer is not None
        for _ in range(cfg.prior_steps):
            blocks = self.stages.blocks
            archs, log_prob, ent = self.policy.sample_for_step(space.decisions(blocks), blocks, cfg.candidates)
            ok = [self.valid(a) and (not self.constraints.hard or self.feasible_cheap(a)) for a in archs]
            good = [a for a, o in zip(archs, ok, strict=True) if o]
            adv = np.full(len(archs), float(cfg.penalty))
            if len(good) > 1:
                score = self.scorer.score(good)
                z = (score - score.mean()) / (score.std() or 1.0)
                adv[np.flatnonzero(ok)] = z
            self.policy.pg.step_on(log_prob, ent, torch.as_tensor(adv, dtype=torch.float32))  # = step(archs, adv)

    def ask(self, n: int) -> list[Arch]:
        """The next ``n`` candidates of the current round (a new round, of ``round_size`` or else ``n``, when done)."""
        if not self.queue:
            self.queue = self._round(self.cfg.round_size or n)
        out, self.queue = self.queue[:n], self.queue[n:]
        self.pending += len(out)
        return out

    def _round(self, n: int) -> list[Arch]:
        """The ``n`` best-predicted admissible candidates among the controller's samples at the current stage."""
        chosen: list[Arch] = []
        for _ in range(RESAMPLES):
            k = n - len(chosen)
            pool = self._candidates(k)
            while not pool and self.stages.advance():  # this block count has nothing fresh left
                pool = self._candidates(k)
            picked = self._pick(self._rank(pool, k), k)
            self.mark(picked)
            self.stages.consume(len(picked))
            chosen += picked
            if len(picked) == min(k, len(pool)):  # nothing was rejected on costly resources: no need to sample more
                break
        return chosen

    def _rank(self, pool: list[Arch], n: int) -> list[Arch]:
        """``pool`` best-predicted first once the predictor is fitted (before: the controller's sampling order)."""
        cfg, pred = self.cfg, self.predictor
        ready = pred.ranks_unfitted or (len(pred.data) >= pred.warmup and pred.fitted)
        if not ready or len(pool) <= n:
            return pool
        mean, std = self.predictor.predict_dist(pool)
        score = mean + cfg.ucb * std
        step = 0.0 if self.handed else cfg.predicted_update
        if step and score.std() > 0:
            adv = torch.as_tensor((score - score.mean()) / score.std(), dtype=torch.float32)
            self.policy.pg.step([a.choices for a in pool], step * adv)
        return [pool[i] for i in np.argsort(-score, kind="stable")]

    def _pick(self, ranked: list[Arch], n: int) -> list[Arch]:
        """The first ``n`` of ``ranked`` that meet the costly constraints too, checked lazily in rank order."""
        out: list[Arch] = []
        checks = 0 if self.constraints.hard and self._costly_names else None
        for arch in ranked:
            if len(out) >= n:
                break
            if checks is not None:
                if checks >= max(COSTLY_CHECKS, 4 * n):
                    break
                checks += not self.checked_costly(arch)
            if self.constraints.hard and not self.feasible(arch):  # a no-op check without costly resources
                self.policy.infeasible.append(arch)
            else:
                out.append(arch)
        return out

    def _candidates(self, n: int) -> list[Arch]:
        """Up to ``candidates`` fresh admissible controller samples of the current stage (``tries`` samples at most),
        and the admissible one-edit neighbours of the ``neighbours`` best architectures so far.

        Admissible on the cheap resources: costly ones (a timed latency) are checked later, only for the candidates
        the predictor ranks highest (:meth:`_pick`).
        """
        cfg = self.cfg
        blocks = self.stages.blocks
        options = self.space.decisions(blocks)
        pool: list[Arch] = []
        keys: set[Any] = set()
        for _ in range(max(1, cfg.tries // cfg.candidates)):
            before = len(pool)
            for arch in self.policy.sample(options, blocks, cfg.candidates, self._prefixes(blocks)):
                if not self.valid(arch) or (self.constraints.hard and not self.feasible_cheap(arch)):
                    self.policy.infeasible.append(arch)
                elif self.key(arch) not in self.seen and self.key(arch) not in keys:
                    pool.append(arch)
                    keys.add(self.key(arch))
            # enough to rank, or enough for this ask and a whole batch found nothing new (a small stage)
            if len(pool) >= max(n, cfg.candidates) or (len(pool) >= n and len(pool) == before):
                break
        # a controller that has concentrated (e.g. pretrained on the prior) may miss the fresh corners of a small
        # stage: uniform samples fill the pool up to n, so the search never ends early while fresh cells remain
        for _ in range(cfg.tries if len(pool) < n else 0):
            arch = self.space.sample(self.rng, blocks)
            if self.key(arch) not in self.seen and self.key(arch) not in keys and self.admissible(arch, costly=False):
                pool.append(arch)
                keys.add(self.key(arch))
                if len(pool) >= n:
                    break
        if cfg.prior_pool and self.stages.last:  # the prior's favourites the search has not tried yet
            added = 0
            for arch in self.prior_ranked:
                if added >= cfg.prior_pool:
                    break
                if self.key(arch) not in keys and self.admissible(arch, costly=False):
                    pool.append(arch)
                    keys.add(self.key(arch))
                    added += 1
        here = [(a, r) for a, r in self.predictor.data if a.blocks == blocks]  # this stage's block count only
        for parent in self.best_evaluated(here, cfg.neighbours):
            for arch in self.space.neighbours(parent):
                if self.admissible(arch, costly=False) and self.key(arch) not in keys:
                    pool.append(arch)
                    keys.add(self.key(arch))
        return pool

    def _prefixes(self, blocks: int) -> list[tuple[int, ...]]:
        """Prefixes for a ``grow`` fraction of a batch: best architectures to grow, or to re-sample a suffix of."""
        cfg = self.cfg
        data = self.predictor.data
        k = round(cfg.grow * cfg.candidates)
        if not k or not data:
            return []
        length = len(self.space.decisions(blocks))
        best = sorted(range(len(data)), key=lambda i: -data[i][1])[: cfg.beam]
        out = []
        for i in self.rng.choice(best, k):
            c = data[i][0].choices
            out.append(c if len(c) < length else c[: int(self.rng.integers(1, length))] if length > 1 else ())
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """Once a round is all told: refit the predictor on every evaluation so far, one REINFORCE step on the round."""
        self.told += evals
        self.pending = max(self.pending - len(evals), 0)
        if self.queue or self.pending:  # the round is not complete yet
            return
        evals, self.told = self.told, []
        if not evals:
            return
        good = [ev for ev in evals if self.usable(ev)]
        rewards = [self.reward(ev) for ev in good]
        for ev, r in zip(good, rewards, strict=True):
            self.predictor.add(ev.arch, r)
        if self._handover_due():
            self._hand_over()
        self.predictor.refit()
        failed = [ev.arch.choices for ev in evals if not self.usable(ev)]
        self.policy.update([ev.arch.choices for ev in good], rewards, failed, len(evals), self.rng)

    def _handover_due(self) -> bool:
        """Whether the prior should step aside now (it ranks, and ``handover`` evaluations are in)."""
        h = self.cfg.handover
        return bool(h) and not self.handed and self.scorer is not None and len(self.predictor.data) >= h

    def _hand_over(self) -> None:
        """The prior steps aside: a cold predictor (GP without the prior, or the MLP) on the same data."""
        data = self.predictor.data
        if self.cfg.predictor == "gp":
            self.predictor = OnlineGP(self.space, None, warmup=self.cfg.warmup)
        self.predictor.data = list(data)
        self.handed = True

    def state_dict(self) -> dict[str, Any]:
        """Controller, optimizer, baseline, sampling generator, predictor data, rng and stage bookkeeping."""
        return {
            **super().state_dict(),
            **self.policy.state_dict(),
            **self.predictor.state_dict(),
            "stages": self.stages.state_dict(),
            "warm_prior": self.warm_prior,
            "handed": self.handed,
            "round": {
                "queue": [(list(a.choices), a.blocks) for a in self.queue],
                "pending": self.pending,
                "told": [ev.to_dict() for ev in self.told],
            },
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (the predictor is refit on the restored data)."""
        super().load_state_dict(d)
        if d.get("warm_prior") is not None:  # a warm-started search: its prior comes back first
            self._use_prior(TransferPrior.from_state_dict(d["warm_prior"]))
            self.warm_prior = d["warm_prior"]
        self.policy.load_state_dict(d)
        self.stages.load_state_dict(d["stages"])
        if d.get("handed") and not self.handed:
            self._hand_over()
        self.predictor.load_state_dict(d)
        self.queue = [Arch(tuple(c), b) for c, b in d["round"]["queue"]]
        self.pending = int(d["round"]["pending"])
        self.told = [Evaluation.from_dict(e) for e in d["round"]["told"]]
