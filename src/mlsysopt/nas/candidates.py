"""What every NAS method needs to know about a candidate before it spends an evaluation on it.

:class:`Candidates` answers, once per architecture, whether it is in the space, what its identity is (table spaces
map equivalent cells to one key) and what its resources are, so a method never proposes an architecture twice and,
in hard-constraint mode, never proposes an infeasible one. Only the resources the constraints read are asked for;
the space's ``costly_resources`` among them (a timed latency) are fetched only when :meth:`Candidates.feasible`
needs them, so a method can filter on the cheap ones first (:meth:`Candidates.feasible_cheap`,
``admissible(arch, costly=False)``) and check the costly ones for the few candidates it is about to propose.

A limit on a costly resource that no architecture meets would otherwise cost every draw of every ask a costly
check (2,000 draws of 0.05 s each per ask with a predicted latency): after :data:`UNREACHABLE_AFTER` costly checks
that all missed it, :meth:`Candidates.feasible` raises :class:`~mlsysopt.errors.ConstraintUnreachable` naming the
closest value seen, and the search driver stops with it. In hard mode no evaluation is lost: none can have run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import Any

from mlsysopt.errors import ConstraintUnreachable, InvalidArchitecture
from mlsysopt.nas.constraints import RESOURCES, Constraints
from mlsysopt.nas.spaces.base import Arch, SearchSpace

#: Costly checks that all miss a limit before it is called out of reach: if a fraction p of the space met it, 500
#: uniform draws would all miss with probability (1 - p) ** 500, under 5% for p >= 0.6%.
UNREACHABLE_AFTER = 500


class Candidates:
    """Mixin of :class:`~mlsysopt.nas.searcher.Searcher`: cached validity, identity, resources and feasibility.

    Reads ``self.space``, ``self.constraints`` and ``self.cfg.tries``; :meth:`init_candidates` starts it.
    """

    space: SearchSpace
    constraints: Constraints
    cfg: Any

    def init_candidates(self) -> None:
        """Start the bookkeeping: nothing proposed, nothing cached, no constraint known to be met."""
        self.proposed: list[Arch] = []  # every architecture ever proposed, in order
        self.seen: set[Hashable] = set()  # their keys: no architecture (or table-equivalent one) is proposed twice
        self._cache: dict[Arch, tuple[bool, Hashable, dict[str, float]]] = {}
        needed = self.constraints.resources
        costly = set(getattr(self.space, "costly_resources", ()))
        measured = set(getattr(self.space, "measured", ()))  # only an evaluation reports them: judged after it
        self._cheap_names = tuple(r for r in needed if r not in costly and r not in measured)
        self._costly_names = tuple(r for r in needed if r in costly and r not in measured)
        self._before = self._cheap_names + self._costly_names  # what feasibility is judged on before evaluating
        self._full: dict[Arch, dict[str, float]] = {}  # cheap + costly resources, once the costly ones were fetched
        self._cheap_ok: dict[Arch, bool] = {}  # feasible_cheap of every valid architecture looked at
        # constraint -> met by any architecture looked at (None: its resource was never looked at, e.g. a costly one)
        self.met: dict[str, bool | None] = dict.fromkeys(self.constraints.names)
        self.costly_checked = 0  # architectures whose costly resources were fetched
        # constraint on a costly resource -> (relative violation, usage) of the closest architecture checked
        self.closest: dict[str, tuple[float, float]] = {}

    def _info(self, arch: Arch) -> tuple[bool, Hashable, dict[str, float]]:
        """(valid, key, cheap resources) of ``arch``, computed once: table spaces make each of these a look-up."""
        info = self._cache.get(arch)
        if info is None:
            key: Hashable = arch
            try:
                if callable(getattr(self.space, "key", None)):
                    key = self.space.key(arch)  # checks the architecture too
                else:
                    self.space.check(arch)
            except InvalidArchitecture:
                info = (False, arch, {})
            else:
                info = (True, key, dict(self.space.resources_for(arch, self._cheap_names)))
                self._note_met(info[2])
            self._cache[arch] = info
        return info

    def _note_met(self, res: dict[str, float]) -> None:
        for c in self.constraints.constraints:
            if c.resource in res:
                self.met[c.name] = bool(self.met[c.name]) or c.satisfied(res)

    def valid(self, arch: Arch) -> bool:
        """Whether ``arch`` is in the space (``space.is_valid``, cached)."""
        return self._info(arch)[0]

    def key(self, arch: Arch) -> Hashable:
        """Identity for de-duplication: ``space.key(arch)`` when the space has one (equivalent cells), else ``arch``."""
        return self._info(arch)[1]

    def resources(self, arch: Arch) -> dict[str, float]:
        """The resources the constraints read (costly ones fetched on first use; cached)."""
        valid, _, res = self._info(arch)
        if not valid:
            return dict(self.space.resources(arch))  # raises InvalidArchitecture with the reason
        if not self._costly_names:
            return res
        if arch not in self._full:
            self._full[arch] = full = {**res, **self.space.resources_for(arch, self.constraints.resources)}
            self._note_met(full)
            self.costly_checked += 1
            for c in self.constraints.constraints:
                value = c.value(full)
                if c.resource in self._costly_names and value < self.closest.get(c.name, (math.inf, 0.0))[0]:
                    self.closest[c.name] = (value, c.usage(full))
        return self._full[arch]

    def checked_costly(self, arch: Arch) -> bool:
        """Whether ``arch``'s costly resources were fetched already (or it has none to fetch)."""
        return not self._costly_names or arch in self._full

    def feasible(self, arch: Arch) -> bool:
        """Whether ``arch`` meets every constraint the space can judge before evaluating it (costly resources are
        fetched only if the cheap ones pass; those only an evaluation measures are judged by :meth:`usable`)."""
        if not self._costly_names:
            return self.feasible_cheap(arch)  # the same question, answered once per architecture
        if not self.feasible_cheap(arch):
            return False
        ok = self.constraints.feasible(self.resources(arch), only=self._before)
        if not ok and self.constraints.hard and self.costly_checked >= UNREACHABLE_AFTER:
            self._give_up_if_unreachable()
        return ok

    def _give_up_if_unreachable(self) -> None:
        """Raise :class:`~mlsysopt.errors.ConstraintUnreachable` if a costly constraint was never met."""
        never = [c for c in self.constraints.constraints if c.resource in self._costly_names and self.met.get(c.name)
                 is False]  # fmt: skip
        if not never:
            return
        parts = []
        for c in never:
            usage = self.closest.get(c.name, (math.nan, math.nan))[1]
            parts.append(f"{c.name} (limit {c.limit:g}; the closest was {c.resource} {usage:.4g})")
        name = never[0].name  # the built-in limits have their own flag, any other is a --limit
        flag = f"--{name.replace('_', '-')}" if name in RESOURCES else f"--limit {name}=V"
        raise ConstraintUnreachable(
            f"none of the {self.costly_checked} architectures checked met {', '.join(parts)}: the limit looks out of "
            f"reach for space '{self.space.name}': raise it ({flag} on the command line) or search a space of "
            "smaller models"
        )

    def feasible_cheap(self, arch: Arch) -> bool:
        """Whether ``arch`` meets every constraint on a cheap resource (all of them when none is costly)."""
        ok = self._cheap_ok.get(arch)
        if ok is None:
            valid, _, res = self._info(arch)
            if not self._costly_names:
                if not valid:
                    return self.constraints.feasible(self.resources(arch))  # raises InvalidArchitecture: why
                ok = self.constraints.feasible(res, only=self._before)
            else:
                ok = self.constraints.feasible(res, only=self._cheap_names)
            self._cheap_ok[arch] = ok
        return ok

    def fresh(self, arch: Arch) -> bool:
        """Valid and never proposed (nor any equivalent architecture)."""
        return self.valid(arch) and self.key(arch) not in self.seen

    def admissible(self, arch: Arch, costly: bool = True) -> bool:
        """Fresh and (in hard mode) feasible: worth spending an evaluation on (``costly=False``: on cheap resources)."""
        if not self.fresh(arch):
            return False
        return not self.constraints.hard or (self.feasible(arch) if costly else self.feasible_cheap(arch))

    def mark(self, archs: list[Arch]) -> None:
        """Record ``archs`` as proposed."""
        for a in archs:
            self.proposed.append(a)
            self.seen.add(self.key(a))

    def draw(self, gen: Callable[[], Arch], n: int) -> list[Arch]:
        """Up to ``n`` admissible architectures from ``gen`` (at most ``cfg.tries`` draws), marked as proposed."""
        out: list[Arch] = []
        keys: set[Hashable] = set()
        for _ in range(max(self.cfg.tries, 1)):
            if len(out) >= n:
                break
            arch = gen()
            if self.admissible(arch) and self.key(arch) not in keys:
                out.append(arch)
                keys.add(self.key(arch))
        self.mark(out)
        return out
