"""EPNAS (Zhou et al., BMVC 2019): a REINFORCE LSTM controller, progressive stages and a performance predictor.

The whole algorithm, read top to bottom (every knob is in :class:`EPNASConfig`):

1. **Stages.** The search grows architectures from ``space.min_blocks`` to ``space.max_blocks`` blocks, one stage per
   block count. The paper gives no budget split, so :func:`stage_budgets` gives stage ``s`` (0-based) a share of the
   evaluation budget proportional to ``s + 1`` (``stage_split="linear"``): later stages hold larger spaces (every
   extra block multiplies it) and produce the architecture that is returned, while early stages are cheap to learn
   from because the predictor sees every block count through the zero-padded encoding. ``"equal"`` and ``"last"``
   (everything in the final stage) are the alternatives.
2. **Candidates.** Each round the controller samples architectures of the current stage's block count, a batch of
   ``candidates`` per LSTM pass, until ``candidates`` of them are admissible (or ``tries`` samples were drawn).
   Invalid, already-proposed and -- with hard constraints -- infeasible ones (judged on the resources the space
   gives without training, ``space.resources_for``) are dropped before any evaluation; a *costly* resource such as
   the CNN space's timed latency is left out here and checked only in step 3. Infeasible and invalid samples are
   remembered and, at most as many as were evaluated, enter the next controller update with a fixed advantage
   ``penalty`` (−1: one reward spread below the baseline), so the controller learns where the feasible region is
   without drowning the performance signal. A stage whose block count has nothing fresh left hands its budget to
   the next stage.
   With ``grow > 0`` that fraction of every batch instead completes prefixes of the ``beam`` best architectures so
   far (PNAS's "expand the top K": a smaller one is grown to this stage's blocks, a full one gets a random suffix
   re-sampled), the controller choosing the rest conditioned on the prefix.
3. **Ranking.** Once ``warmup`` architectures have been evaluated, the performance predictor (an MLP ensemble with a
   ranking loss, :mod:`mlsysopt.nas.predictor`) scores the survivors by ``mean + ucb · std`` and the round's top K
   are evaluated. By default K is ``ask``'s ``n``, the parallel batch (``run_search`` passes its ``workers``), so the
   top-K of the paper is exactly what the workers evaluate together. With ``round_size = K > 0`` the round size is
   fixed instead and ``ask`` hands the round out in pieces of ``n``: the search (and its result) is then the same
   on any number of workers, which only changes how fast it runs. Before the warm-up the controller's own samples
   are used. Costly constraints are checked lazily in ranked order, stopping at the K-th feasible candidate (those
   found infeasible join the penalised samples); if they reject candidates, up to :data:`RESAMPLES` pools are drawn.
4. **Updates.** Once a round is all told, ``tell`` adds every evaluated architecture to the predictor's data and
   refits it from scratch (once the data grew by ``refit_growth``: 10 %, so about 30 refits per 100 evaluations),
   then takes one REINFORCE step (moving-average baseline, entropy bonus; :mod:`mlsysopt.nas.controller`) on the
   rewards of the round's evaluated architectures (``Constraints.reward``: the validation performance under hard
   constraints, the MnasNet-weighted one under soft constraints; failures get the penalty). By default the
   controller learns only from real evaluations; ``predicted_update > 0`` adds a policy step on the predictor's
   scores of each round's whole pool.

The best feasible architecture so far is what ``run_search`` returns. ``state_dict`` holds the controller, its
optimizer and baseline, the sampling generator, the predictor's data (the predictor is a deterministic function of
it), the numpy rng, the stage bookkeeping and the round in progress, so a resumed search continues exactly where it
stopped.

The defaults were chosen on NAS-Bench-Graph datasets the benchmark does not use (physics, arxiv, proteins; median
latency and params limits, 100 evaluations, batches of 2) by *validation* regret, never test performance: the
candidates, UCB, learning-rate, entropy, temperature, warm-up, ensemble, ranking-loss, predicted-update and
stage-split variants tried all landed within seed noise of each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.controller import Controller, Reinforce, sample_archs
from mlsysopt.nas.predictor import PredictorConfig
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation

SPLITS = ("linear", "equal", "last")
RESAMPLES = 3  # candidate pools drawn per round at most, when costly constraints reject the top-ranked candidates


def stage_budgets(budget: int, n_stages: int, split: str = "linear") -> list[int]:
    """Evaluations per stage, summing to ``budget`` (rounding leftovers go to the last stage)."""
    if split not in SPLITS:
        raise MlsysoptError(f"unknown stage_split '{split}' (choose from: {', '.join(SPLITS)})")
    weights = {"linear": [s + 1 for s in range(n_stages)], "equal": [1] * n_stages, "last": [0] * (n_stages - 1) + [1]}
    w = np.asarray(weights[split], dtype=float)
    out = [int(x) for x in np.floor(budget * w / w.sum())]
    out[-1] += budget - sum(out)
    return out


class Stages:
    """The stage being searched; a stage whose fresh candidates run out hands its leftover budget to the next."""

    def __init__(self, blocks: list[int], quota: list[int]) -> None:
        self.blocks_list, self.quota = list(blocks), list(quota)
        self.index = self.used = 0
        self._skip_empty()

    @property
    def blocks(self) -> int:
        """Block count of the current stage."""
        return self.blocks_list[self.index]

    @property
    def last(self) -> bool:
        """Whether this is the final stage (it never ends)."""
        return self.index == len(self.quota) - 1

    def advance(self) -> bool:
        """Move to the next stage, carrying over the unused budget; False at the last stage."""
        if self.last:
            return False
        self.quota[self.index + 1] += max(self.quota[self.index] - self.used, 0)
        self.quota[self.index] = self.used
        self.index, self.used = self.index + 1, 0
        return True

    def consume(self, k: int) -> None:
        """Count ``k`` proposals against the current stage; move on when its budget is spent."""
        self.used += k
        self._skip_empty()

    def _skip_empty(self) -> None:
        while not self.last and self.used >= self.quota[self.index]:
            self.index, self.used = self.index + 1, self.used - self.quota[self.index]

    def state_dict(self) -> dict[str, Any]:
        """Index, proposals used in the stage, and the (carried-over) quotas."""
        return {"index": self.index, "used": self.used, "quota": list(self.quota)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.index, self.used, self.quota = int(d["index"]), int(d["used"]), list(d["quota"])


@dataclass
class EPNASConfig(PredictorConfig, SearcherConfig):
    """Every EPNAS knob, the predictor's included (see the module docstring for how the defaults were chosen)."""

    candidates: int = 100  # admissible controller samples the predictor ranks per round
    round_size: int = 0  # top-K evaluated per round (0: the driver's parallel batch, i.e. ``workers``)
    warmup: int = 10  # evaluations before the predictor ranks (until then: the controller's own order)
    stage_split: str = "linear"  # budget per stage: "linear" (∝ stage number), "equal" or "last"
    ucb: float = 0.0  # rank by predicted mean + ucb · ensemble std
    grow: float = 0.0  # fraction of each sample batch that completes prefixes of the best architectures so far
    beam: int = 5  # how many of the best architectures those prefixes come from
    hidden: int = 64  # controller LSTM width
    temperature: float = 5.0  # logits = tanh_c · tanh(x / temperature) (ENAS)
    tanh_c: float = 2.5
    lr: float = 0.01  # controller Adam learning rate
    entropy: float = 1e-3  # entropy bonus weight
    baseline_decay: float = 0.9  # moving-average baseline (and reward-spread) decay
    penalty: float = -1.0  # normalised advantage of infeasible, invalid or failed samples
    predicted_update: float = 0.0  # >0: also a policy step on the predictor's scores of each round's pool


