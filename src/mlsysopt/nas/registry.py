"""The NAS methods by name: EPNAS (with transfer, and cold) and the baselines, each built from its own config.

Importing this module is cheap (it names the classes; :func:`method_class` imports one on first use), so a command
line can refuse an unknown method before it loads torch or Optuna.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.nas.knobs import parse_knobs, type_ok
from mlsysopt.registry import Registry

if TYPE_CHECKING:
    from mlsysopt.nas.constraints import Constraints
    from mlsysopt.nas.searcher import Searcher, SearcherConfig
    from mlsysopt.nas.spaces.base import SearchSpace

#: Every NAS method by name (each module imported on first use).
METHODS: Registry[type[Searcher[Any]]] = Registry(
    "NAS method",
    {
        "epnas": "mlsysopt.nas.epnas:EPNAS",
        "epnas_cold": "mlsysopt.nas.epnas_cold:EPNASCold",
        "local_search": "mlsysopt.nas.baselines.local_search:LocalSearch",
        "bananas": "mlsysopt.nas.baselines.bananas:Bananas",
        "bananas_prior": "mlsysopt.nas.baselines.bananas_prior:BananasPrior",
        "zero_shot": "mlsysopt.nas.baselines.zero_shot:ZeroShot",
        "random": "mlsysopt.nas.baselines.random_search:RandomSearch",
        "evolution": "mlsysopt.nas.baselines.evolution:RegularizedEvolution",
        "reinforce": "mlsysopt.nas.baselines.reinforce:ReinforceSearch",
        "pnas": "mlsysopt.nas.baselines.pnas:PNAS",
        "tpe": "mlsysopt.nas.baselines.optuna_tpe:OptunaTPE",
    },
)
METHOD_NAMES: tuple[str, ...] = tuple(METHODS)


def check_method(name: str) -> None:
    """Raise MlsysoptError unless ``name`` is one of :data:`METHOD_NAMES`.

    Args:
        name: a NAS method name.
    """
    METHODS.check(name)


def method_class(name: str) -> type[Searcher[Any]]:
    """The searcher class of method ``name`` (imported on first use).

    Args:
        name: one of :data:`METHOD_NAMES`.

    Returns:
        The :class:`~mlsysopt.nas.searcher.Searcher` subclass.
    """
    return METHODS.load(name)


def method_config(name: str, **options: Any) -> SearcherConfig:
    """The config dataclass of method ``name`` filled from ``options``; unknown names, wrong types and values out of
    each knob's range are refused (:mod:`mlsysopt.nas.knobs`).

    Args:
        name: one of :data:`METHOD_NAMES`.
        **options: the method's knobs by name.

    Returns:
        The method's ``Config`` instance.

    Raises:
        MlsysoptError: an unknown method or knob, a knob of the wrong type; InvalidOption: a value out of range.
    """
    config_cls = method_class(name).Config
    known = [f.name for f in fields(config_cls)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise MlsysoptError(f"unknown knob(s) for method '{name}': {', '.join(unknown)} (known: {', '.join(known)})")
    hints = typing.get_type_hints(config_cls)
    for key, value in options.items():
        if not type_ok(value, hints[key]):
            want = getattr(hints[key], "__name__", str(hints[key]))
            raise MlsysoptError(f"knob {key} of method '{name}' must be of type {want}, got {value!r}")
    try:
        return config_cls(**options)
    except InvalidOption as exc:
        raise InvalidOption(f"method '{name}': {exc}") from None


def parse_method_knobs(name: str, items: list[str]) -> dict[str, Any]:
    """``--knob NAME=VALUE`` strings of method ``name`` as typed options, each checked against its range.

    Args:
        name: one of :data:`METHOD_NAMES`.
        items: ``NAME=VALUE`` strings as given on the command line.

    Returns:
        The knobs by name, typed as the method's ``Config`` declares them.
    """
    check_method(name)
    if not items:
        return {}  # nothing to parse: the method is not imported
    values = parse_knobs(method_class(name).Config, items, name)
    method_config(name, **values)  # ranges checked now, before any search is built
    return values


def get_method(
    name: str,
    space: SearchSpace,
    constraints: Constraints | None = None,
    budget: int = 100,
    seed: int = 0,
    prior: Any = None,
    **options: Any,
) -> Searcher[Any]:
    """Build the searcher called ``name`` (one of :data:`METHOD_NAMES`); ``options`` fill its config dataclass.

    Args:
        name: the method.
        space: the search space.
        constraints: resource constraints (None: none).
        budget: evaluations the driver spends (>= 1).
        seed: seeds every random choice of the method.
        prior: a transfer prior for the methods that read one.
        **options: the method's knobs (:func:`method_config`).

    Returns:
        The searcher, ready for ``ask``/``tell``.

    ``prior`` (a :class:`~mlsysopt.nas.prior.TransferPrior`) goes to the methods that read one (EPNAS, zero-shot);
    without it they take the space's own (NAS-Bench-Graph: the other datasets' tables).
    """
    cfg = method_config(name, **options)
    searcher = method_class(name)(space, constraints, budget=budget, seed=seed, config=cfg, prior=prior)
    searcher.check_ready()
    return searcher
