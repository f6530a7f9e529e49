"""Which tuner ``serving tune`` runs when ``--tuner`` is not given (``auto``): one rule, by budget and prior.

The budget (``--budget``, measurements per rate) falls in a class: **small** (at most 10), **medium** (11 to 30) or
**large** (more than 30). Per class, and per whether the tune has a prior (``--prior`` or ``--warm-start``), the
default is the tuner that left the most tunes within 5% of the optimum after that many measurements (10, 30, 60) on
the *tuning* presets (:mod:`mlsysopt.serving.presets`: 14 profiles x 10 seeds, simulated, mean latency; a run's
first tune at rate A and its re-tune after the rate rises 1.5x both count, as ``serving tune --rate A,B`` does both;
warm tuners get a prior fitted without the profile's own model); a tie goes to the fewer mean measurements to 5%.
``benchmarks/serving_rule.py`` measures it (``benchmarks/results/serving_tuning.json``); the held-out presets confirm it
(``benchmarks/serving.py``: ``default_tuner`` in ``benchmarks/results/serving_heldout.json``); ``docs/methods.md``
shows both.
"""

from __future__ import annotations

from mlsysopt.errors import MlsysoptError

AUTO = "auto"
#: budget classes in order: (name, the largest budget in it; None: no upper end)
BUDGET_CLASSES: tuple[tuple[str, int | None], ...] = (("small", 10), ("medium", 30), ("large", None))
#: the budget each class was judged at on the tuning presets
JUDGED_AT = {"small": 10, "medium": 30, "large": 60}
#: (budget class, with a prior) -> the tuner ``auto`` runs, as ``NAME[:TAG]`` (a tag names knobs: :data:`TAGS`)
RULE: dict[tuple[str, bool], str] = {
    ("small", False): "rrl",
    ("medium", False): "rrl",
    ("large", False): "rrl",
    ("small", True): "rrl",
    ("medium", True): "rrl:ei",
    ("large", True): "rrl",
}
#: the figure behind :data:`RULE` (``benchmarks/results/serving_tuning.json``; a test keeps them equal): per tuner, the
#: share of tunes within 5% of the optimum after 10 / 30 / 60 measurements on the tuning presets
FIGURES: dict[str, tuple[int, int, int]] = {
    "rrl": (65, 92, 98),
    "gp": (22, 88, 94),
    "rrl_warm": (86, 98, 100),
    "rrl_warm:ei": (79, 100, 100),
    "gp_warm": (61, 90, 96),
}
#: knobs a tag of :data:`RULE` stands for (``rrl:ei``: RRL picking by expected improvement over the prior)
TAGS: dict[str, dict[str, object]] = {"ei": {"acquisition": "ei"}}


def budget_class(budget: int) -> str:
    """The class of a budget: ``small`` (<= 10), ``medium`` (11-30) or ``large`` (> 30).

    Args:
        budget: Measurements per rate, >= 1.

    Returns:
        str: The class name.

    Raises:
        MlsysoptError: If ``budget`` < 1.
    """
    if budget < 1:
        raise MlsysoptError(f"--budget {budget} must be at least 1 measurement")
    for name, top in BUDGET_CLASSES:
        if top is None or budget <= top:
            return name
    raise AssertionError("unreachable: the last class has no upper end")


def default_tuner(budget: int, warm: bool = False) -> str:
    """The tuner ``serving tune`` runs by default for ``budget`` (:data:`RULE`).

    Args:
        budget: Measurements per rate.
        warm: Whether the tune has a prior (``--prior`` or ``--warm-start``).

    Returns:
        str: A tuner name of :data:`mlsysopt.serving.tuners.TUNERS`, with a ``:TAG`` for knobs (:data:`TAGS`).
    """
    return RULE[(budget_class(budget), bool(warm))]


def split_label(label: str) -> tuple[str, dict[str, object]]:
    """A rule label ``NAME[:TAG]`` as (tuner name, its knobs).

    Args:
        label: E.g. ``rrl`` or ``rrl:ei``.

    Returns:
        tuple[str, dict[str, object]]: The tuner name and the knobs its tag stands for.
    """
    name, _, tag = label.partition(":")
    return name, dict(TAGS[tag]) if tag else {}


def resolve_tuner(name: str, budget: int, warm: bool = False) -> tuple[str, dict[str, object]]:
    """``name`` (no knobs), or for ``auto`` the rule's tuner for ``budget`` and its knobs.

    Args:
        name: ``auto`` or a tuner name.
        budget: Measurements per rate.
        warm: Whether the tune has a prior.

    Returns:
        tuple[str, dict[str, object]]: The tuner to run and its knobs.
    """
    return split_label(default_tuner(budget, warm)) if name == AUTO else (name, {})


def describe_rule() -> str:
    """The rule in one line, for ``--help`` and the docs.

    Returns:
        str: E.g. ``budget <= 10: gp (with a prior: rrl); 11-30: ...``.
    """
    parts, low = [], 1
    for name, top in BUDGET_CLASSES:
        span = f"<= {top}" if low == 1 else (f"{low}-{top}" if top is not None else f"> {low - 1}")
        parts.append(f"budget {span}: {RULE[(name, False)]} (with a prior: {RULE[(name, True)]})")
        low = (top or 0) + 1
    return "; ".join(parts)


def describe_figures() -> str:
    """The figure behind the rule in one line, for ``--help``.

    Returns:
        str: Per tuner, the share of tunes within 5% of the optimum after 10 / 30 / 60 measurements.
    """
    names = {"rrl": "RRL", "gp": "Optuna GP", "rrl_warm": "with a prior RRL", "rrl_warm:ei": "rrl:ei",
             "gp_warm": "warm GP"}  # fmt: skip
    return ", ".join(f"{names[t]} {'/'.join(map(str, v))}%" for t, v in FIGURES.items())
