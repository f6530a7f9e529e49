"""Local search (White, Nolen, Ravi & Savani, "Exploring the loss landscape in neural architecture search", UAI 2021):
steepest ascent over one-edit neighbours, restarted at a random architecture from every local optimum.

Start from a uniformly random architecture; evaluate every (fresh, and in hard mode feasible) neighbour of the
current architecture -- one decision changed to another option -- in random order; once the whole neighbourhood is
told, move to its best member if it beats the current one, else restart from a new random architecture. On
NAS-Bench-201 this finds the optimum in ~127 queries, which makes it the baseline to beat on tabular benchmarks.
Architectures have ``max_blocks`` blocks, or any count where the block count is a choice of the space (a user's
``Blocks(min, max)``: then dropping the last block and repeating it are one edit too). With ``first_improvement``
the move happens at the first better neighbour (a cheaper variant, not the paper's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from mlsysopt.nas.knobs import knob
from mlsysopt.nas.searcher import Searcher, SearcherConfig
from mlsysopt.nas.spaces.base import Arch, Evaluation


@dataclass
class LocalSearchConfig(SearcherConfig):
    """Steepest ascent (the paper's) or first improvement.

    Args:
        tries: Random draws per ask before giving up on finding a new admissible candidate, 1 to 1e6.
        first_improvement: Move at the first better neighbour instead of the best of the whole neighbourhood.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    first_improvement: bool = knob(False)


class LocalSearch(Searcher[LocalSearchConfig]):
    """Steepest-ascent local search with random restarts.

    Args:
        space, constraints, budget, seed: as :class:`~mlsysopt.nas.searcher.Searcher` (which also says
            what it raises).
        config: a :class:`LocalSearchConfig` (None: its defaults).
        prior: Ignored by this method (it reads no prior).
    """

    name = "local_search"
    Config: ClassVar[type[SearcherConfig]] = LocalSearchConfig

    def setup(self) -> None:
        """The method's state, built from ``self.cfg`` once the base searcher is ready."""
        self.current: tuple[Arch, float] | None = None  # the architecture whose neighbourhood is being evaluated
        self.queue: list[Arch] = []  # its neighbours not handed out yet
        self.best_nb: tuple[Arch, float] | None = None  # the best told neighbour so far
        self.pending = 0  # handed out, not told yet
        self.extra: set[Arch] = set()  # random samples handed out while waiting for tells (not neighbours)

    def _restart(self) -> list[Arch]:
        self.current, self.queue, self.best_nb = None, [], None
        return self.draw(lambda: self.space.sample(self.rng), 1)

    def _neighbourhood(self, arch: Arch) -> list[Arch]:
        out = [a for a in self.space.neighbours(arch, depth=True) if self.admissible(a, costly=False)]
        order = self.rng.permutation(len(out))
        seen: set[Any] = set()
        shuffled = []
        for i in order:
            if self.key(out[i]) not in seen:
                seen.add(self.key(out[i]))
                shuffled.append(out[i])
        return shuffled

    def ask(self, n: int) -> list[Arch]:
        """The next ``n`` unevaluated neighbours of the current architecture (or a restart's random one)."""
        out: list[Arch] = []
        while len(out) < n:
            if self.current is None:
                if self.pending or out:  # the start (or restart) point is still being evaluated
                    break
                got = self._restart()
                if not got:
                    break
                out += got
                break
            while self.queue and len(out) < n:
                arch = self.queue.pop(0)
                if self.admissible(arch):
                    self.mark([arch])
                    out.append(arch)
            if len(out) < n and not self.queue and not self.pending and not out:
                self._move()  # the neighbourhood is exhausted and told: move or restart, then go on
                continue
            break
        if not out and self.pending:  # asked again before the tells came (an ask/tell user): explore meanwhile
            out = self.draw(lambda: self.space.sample(self.rng), n)
            self.extra.update(out)
        self.pending += len(out)
        return out

    def _move(self) -> None:
        cur, nb = self.current, self.best_nb
        if cur is not None and nb is not None and nb[1] > cur[1]:
            self._start_at(nb)
        else:
            self.current = None

    def _start_at(self, point: tuple[Arch, float]) -> None:
        self.current, self.best_nb = point, None
        self.queue = self._neighbourhood(point[0])

    def tell(self, evals: list[Evaluation]) -> None:
        """Record the neighbours' rewards; a told start point becomes the current architecture."""
        self.pending = max(self.pending - len(evals), 0)
        for ev in evals:
            r = self.reward(ev) if self.usable(ev) else None
            if ev.arch in self.extra:
                self.extra.discard(ev.arch)
                if self.current is None and r is not None:
                    self._start_at((ev.arch, r))
                continue
            if self.current is None:
                if r is not None:
                    self._start_at((ev.arch, r))
                continue
            if r is not None and (self.best_nb is None or r > self.best_nb[1]):
                self.best_nb = (ev.arch, r)
                if self.cfg.first_improvement and r > self.current[1]:
                    self._start_at((ev.arch, r))
        if self.current is not None and not self.queue and not self.pending:
            self._move()

    def state_dict(self) -> dict[str, Any]:
        """Base state plus the current architecture, its untried neighbours and the best told one."""

        def point(p: tuple[Arch, float] | None) -> Any:
            return None if p is None else (list(p[0].choices), p[0].blocks, p[1])

        return {
            **super().state_dict(),
            "current": point(self.current),
            "queue": [(list(a.choices), a.blocks) for a in self.queue],
            "best_nb": point(self.best_nb),
            "pending": self.pending,
            "extra": [(list(a.choices), a.blocks) for a in self.extra],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        super().load_state_dict(d)

        def point(p: Any) -> tuple[Arch, float] | None:
            return None if p is None else (Arch(tuple(p[0]), p[1]), float(p[2]))

        self.current, self.best_nb = point(d["current"]), point(d["best_nb"])
        self.queue = [Arch(tuple(c), b) for c, b in d["queue"]]
        self.pending = int(d["pending"])
        self.extra = {Arch(tuple(c), b) for c, b in d["extra"]}
