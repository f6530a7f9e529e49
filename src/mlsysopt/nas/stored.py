"""How a NAS search reads in the study store: an Optuna study of the same problem, as optuna-dashboard shows it.

Each evaluation is a trial whose parameters are the space's decisions by name with the option each took (``lr``,
``activation``, ``b1.width`` for your own space; ``link``, ``op1`` ... for NAS-Bench-Graph), each a categorical over
that decision's options, plus ``blocks`` when the space grows; the study's objective has your objective's name and
direction (:func:`objective_name`), and a trial's value is what your objective returned.
"""

from __future__ import annotations

from typing import Any

from mlsysopt.nas.spaces.base import Arch, SearchSpace


def _label(v: Any) -> Any:
    """An option as an Optuna categorical choice (None, bool, int, float or str; anything else as text)."""
    return v if v is None or isinstance(v, bool | int | float | str) else str(v)


def trial_params(space: SearchSpace, arch: Arch) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters and Optuna distributions of ``arch`` as a stored trial.

    Args:
        space: The search space (its ``decision_names`` and ``option_labels``).
        arch: The architecture.

    Returns:
        tuple[dict[str, Any], dict[str, Any]]: ``{name: option}`` and ``{name: CategoricalDistribution}`` (plus
        ``blocks`` as an ``IntDistribution`` when the space's block count varies).
    """
    # deferred: optuna loads only for a stored study
    from optuna.distributions import CategoricalDistribution, IntDistribution

    params: dict[str, Any] = {}
    dists: dict[str, Any] = {}
    names, labels = space.decision_names(arch.blocks), space.option_labels(arch.blocks)
    for name, options, c in zip(names, labels, arch.choices, strict=True):
        choices = tuple(_label(o) for o in options)
        if len(set(map(repr, choices))) != len(choices):  # options that read alike: their indices instead
            choices = tuple(range(len(options)))
        params[name], dists[name] = choices[c], CategoricalDistribution(choices)
    if space.min_blocks != space.max_blocks:
        params["blocks"], dists["blocks"] = arch.blocks, IntDistribution(space.min_blocks, space.max_blocks)
    return params, dists


def objective_name(objective: str | None, metric: str | None = None) -> str:
    """The objective's name in the store: ``metric`` when given, else your objective's function name (``train`` of
    ``file.py:train``), else ``validation_accuracy`` (the built-in spaces)."""
    if metric:
        return str(metric)
    if objective:
        return str(objective).rpartition(":")[2] or "value"
    return "validation_accuracy"
