"""Which method ``nas search`` and :class:`~mlsysopt.nas.Study` run when none is named: one rule, by budget class.

The budget a user gives falls in a class -- small (< 20 evaluations), medium (20 to 59) or large (>= 60) -- and the
default of each class is the method with the lowest mean *validation* regret on the tuning problems at that class's
representative budget (10, 30, 100): NAS-Bench-Graph's physics, arxiv and proteins tables, both constraint regimes,
never the held-out datasets the benchmark reports (``benchmarks/nas.py --tune``; the figures are in BENCHMARKS.md
and docs/guides/nas.md). The held-out run (``benchmarks/nas.py``) then checks each default against every baseline.
"""

from __future__ import annotations

from mlsysopt.errors import MlsysoptError

#: (class, the largest budget in it; None: no end), smallest first
BUDGET_CLASSES: tuple[tuple[str, int | None], ...] = (("small", 19), ("medium", 59), ("large", None))
#: The budget each class was tuned at (its representative)
CLASS_BUDGETS = {"small": 10, "medium": 30, "large": 100}
#: The default method of each budget class (see the module docstring for how it was chosen)
DEFAULT_METHODS = {"small": "epnas", "medium": "epnas", "large": "epnas"}
#: Why, in one line per class (shown by ``--help`` and the docs)
REASONS = {
    "small": "the transfer prior ranks well before the target's own evaluations can",
    "medium": "the prior hands over to the cold predictor after 30 evaluations",
    "large": "the prior hands over to the cold predictor after 30 evaluations",
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


def resolve_method(method: str | None, budget: int) -> str:
    """``method`` itself, or the budget class's default when it is ``"auto"`` or None."""
    return default_method(budget) if method in (None, AUTO) else str(method)


def rule_text() -> str:
    """The rule in one line per class, e.g. ``budget < 20 (small): epnas -- why``."""
    lines, lo = [], 1
    for name, top in BUDGET_CLASSES:
        span = f"{lo}-{top}" if top is not None else f">= {lo}"
        lines.append(f"budget {span} ({name}): {DEFAULT_METHODS[name]} -- {REASONS[name]}")
        lo = (top or 0) + 1
    return "; ".join(lines)