class EPNAS(Searcher):
    """Efficient Progressive NAS: controller proposes, predictor ranks, the top ``n`` are evaluated in parallel."""

    name = "epnas"
    Config: ClassVar[type[SearcherConfig]] = EPNASConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        if cfg.candidates < 1 or cfg.warmup < 0 or cfg.round_size < 0:
            raise MlsysoptError("EPNAS needs candidates >= 1, warmup >= 0 and round_size >= 0")
        space = self.space
        blocks = list(range(space.min_blocks, space.max_blocks + 1))
        self.stages = Stages(blocks, stage_budgets(self.budget, len(blocks), cfg.stage_split))
        self.controller = Controller(
            space.decisions(space.max_blocks), cfg.hidden, cfg.temperature, cfg.tanh_c, seed=self.seed
        )
        self.pg = Reinforce(self.controller, lr=cfg.lr, entropy=cfg.entropy, baseline_decay=cfg.baseline_decay)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.predictor = cfg.make_predictor(self.seed)
        self.data: list[tuple[Arch, float]] = []  # (evaluated arch, reward): the predictor's training set
        self.infeasible: list[Arch] = []  # sampled but infeasible since the last update: penalised next update
        self.fitted_n = 0  # size of the data the predictor was last fit on
        self.queue: list[Arch] = []  # this round's candidates not handed out yet
        self.pending = 0  # handed out this round, not told yet
        self.told: list[Evaluation] = []  # this round's outcomes so far

    def ask(self, n: int) -> list[Arch]:
        """The next ``n`` candidates of the current round (a new round, of ``round_size`` or else ``n``, when done)."""
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        if not self.queue:
            self.queue = self._round(cfg.round_size or n)
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
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        if len(self.data) < max(cfg.warmup, 2) or not self.predictor.fitted or len(pool) <= n:
            return pool
        mean, std = self.predictor.predict_dist(np.stack([self.space.encode(a) for a in pool]))
        score = mean + cfg.ucb * std
        if cfg.predicted_update and score.std() > 0:
            adv = torch.as_tensor((score - score.mean()) / score.std(), dtype=torch.float32)
            self.pg.step([a.choices for a in pool], cfg.predicted_update * adv)
        return [pool[i] for i in np.argsort(-score, kind="stable")]

    def _pick(self, ranked: list[Arch], n: int) -> list[Arch]:
        """The first ``n`` of ``ranked`` that meet the costly constraints too, checked lazily in rank order."""
        out: list[Arch] = []
        for arch in ranked:
            if len(out) >= n:
                break
            if self.constraints.hard and not self.feasible(arch):  # a no-op check without costly resources
                self.infeasible.append(arch)
            else:
                out.append(arch)
        return out

    def _candidates(self, n: int) -> list[Arch]:
        """Up to ``candidates`` fresh admissible controller samples of the current stage (``tries`` samples at most).

        Admissible on the cheap resources: costly ones (a timed latency) are checked later, only for the candidates
        the predictor ranks highest (:meth:`_pick`).
        """
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        blocks = self.stages.blocks
        options = self.space.decisions(blocks)
        pool: list[Arch] = []
        keys: set[Any] = set()
        for _ in range(max(1, cfg.tries // cfg.candidates)):
            before = len(pool)
            for arch in sample_archs(
                self.controller, options, blocks, cfg.candidates, self.gen, self._prefixes(blocks)
            ):
                if not self.valid(arch) or (self.constraints.hard and not self.feasible_cheap(arch)):
                    self.infeasible.append(arch)
                elif self.key(arch) not in self.seen and self.key(arch) not in keys:
                    pool.append(arch)
                    keys.add(self.key(arch))
            # enough to rank, or enough for this ask and a whole batch found nothing new (a small stage)
            if len(pool) >= max(n, cfg.candidates) or (len(pool) >= n and len(pool) == before):
                break
        return pool

    def _prefixes(self, blocks: int) -> list[tuple[int, ...]]:
        """Prefixes for a ``grow`` fraction of a batch: best architectures to grow, or to re-sample a suffix of."""
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        k = round(cfg.grow * cfg.candidates)
        if not k or not self.data:
            return []
        length = len(self.space.decisions(blocks))
        best = sorted(range(len(self.data)), key=lambda i: -self.data[i][1])[: cfg.beam]
        out = []
        for i in self.rng.choice(best, k):
            c = self.data[i][0].choices
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
        self.data += [(ev.arch, r) for ev, r in zip(good, rewards, strict=True)]
        penalised = [ev.arch.choices for ev in evals if not self.usable(ev)]
        n_pen = min(len(self.infeasible), len(evals))
        if n_pen:
            idx = self.rng.choice(len(self.infeasible), n_pen, replace=False)
            penalised += [self.infeasible[i].choices for i in sorted(idx)]
        self.infeasible = []
        self._refit()
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        self.pg.update([ev.arch.choices for ev in good], rewards, penalised, cfg.penalty)

    def _refit(self, n: int | None = None) -> None:
        """Fit on the first ``n`` data points (default: all, once they grew by ``refit_growth`` since the last fit)."""
        cfg: EPNASConfig = self.cfg  # type: ignore[assignment]
        if n is None:
            n = len(self.data)
            if n < max(cfg.warmup, 2) or not cfg.refit_due(n, self.fitted_n):
                return
        if n >= 2:
            X = np.stack([self.space.encode(a) for a, _ in self.data[:n]])
            self.predictor.fit(X, np.array([r for _, r in self.data[:n]]))
            self.fitted_n = n

    def state_dict(self) -> dict[str, Any]:
        """Controller, optimizer, baseline, sampling generator, predictor data, rng and stage bookkeeping."""
        return {
            **super().state_dict(),
            "pg": self.pg.state_dict(),
            "gen": self.gen.get_state(),
            "data": [(list(a.choices), a.blocks, r) for a, r in self.data],
            "infeasible": [(list(a.choices), a.blocks) for a in self.infeasible],
            "stages": self.stages.state_dict(),
            "fitted_n": self.fitted_n,
            "round": {
                "queue": [(list(a.choices), a.blocks) for a in self.queue],
                "pending": self.pending,
                "told": [ev.to_dict() for ev in self.told],
            },
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (the predictor is refit on the restored data)."""
        super().load_state_dict(d)
        self.pg.load_state_dict(d["pg"])
        self.gen.set_state(d["gen"])
        self.data = [(Arch(tuple(c), b), float(r)) for c, b, r in d["data"]]
        self.infeasible = [Arch(tuple(c), b) for c, b in d["infeasible"]]
        self.stages.load_state_dict(d["stages"])
        self._refit(int(d["fitted_n"]))
        self.queue = [Arch(tuple(c), b) for c, b in d["round"]["queue"]]
        self.pending = int(d["round"]["pending"])
        self.told = [Evaluation.from_dict(e) for e in d["round"]["told"]]
