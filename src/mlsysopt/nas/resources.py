"""Pluggable resource measures: add a resource figure to any space, for constraints to read.

A space reports its own resources (NAS-Bench-Graph: the table's params and latency; the CNN spaces: params,
FLOPs, intensity, a timed latency; a declared :class:`~mlsysopt.nas.Space`: your ``resources`` function). A
:class:`ResourceMeasure` adds more without touching the space -- a latency predicted by a trained cost model, the
memory a device would need, a price -- and :func:`with_measures` wraps the space so every method, the constraints
(``max_<resource>`` / ``min_<resource>``), the records and the plots see them like the space's own::

    class PeakMemory(ResourceMeasure):
        names = ("memory_mb",)

        def measure(self, space, arch):
            return {"memory_mb": estimate(space.decode(arch))}

    space = with_measures(get_space("digits"), [PeakMemory()])
    searcher = get_method("epnas", space, Constraints.from_limits(max_memory_mb=64))

A measure with ``costly = True`` (it takes real time, like running a model) is asked only for the candidates a
method is about to propose, after the cheap constraints passed. A measure's figures replace the space's own of the
same name. Measures must pickle (the wrapped space travels to worker processes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any, ClassVar

import numpy as np

from mlsysopt.errors import InvalidSpace
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace


class ResourceMeasure(ABC):
    """Resource figures of any architecture of a space, without training it.

    Subclasses set the class attributes ``names`` (the resources returned) and ``costly`` (whether measuring takes
    real time), and implement :meth:`measure`.

    The base class takes no constructor arguments; subclasses define their own.
    """

    #: The resources :meth:`measure` returns.
    names: ClassVar[tuple[str, ...]] = ()
    #: Whether measuring takes real time (then it is asked only when a constraint needs it, as late as possible).
    costly: ClassVar[bool] = False

    @abstractmethod
    def measure(self, space: SearchSpace, arch: Arch) -> dict[str, float]:
        """``{name: value}`` for every name in :attr:`names`."""

    def describe(self) -> str:
        """One line for settings.json and titles (default: the class name and the resources)."""
        return f"{type(self).__name__}({', '.join(self.names)})"


class MeasuredSpace(SearchSpace):
    """``inner`` with the resources of ``measures`` added (see the module docstring); everything else delegated."""

    def __init__(self, inner: SearchSpace, measures: Sequence[ResourceMeasure]) -> None:
        for m in measures:
            if not isinstance(m, ResourceMeasure) or not m.names:
                raise InvalidSpace(f"a resource measure must be a ResourceMeasure with names, got {m!r}")
        self.inner, self.measures = inner, tuple(measures)
        self.name = inner.name
        self.min_blocks, self.max_blocks = inner.min_blocks, inner.max_blocks
        self.depth_is_a_choice = inner.depth_is_a_choice
        self.head_options, self.head_names = inner.head_options, inner.head_names
        self.block_options, self.block_names = inner.block_options, inner.block_names
        added = tuple(n for m in self.measures for n in m.names)
        self.resource_names = tuple(dict.fromkeys((*inner.resource_names, *added)))
        costly = {n for m in self.measures if m.costly for n in m.names}
        own = tuple(r for r in getattr(inner, "costly_resources", ()) if r not in added)
        self.costly_resources = (*own, *sorted(costly))
        self.measured = tuple(r for r in getattr(inner, "measured", ()) if r not in added)

    def __getattr__(self, name: str) -> Any:
        """Anything else the inner space has (a table, ``key``, ``iter_archs``, ``default_prior`` ...)."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ delegated
    def decisions(self, blocks: int) -> list[int]:
        """The inner space's decisions."""
        return self.inner.decisions(blocks)

    def decision_names(self, blocks: int) -> list[str]:
        """The inner space's decision names."""
        return self.inner.decision_names(blocks)

    def check(self, arch: Arch) -> None:
        """The inner space's check."""
        self.inner.check(arch)

    def is_valid(self, arch: Arch) -> bool:
        """The inner space's validity."""
        return self.inner.is_valid(arch)

    def sample(self, rng: np.random.Generator, blocks: int | None = None) -> Arch:
        """The inner space's sampling."""
        return self.inner.sample(rng, blocks)

    def extend(self, arch: Arch, rng: np.random.Generator) -> Arch:
        """The inner space's growth by one block."""
        return self.inner.extend(arch, rng)

    def neighbours(self, arch: Arch, depth: bool = False) -> list[Arch]:
        """The inner space's one-edit neighbours."""
        return self.inner.neighbours(arch, depth)

    def encode(self, arch: Arch) -> np.ndarray:
        """The inner space's encoding."""
        return self.inner.encode(arch)

    def encode_length(self) -> int:
        """The inner space's encoding length."""
        return self.inner.encode_length()

    def decode(self, arch: Arch) -> dict[str, Any]:
        """The inner space's description."""
        return self.inner.decode(arch)

    # ------------------------------------------------------------------ resources
    def _measured(self, arch: Arch, names: Collection[str] | None) -> dict[str, float]:
        out: dict[str, float] = {}
        for m in self.measures:
            if names is None or any(n in names for n in m.names):
                got = m.measure(self.inner, arch)
                out |= {n: float(got[n]) for n in m.names}
        return out

    def resources(self, arch: Arch) -> dict[str, float]:
        """The inner space's resources and every measure's."""
        return {**self.inner.resources(arch), **self._measured(arch, None)}

    def resources_for(self, arch: Arch, names: Collection[str]) -> dict[str, float]:
        """The inner space's resources for ``names`` and the measures that give one of them."""
        inner_names = [n for n in names if n in self.inner.resource_names]
        return {**self.inner.resources_for(arch, inner_names), **self._measured(arch, names)}

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """The inner space's evaluation, its resources completed by every measure (so the records hold them)."""
        ev = self.inner.evaluate(arch, seed)
        ev.resources = {**ev.resources, **self._measured(arch, None)}
        return ev

    def __repr__(self) -> str:
        return f"MeasuredSpace({self.inner!r}, {[m.describe() for m in self.measures]})"


def with_measures(space: SearchSpace, measures: Sequence[ResourceMeasure]) -> SearchSpace:
    """``space`` with the resources of ``measures`` added (``space`` itself when there are none).

    Args:
        space: The space to extend.
        measures: Resource measures to add (each a :class:`ResourceMeasure` with names).

    Returns:
        SearchSpace: A ``MeasuredSpace`` wrapping ``space``, or ``space`` itself when ``measures`` is empty.

    Raises:
        InvalidSpace: If a measure is not a :class:`ResourceMeasure` or has no names.
    """
    return MeasuredSpace(space, measures) if measures else space
