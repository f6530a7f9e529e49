"""Regularized evolution (Real et al., AAAI 2019): tournament selection, one-decision mutation, age-based removal.

The first ``population`` candidates are uniform samples; after that each candidate is a mutation of the best of
``sample`` random population members (one decision changed to a different option). A told architecture joins the
population and the *oldest* member leaves once it is over size (ageing, not the worst, is what regularizes).
Failed and infeasible evaluations never join. In hard mode mutations that break a constraint are redrawn.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.nas.knobs import MAX_POOL, knob
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class EvolutionConfig(SearcherConfig):
    """Population size and tournament size (Real et al. use 100/25 for large budgets; scaled down here).

    Args:
        tries: Random draws per ask before giving up on finding a new admissible candidate, 1 to 1e6.
        population: Population size (also the number of initial random samples), >= 1.
        sample: Tournament size, >= 1.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    population: int = knob(20, 1, MAX_POOL)
    sample: int = knob(5, 1, MAX_POOL)


class RegularizedEvolution(Searcher[EvolutionConfig]):
    """Aging evolution over architectures of ``max_blocks`` blocks (of any count where the block count is a choice
    of the space: :meth:`~mlsysopt.nas.spaces.base.SearchSpace.mutate`).

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`EvolutionConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "evolution"
    Config: ClassVar[type[SearcherConfig]] = EvolutionConfig

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        self.population: deque[tuple[Arch, float]] = deque()
        self.asked = 0

    def _mutate(self) -> Arch:
        cfg = self.cfg
        idx = self.rng.choice(len(self.population), min(cfg.sample, len(self.population)), replace=False)
        parent = max((self.population[i] for i in sorted(idx)), key=lambda p: p[1])[0]
        return self.space.mutate(parent, self.rng)

    def _next(self) -> Arch:
        cfg = self.cfg
        if self.asked < cfg.population or not self.population:
            return self.space.sample(self.rng)
        return self._mutate()

    def ask(self, n: int) -> list[Arch]:
        """Random members until the population is full, then mutated tournament winners."""
        out = []
        for _ in range(n):
            got = self.draw(self._next, 1)
            if not got:
                break
            out += got
            self.asked += 1
        return out

    def tell(self, evals: list[Evaluation]) -> None:
        """Add usable evaluations to the population; drop the oldest beyond its size."""
        cfg = self.cfg
        for ev in evals:
            if self.usable(ev):
                self.population.append((ev.arch, self.reward(ev)))
                while len(self.population) > cfg.population:
                    self.population.popleft()

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the population (oldest first) and the proposal count."""
        pop = [(list(a.choices), a.blocks, r) for a, r in self.population]
        return {**super().state_dict(), "population": pop, "asked": self.asked}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)
        self.population = deque((Arch(tuple(c), b), float(r)) for c, b, r in d["population"])
        self.asked = int(d["asked"])
