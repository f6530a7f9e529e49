"""Named resource constraints for NAS: each is a float where <= 0 means satisfied (Optuna's convention).

``max_params``, ``max_flops`` and ``max_latency_ms`` bound a resource from above, ``min_intensity`` (FLOPs/byte)
from below, and ``max_<resource>`` / ``min_<resource>`` any other resource a space reports (your own space's
``memory_mb``, a cost model's predicted latency); the value is the relative violation, ``(usage - limit) / limit``
for a maximum and ``(limit - usage) / limit`` for a minimum, so constraints of different units compare on one scale.

Two modes:

* ``hard``: an architecture is feasible only if every value is <= 0; searches filter candidates on the cheap
  ``space.resources(arch)`` before evaluating and never return an infeasible one. ``reward`` is the performance
  of a feasible architecture and ``penalty`` otherwise.
* ``soft`` (MnasNet): ``reward = perf · Π_c factor_c`` with one factor per constraint. For a maximum the factor is
  ``(usage / limit) ** weight`` when ``usage > limit`` and 1 otherwise; for a minimum it is
  ``(limit / usage) ** weight`` when ``usage < limit`` and 1 otherwise (``weight = -0.07``). This is MnasNet's
  "hard-ish" variant (α = 0, β = w): satisfying a constraint earns nothing extra, so it does not push the search
  towards needlessly small models, and every violation costs performance smoothly.

A missing or NaN resource counts as a violation (unknown usage is never assumed to fit).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlsysopt.errors import InvalidConstraint

# constraint name -> (resource it reads, "max" | "min"): the built-in spaces' resources
RESOURCES: dict[str, tuple[str, str]] = {
    "max_params": ("params", "max"),
    "max_flops": ("flops", "max"),
    "max_latency_ms": ("latency_ms", "max"),
    "min_intensity": ("intensity", "min"),
}
MODES = ("hard", "soft")


def parse_name(name: str) -> tuple[str, str] | None:
    """``(resource, "max" | "min")`` of a constraint name: one of :data:`RESOURCES`, or ``max_<resource>`` /
    ``min_<resource>`` for any resource a space reports (e.g. ``max_memory_mb``); None when it is neither."""
    if name in RESOURCES:
        return RESOURCES[name]
    kind, sep, resource = str(name).partition("_")
    if sep and kind in ("max", "min") and resource.isidentifier():
        return resource, kind
    return None


@dataclass(frozen=True)
class Constraint:
    """One named bound on one resource, e.g. ``Constraint("max_params", 1e6)``.

    Args:
        name: ``max_params``, ``max_flops``, ``max_latency_ms``, ``min_intensity``, or ``max_<resource>`` /
            ``min_<resource>`` for any resource a space reports.
        limit: The bound, in the resource's unit (parameters, FLOPs, ms, FLOPs/byte); finite and > 0.

    Raises:
        InvalidConstraint: For an unknown name or a limit that is not a finite number > 0.
    """

    name: str
    limit: float

    def __post_init__(self) -> None:
        if parse_name(self.name) is None:
            raise InvalidConstraint(
                f"unknown constraint '{self.name}' (choose from: {', '.join(RESOURCES)}, or max_<resource> / "
                "min_<resource> for a resource your space reports)"
            )
        try:
            limit = float(self.limit)
        except (TypeError, ValueError):
            raise InvalidConstraint(f"{self.name}: limit must be a number, got {self.limit!r}") from None
        if not math.isfinite(limit) or limit <= 0:
            raise InvalidConstraint(f"{self.name}: limit must be a finite number > 0, got {self.limit!r}")
        object.__setattr__(self, "limit", limit)

    @property
    def resource(self) -> str:
        """The resource this constraint reads (``params``, ``flops``, ``latency_ms`` or ``intensity``)."""
        return parse_name(self.name)[0]  # type: ignore[index]

    @property
    def kind(self) -> str:
        """``"max"`` (usage must stay below the limit) or ``"min"`` (usage must reach it)."""
        return parse_name(self.name)[1]  # type: ignore[index]

    def usage(self, resources: Mapping[str, float]) -> float:
        """The resource's value in ``resources`` (NaN when missing)."""
        v = resources.get(self.resource)
        return float("nan") if v is None else float(v)

    def value(self, resources: Mapping[str, float]) -> float:
        """Relative violation: <= 0 satisfied; NaN (counted as violated) when the resource is unknown."""
        u = self.usage(resources)
        return (u - self.limit) / self.limit if self.kind == "max" else (self.limit - u) / self.limit

    def satisfied(self, resources: Mapping[str, float]) -> bool:
        """Whether ``value(resources) <= 0`` (False for an unknown resource)."""
        return self.value(resources) <= 0

    def factor(self, resources: Mapping[str, float], weight: float) -> float:
        """MnasNet soft-reward factor: 1 when satisfied, ``(excess ratio) ** weight`` (< 1) when violated."""
        u = self.usage(resources)
        if math.isnan(u):
            return 0.0
        if self.satisfied(resources):
            return 1.0
        ratio = u / self.limit if self.kind == "max" else (self.limit / u if u > 0 else math.inf)
        return 0.0 if math.isinf(ratio) else ratio**weight

    def describe(self) -> str:
        """E.g. ``"params <= 1.2"`` / ``"intensity >= 100"``."""
        return f"{self.resource} {'<=' if self.kind == 'max' else '>='} {self.limit:g}"


