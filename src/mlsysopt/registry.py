"""One registry mechanism for every family of methods: placers, serving tuners and NAS searchers.

A :class:`Registry` maps a method's name to what builds it — a ``"module:attribute"`` string, imported on first
look-up (so a command line can refuse an unknown name before it loads torch or Optuna), or the object itself — and
refuses an unknown name with one error that lists the choices. Each system keeps its own registry, in the order its
tables list the methods::

    TUNERS = Registry("tuner", {"rrl": "mlsysopt.serving.tuners.rrl:RRL", ...})
    TUNERS.check("rrl")        # MlsysoptError: unknown tuner 'x' (choose from: rrl, ...) otherwise
    cls = TUNERS["rrl"]        # imported now

Every registered method speaks its family's ask/tell: a serving tuner ``ask() -> Config`` and ``tell(config,
measurement)``; a NAS searcher ``ask(n) -> [Arch]`` and ``tell([Evaluation])``; a placer is asked for placements
by its search and told their makespans through its :class:`~mlsysopt.placement.base.Evaluator`. Each trial it is
told is one trial of the run's study in the study store (:mod:`mlsysopt.store`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar

from mlsysopt.errors import MlsysoptError

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Methods of one family by name, each imported on first look-up.

    Args:
        family: what one entry is called in errors (``"tuner"``, ``"NAS method"``, ``"method"``).
        entries: name -> ``"module:attribute"`` (imported on first look-up) or the object itself, in table order.
    """

    def __init__(self, family: str, entries: Mapping[str, str | T]) -> None:
        self.family = family
        self._entries: dict[str, str | T] = dict(entries)
        self._loaded: dict[str, T] = {}

    def check(self, name: str) -> None:
        """Raise :class:`~mlsysopt.errors.MlsysoptError` naming the choices unless ``name`` is registered."""
        if name not in self._entries:
            raise MlsysoptError(f"unknown {self.family} '{name}' (choose from: {', '.join(self._entries)})")

    def __getitem__(self, name: str) -> T:
        if name not in self._loaded:
            entry = self._entries[name]
            if isinstance(entry, str):
                module, _, attr = entry.partition(":")
                entry = getattr(importlib.import_module(module), attr)
            self._loaded[name] = entry  # type: ignore[assignment]
        return self._loaded[name]

    def load(self, name: str) -> T:
        """The registered object ``name`` (checked first: an unknown name is one error listing the choices).

        Args:
            name: a registered name.

        Returns:
            What the entry names (a class, a factory or a plain value), imported now if it was not yet.
        """
        self.check(name)
        return self[name]

    def where(self, name: str) -> str | None:
        """``"module:attribute"`` of a lazily registered entry (None for one registered as an object)."""
        entry = self._entries[name]
        return entry if isinstance(entry, str) else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.family!r}: {', '.join(self._entries)})"


def lazy_attribute_map(registry: Registry[Any]) -> dict[str, str]:
    """``{attribute: module}`` of every lazily registered entry (for a package root's lazy exports)."""
    out = {}
    for name in registry:
        where = registry.where(name)
        if where is not None:
            module, _, attr = where.partition(":")
            out[attr] = module
    return out
