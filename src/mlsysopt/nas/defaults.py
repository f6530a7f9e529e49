"""Which method ``nas search`` and :class:`~mlsysopt.nas.Study` run when none is named: one rule, by budget class.

The budget a user gives falls in a class -- small (< 20 evaluations), medium (20 to 59) or large (>= 60) -- and the
default of each class is the method with the lowest mean *validation* regret on the tuning problems at that class's
representative budget (10, 30, 100): NAS-Bench-Graph's physics, arxiv and proteins tables, both constraint regimes,
never the held-out datasets the benchmark reports (``benchmarks/nas.py --tune``; the figures are in BENCHMARKS.md
and docs/guides/nas.md). The held-out run (``benchmarks/nas.py``) then checks each default against every baseline.
"""

from __future__ import annotations

from typing import Any

from mlsysopt.errors import MlsysoptError

#: (class, the largest budget in it; None: no end), smallest first
BUDGET_CLASSES: tuple[tuple[str, int | None], ...] = (("small", 19), ("medium", 59), ("large", None))
#: The budget each class was tuned at (its representative)
CLASS_BUDGETS = {"small": 10, "medium": 30, "large": 100}
#: The default method of each budget class (see the module docstring for how it was chosen)
DEFAULT_METHODS = {"small": "zero_shot", "medium": "epnas", "large": "epnas"}
#: Defaults that need a transfer prior, and what runs instead on a space without one (your own space, no --warm-start)
NEEDS_PRIOR = ("zero_shot",)
FALLBACK = "epnas"
#: Why, in one line per class (shown by ``--help`` and the docs): mean validation regret on the tuning tables
REASONS = {
    "small": "0.0111 at 10 evaluations, then epnas 0.0118, bananas 0.0134; on a space without a prior: epnas",
    "medium": "0.0042 at 30, then bananas 0.0052, epnas_cold 0.0064",
    "large": "0.0016 at 100, then epnas_cold 0.0023, zero_shot 0.0029, bananas 0.0030",
}
AUTO = "auto"


def budget_class(budget: int) -> str:
    """The class (``small``, ``medium`` or ``large``) a budget of ``budget`` evaluations falls in.

    Args:
        budget: Evaluations, >= 1.

    Returns:
        str: ``"small"``, ``"medium"`` or ``"large"``.

    Raises:
        MlsysoptError: If ``budget`` is not an integer >= 1.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise MlsysoptError(f"budget must be an integer >= 1 (evaluations), got {budget!r}")
    for name, top in BUDGET_CLASSES:
        if top is None or budget <= top:
            return name
    raise AssertionError("unreachable: the last class has no end")


def default_method(budget: int) -> str:
    """The method ``nas search`` runs for ``--budget budget`` when ``--method`` is ``auto`` (the default).

    Args:
        budget: Evaluations, >= 1.

    Returns:
        str: A method name of :data:`mlsysopt.nas.METHOD_NAMES`.
    """
    return DEFAULT_METHODS[budget_class(budget)]


def resolve_method(method: str | None, budget: int, space: Any = None, prior: Any = None) -> str:
    """``method`` itself, or the budget class's default when it is ``"auto"`` or None; a default that needs a
    transfer prior gives way to :data:`FALLBACK` when neither ``prior`` nor ``space`` has one (``space``: a space
    object, whose ``default_prior`` says, or a ``--space`` string, where only ``nasbench-graph:`` tables have one;
    None: not known yet, no fallback)."""
    if method not in (None, AUTO):
        return str(method)
    chosen = default_method(budget)
    if isinstance(space, str):
        has_own = space.startswith("nasbench-graph:")
    else:
        has_own = callable(getattr(space, "default_prior", None))  # (NAS-Bench-Graph's: the other tables)
    if chosen in NEEDS_PRIOR and space is not None and prior is None and not has_own:
        return FALLBACK
    return chosen


def rule_text() -> str:
    """The rule in one line per class, e.g. ``budget < 20 (small): epnas -- why``."""
    lines, lo = [], 1
    for name, top in BUDGET_CLASSES:
        span = f"{lo}-{top}" if top is not None else f">= {lo}"
        lines.append(f"budget {span} ({name}): {DEFAULT_METHODS[name]} -- {REASONS[name]}")
        lo = (top or 0) + 1
    return "; ".join(lines)