class Constraints:
    """Several constraints at once, in ``hard`` or ``soft`` mode (see the module docstring).

    Args:
        constraints: The constraints, each name at most once.
        mode: ``"hard"`` (infeasible architectures are never returned) or ``"soft"`` (MnasNet reward).
        weight: Soft-mode exponent, <= 0 (MnasNet's -0.07).
        penalty: Reward of an infeasible (hard mode) or failed architecture.

    Raises:
        InvalidConstraint: For an unknown mode, a positive or non-finite weight, or a repeated constraint.
    """

    def __init__(
        self,
        constraints: Sequence[Constraint] = (),
        mode: str = "hard",
        weight: float = -0.07,
        penalty: float = 0.0,
    ) -> None:
        if mode not in MODES:
            raise InvalidConstraint(f"unknown constraint mode '{mode}' (choose from: {', '.join(MODES)})")
        if not math.isfinite(weight) or weight > 0:
            raise InvalidConstraint(f"soft-constraint weight must be <= 0 (MnasNet uses -0.07), got {weight}")
        names = [c.name for c in constraints]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidConstraint(f"constraint given more than once: {', '.join(dup)}")
        self.constraints = tuple(constraints)
        self.mode = mode
        self.weight = float(weight)
        self.penalty = float(penalty)

    @classmethod
    def from_limits(cls, mode: str = "hard", weight: float = -0.07, **limits: float | None) -> Constraints:
        """``Constraints.from_limits(max_params=1e6, max_latency_ms=None, ...)``; ``None`` limits are skipped."""
        return cls([Constraint(k, v) for k, v in limits.items() if v is not None], mode=mode, weight=weight)

    @property
    def hard(self) -> bool:
        """Whether infeasible architectures must never be evaluated or returned."""
        return self.mode == "hard"

    @property
    def names(self) -> list[str]:
        """The constraint names, in order."""
        return [c.name for c in self.constraints]

    def __len__(self) -> int:
        return len(self.constraints)

    def values(self, resources: Mapping[str, float]) -> dict[str, float]:
        """``{name: value}``, each <= 0 when satisfied."""
        return {c.name: c.value(resources) for c in self.constraints}

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources the constraints read, in order (each once)."""
        return tuple(dict.fromkeys(c.resource for c in self.constraints))

    def feasible(self, resources: Mapping[str, float], only: Collection[str] | None = None) -> bool:
        """Whether every constraint is satisfied (with ``only``: every constraint on one of those resources)."""
        return all(c.satisfied(resources) for c in self.constraints if only is None or c.resource in only)

    def violated(self, resources: Mapping[str, float]) -> list[str]:
        """Names of the constraints ``resources`` violate."""
        return [c.name for c in self.constraints if not c.satisfied(resources)]

    def factor(self, resources: Mapping[str, float]) -> float:
        """Product of the MnasNet factors of every constraint (1 when all are satisfied)."""
        return math.prod(c.factor(resources, self.weight) for c in self.constraints)

    def reward(self, perf: float, resources: Mapping[str, float]) -> float:
        """Hard: ``perf`` if feasible else ``penalty``; soft: ``perf · Π factor`` (NaN perf gives ``penalty``)."""
        if perf is None or math.isnan(perf):
            return self.penalty
        if self.hard:
            return float(perf) if self.feasible(resources) else self.penalty
        f = self.factor(resources)
        # a negative performance (e.g. -loss) must get worse, not better, when a constraint is violated
        return float(perf) * f if perf >= 0 else (float(perf) / f if f > 0 else -math.inf)

    def check_resources(self, space: Any) -> None:
        """Raise InvalidConstraint if a constraint reads a resource ``space`` does not report."""
        have = tuple(getattr(space, "resource_names", ()))
        for c in self.constraints:
            if c.resource not in have:
                raise InvalidConstraint(
                    f"constraint {c.name} needs resource '{c.resource}', which space {getattr(space, 'name', space)!r} "
                    f"does not report (it reports: {', '.join(have) or 'nothing'})"
                )

    def describe(self) -> str:
        """E.g. ``"hard: params <= 1.2, latency_ms <= 3.5"``."""
        body = ", ".join(c.describe() for c in self.constraints) or "none"
        return f"{self.mode}: {body}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready ``{"mode", "weight", "penalty", "limits": {name: limit}}``."""
        return {
            "mode": self.mode,
            "weight": self.weight,
            "penalty": self.penalty,
            "limits": {c.name: c.limit for c in self.constraints},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Constraints:
        """Inverse of :meth:`to_dict`."""
        cons = [Constraint(k, v) for k, v in dict(d.get("limits", {})).items()]
        return cls(cons, mode=d.get("mode", "hard"), weight=d.get("weight", -0.07), penalty=d.get("penalty", 0.0))

    def __repr__(self) -> str:
        return f"Constraints({self.describe()})"
