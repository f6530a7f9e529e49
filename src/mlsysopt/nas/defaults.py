"""Which method ``nas search`` and :class:`~mlsysopt.nas.Study` run when none is named: one rule, by budget class.

The budget a user gives falls in a class -- small (< 20 evaluations), medium (20 to 59) or large (>= 60) -- and the
default of each class is, at that class's representative budget (10, 30, 100), the method with the lowest mean
*validation* regret on the tuning problems (NAS-Bench-Graph's physics, arxiv and proteins tables, both constraint
regimes; ``benchmarks/nas.py --tune``), among the methods whose transfer component earns its place: a method that
transfers a prior (:data:`TRANSFER_ABLATIONS`) is a candidate only where its ablation on the held-out tables (the
same search without the prior, paired by dataset, regime and seed) shows the prior lowers regret -- the 95% interval
of the ratio with / without below 1 (``benchmarks/nas.py``, key ``transfer_ablation``). :func:`choose_defaults` is
that rule; the figures are in BENCHMARKS.md and docs/guides/nas.md. The held-out run then checks each default
against every baseline.
"""

from __future__ import annotations

from typing import Any

from mlsysopt.errors import MlsysoptError

#: (class, the largest budget in it; None: no end), smallest first
BUDGET_CLASSES: tuple[tuple[str, int | None], ...] = (("small", 19), ("medium", 59), ("large", None))
#: The budget each class was tuned at (its representative)
CLASS_BUDGETS = {"small": 10, "medium": 30, "large": 100}
#: A method that transfers a prior -> the same search without it (the ablation that decides whether it may be a default)
TRANSFER_ABLATIONS = {"epnas": "epnas_cold", "zero_shot": "random", "bananas_prior": "bananas"}
#: The default method of each budget class (:func:`choose_defaults` on the tuning and held-out figures)
DEFAULT_METHODS = {"small": "epnas", "medium": "bananas", "large": "epnas_cold"}
#: Defaults that need a transfer prior, and what runs instead on a space without one (your own space, no --warm-start)
NEEDS_PRIOR = ("zero_shot",)
FALLBACK = "epnas"
#: Why, in one line per class (shown by ``--help`` and the docs): mean validation regret on the tuning tables, and
#: the held-out ablation of the transfer methods that would have come first
REASONS = {
    "small": "0.0118 at 10 evaluations on the tuning tables; bananas_prior's 0.0111 and zero_shot's 0.0111 are lower "
    "but their priors do not add on the held-out tables (0.93x bananas [0.85, 1.03], 0.91x random [0.81, 1.03]), "
    "epnas's does (0.85x epnas_cold [0.74, 0.96])",
    "medium": "0.0053 at 30 (its ensemble trained every 5 evaluations); epnas's 0.0042 and bananas_prior's 0.0052 are "
    "lower but their priors do not add on the held-out tables (1.11x epnas_cold [0.95, 1.30], 0.92x bananas "
    "[0.79, 1.08])",
    "large": "0.0023 at 100; epnas's 0.0016 and bananas_prior's 0.0016 are lower but on the held-out tables epnas's "
    "prior costs (1.27x epnas_cold [1.03, 1.57]) and bananas_prior's does not add (1.10x bananas [0.90, 1.34])",
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


def choose_defaults(val_regret: dict[str, dict[str, float]], ablation: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The rule: per class, the lowest validation regret among the methods whose prior (if any) adds.

    Args:
        val_regret: Mean validation regret on the tuning tables, ``{budget: {method: regret}}`` (budgets as strings:
            the JSON of ``benchmarks/nas.py --tune``).
        ablation: The held-out ablation, ``{budget: {method: {"adds": bool, ...}}}`` (``benchmarks/nas.py``'s
            ``transfer_ablation``); a transfer method missing from it is not a candidate.

    Returns:
        dict: ``{class: method}`` for every budget class.
    """
    out = {}
    for name, budget in CLASS_BUDGETS.items():
        b = str(budget)
        adds = {m: bool(ablation.get(b, {}).get(m, {}).get("adds")) for m in TRANSFER_ABLATIONS}
        row = {m: v for m, v in val_regret[b].items() if adds.get(m, True)}
        out[name] = min(row, key=lambda m: row[m])
    return out


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
