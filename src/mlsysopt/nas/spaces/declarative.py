"""A search space you declare: plain categorical and integer knobs, plus blocks of choices that grow progressively.

::

    from mlsysopt.nas import Blocks, Int, Space

    space = Space(
        knobs={"lr": [1e-3, 3e-3, 1e-2], "batch": Int(16, 128, step=16)},   # made once per architecture
        blocks=Blocks({"width": [16, 32, 64], "act": ["relu", "gelu"]}, min=1, max=4),   # 1..4 blocks, each its own
        resources=count_params,   # optional: params -> {"params": ...}, cheap (no training), checked before training
        name="my-mlps",
    )

Every method runs on it (it is a :class:`~mlsysopt.nas.spaces.base.SearchSpace`: the knobs are the head
decisions, the per-block choices the block decisions, so EPNAS's stages grow it one block at a time). An
architecture decodes to the parameters your training function reads::

    {"lr": 0.003, "batch": 32, "blocks": [{"width": 64, "act": "relu"}, {"width": 16, "act": "gelu"}]}

A choice is any JSON value (number, string, bool, None); a plain list is a :class:`Categorical`. ``resources`` is
a function of those parameters returning ``{name: number}`` without training (e.g. a parameter count of the model
they build); constraints on those resources are checked before any training, and ``costly_resources`` (a timed
latency) only for the candidates a method is about to propose. Resources only training can tell are what the
training function returns (see :mod:`mlsysopt.nas.objective`); constraints on them are judged after evaluation.
Evaluating needs an objective: :class:`~mlsysopt.nas.Study` (ask/tell) or ``mlsysopt nas search --space
file.py:space --objective file.py:train``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from mlsysopt.errors import InvalidArchitecture, InvalidSpace
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace

#: The most options one decision may have, and the most decisions (knobs + blocks x choices): a controller, an
#: encoding and a TPE study are sized by them.
MAX_OPTIONS = 10_000
MAX_DECISIONS = 1_000
MAX_BLOCKS = 100


def _check_value(where: str, v: Any) -> Any:
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        if not math.isfinite(float(v)):
            raise InvalidSpace(f"{where}: choice {v!r} is not a finite number")
        return float(v)
    raise InvalidSpace(f"{where}: choice {v!r} is a {type(v).__name__}; choices are numbers, strings, bools or None")


class Categorical:
    """One of a list of values (numbers, strings, bools, None), e.g. ``Categorical(["relu", "gelu"])``.

    Args:
        values: The options: numbers, strings, bools or None; at least one, at most 10000, no repeats (checked when
            the space is built).

    Raises:
        InvalidSpace: If ``values`` is not a list.
    """

    def __init__(self, values: Sequence[Any]) -> None:
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise InvalidSpace(f"a categorical choice needs a list of values, got {type(values).__name__}")
        self.values = list(values)

    def checked(self, where: str) -> list[Any]:
        """The values, checked (at least one, at most :data:`MAX_OPTIONS`, no repeats, JSON-ready)."""
        vals = [_check_value(where, v) for v in self.values]
        if not vals:
            raise InvalidSpace(f"{where}: a choice needs at least one value")
        if len(vals) > MAX_OPTIONS:
            raise InvalidSpace(f"{where}: {len(vals):,} values, more than the {MAX_OPTIONS:,} a decision may have")
        seen = [repr(v) for v in vals]
        dup = sorted({s for s in seen if seen.count(s) > 1})
        if dup:
            raise InvalidSpace(f"{where}: value(s) given twice: {', '.join(dup)}")
        return vals

    def __repr__(self) -> str:
        return f"Categorical({self.values!r})"


class Int(Categorical):
    """An integer from ``low`` to ``high`` inclusive in steps of ``step``, e.g. ``Int(16, 128, step=16)``.

    Args:
        low: Smallest value.
        high: Largest value (inclusive), >= ``low``.
        step: Step between values, >= 1.

    Raises:
        InvalidSpace: If an argument is not an integer, ``high < low``, ``step < 1`` or there are over 10000 values.
    """

    def __init__(self, low: int, high: int, step: int = 1) -> None:
        for name, v in (("low", low), ("high", high), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidSpace(f"Int: {name} must be an integer, got {v!r}")
        if step < 1 or high < low:
            raise InvalidSpace(f"Int({low}, {high}, step={step}): needs low <= high and step >= 1")
        if (high - low) // step + 1 > MAX_OPTIONS:
            raise InvalidSpace(f"Int({low}, {high}, step={step}): more than {MAX_OPTIONS:,} values")
        self.low, self.high, self.step = int(low), int(high), int(step)
        super().__init__(list(range(self.low, self.high + 1, self.step)))

    def __repr__(self) -> str:
        return f"Int({self.low}, {self.high}, step={self.step})"


def _choice(where: str, spec: Any) -> list[Any]:
    if isinstance(spec, Categorical):
        return spec.checked(where)
    return Categorical(spec).checked(where)


class Blocks:
    """Blocks of choices that grow from ``min`` to ``max`` blocks; each block makes every choice of ``choices``.

    Args:
        choices: Per-block choices: name to a list of values, :class:`Categorical` or :class:`Int`.
        min: Fewest blocks, >= 1.
        max: Most blocks, ``min <= max <= 100``.

    Raises:
        InvalidSpace: If ``choices`` is empty or not a dict, a choice is invalid, or ``min``/``max`` are out of range.
    """

    def __init__(self, choices: Mapping[str, Any], min: int = 1, max: int = 4) -> None:
        if not isinstance(choices, Mapping) or not choices:
            raise InvalidSpace("Blocks: choices must be a non-empty dict of name -> list of values")
        for name, v in (("min", min), ("max", max)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise InvalidSpace(f"Blocks: {name} must be an integer, got {v!r}")
        if not 1 <= min <= max <= MAX_BLOCKS:
            raise InvalidSpace(f"Blocks: needs 1 <= min <= max <= {MAX_BLOCKS}, got min={min}, max={max}")
        self.choices = {str(k): _choice(f"block choice '{k}'", v) for k, v in choices.items()}
        self.min, self.max = int(min), int(max)

    def __repr__(self) -> str:
        return f"Blocks({self.choices!r}, min={self.min}, max={self.max})"


class Space(SearchSpace):
    """A declared search space (see the module docstring).

    Args:
        knobs: ``{name: list of values | Categorical | Int}``, decided once per architecture.
        blocks: a :class:`Blocks` (progressive growth), or None for a space of knobs only.
        resources: ``params -> {resource: number}`` without training, or None.
        resource_names: the names ``resources`` returns (default: found by calling it once) plus the ones only
            training reports (``measured``): constraints may read any of them.
        costly_resources: those of ``resources`` that take real time (a timed latency): asked for only when needed.
        measured: resources only the training function reports (``{"resources": {...}}`` in its return value).
        name: a name for titles, records and the transfer prior's task.
    """

    def __init__(
        self,
        knobs: Mapping[str, Any] | None = None,
        blocks: Blocks | None = None,
        resources: Callable[[dict[str, Any]], Mapping[str, float]] | None = None,
        resource_names: Sequence[str] | None = None,
        costly_resources: Sequence[str] = (),
        measured: Sequence[str] = (),
        name: str = "space",
    ) -> None:
        knobs = dict(knobs or {})
        if blocks is not None and not isinstance(blocks, Blocks):
            raise InvalidSpace(f"blocks must be a Blocks(...), got {type(blocks).__name__}")
        if not knobs and blocks is None:
            raise InvalidSpace("a space needs knobs, blocks or both")
        if "blocks" in knobs:
            raise InvalidSpace("'blocks' is reserved for the block list: name the knob otherwise")
        if resources is not None and not callable(resources):
            raise InvalidSpace(f"resources must be a function of the parameters, got {type(resources).__name__}")
        self.name = str(name)
        self.knobs = {str(k): _choice(f"knob '{k}'", v) for k, v in knobs.items()}
        self.blocks = blocks
        self.head_names = tuple(self.knobs)
        self.head_options = tuple(len(v) for v in self.knobs.values())
        if blocks is None:
            self.min_blocks = self.max_blocks = 0
            self.block_names, self.block_options = (), ()
        else:
            self.min_blocks, self.max_blocks = blocks.min, blocks.max
            self.depth_is_a_choice = blocks.min < blocks.max  # one to three layers are three kinds of network
            self.block_names = tuple(f"b{{i}}.{k}" for k in blocks.choices)
            self.block_options = tuple(len(v) for v in blocks.choices.values())
        n = len(self.head_options) + len(self.block_options) * self.max_blocks
        if n > MAX_DECISIONS:
            raise InvalidSpace(f"{self.name}: {n:,} decisions, more than {MAX_DECISIONS:,}")
        self.resource_fn = resources
        self.measured = tuple(str(m) for m in measured)
        if resource_names is None:
            found = tuple(self._call_resources(self.sample_params())) if resources is not None else ()
            resource_names = found + tuple(m for m in self.measured if m not in found)
        self.resource_names = tuple(str(r) for r in resource_names)
        self.costly_resources = tuple(str(r) for r in costly_resources)
        unknown = [r for r in (*self.costly_resources, *self.measured) if r not in self.resource_names]
        if unknown:
            raise InvalidSpace(f"{self.name}: resource(s) {unknown} are not among resource_names {self.resource_names}")

    # ------------------------------------------------------------------ parameters
    def params(self, arch: Arch) -> dict[str, Any]:
        """The parameters ``arch`` stands for: ``{knob: value, ..., "blocks": [{choice: value}, ...]}``."""
        self.check(arch)
        out: dict[str, Any] = {k: vals[c] for (k, vals), c in zip(self.knobs.items(), arch.choices, strict=False)}
        if self.blocks is not None:
            per = len(self.blocks.choices)
            rest = arch.choices[len(self.knobs) :]
            out["blocks"] = [
                {k: vals[rest[b * per + j]] for j, (k, vals) in enumerate(self.blocks.choices.items())}
                for b in range(arch.blocks)
            ]
        return out

    def arch_from_params(self, params: Mapping[str, Any]) -> Arch:
        """The architecture of ``params`` (the inverse of :meth:`params`); InvalidArchitecture names what is off."""
        if not isinstance(params, Mapping):
            raise InvalidArchitecture(f"{self.name}: parameters must be a dict, got {type(params).__name__}")
        choices: list[int] = []
        for k, vals in self.knobs.items():
            if k not in params:
                raise InvalidArchitecture(f"{self.name}: parameters lack knob '{k}'")
            choices.append(_index(self.name, k, vals, params[k]))
        blocks = 0
        if self.blocks is not None:
            given = params.get("blocks")
            if not isinstance(given, list | tuple):
                raise InvalidArchitecture(f"{self.name}: parameters need 'blocks', a list of dicts")
            blocks = len(given)
            for b, blk in enumerate(given):
                if not isinstance(blk, Mapping):
                    raise InvalidArchitecture(f"{self.name}: block {b + 1} must be a dict of choices")
                for k, vals in self.blocks.choices.items():
                    if k not in blk:
                        raise InvalidArchitecture(f"{self.name}: block {b + 1} lacks choice '{k}'")
                    choices.append(_index(self.name, f"b{b + 1}.{k}", vals, blk[k]))
        arch = Arch(tuple(choices), blocks)
        self.check(arch)
        return arch

    def option_labels(self, blocks: int) -> list[list[Any]]:
        """Each decision's values: the knobs', then each block's choices."""
        per_block = list(self.blocks.choices.values()) if self.blocks is not None else []
        return [list(v) for v in self.knobs.values()] + [list(v) for _ in range(blocks) for v in per_block]

    def sample_params(self) -> dict[str, Any]:
        """The first option of every decision at ``max_blocks`` (what ``resource_names`` is found on)."""
        return self.params(Arch((0,) * len(self.decisions(self.max_blocks)), self.max_blocks))

    # ------------------------------------------------------------------ SearchSpace
    def decode(self, arch: Arch) -> dict[str, Any]:
        """The parameters (:meth:`params`): what a record and the transfer prior read."""
        return self.params(arch)

    def _call_resources(self, params: dict[str, Any]) -> dict[str, float]:
        assert self.resource_fn is not None
        try:
            got = self.resource_fn(params)
        except Exception as exc:  # the user's function: say which and where
            why = f"{type(exc).__name__}: {exc}"
            raise InvalidSpace(f"{self.name}: the resources function failed on {params}: {why}") from None
        if not isinstance(got, Mapping):
            raise InvalidSpace(f"{self.name}: the resources function returned {type(got).__name__}, not a dict")
        out = {}
        for k, v in got.items():
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise InvalidSpace(f"{self.name}: resource '{k}' is {v!r}, not a number (parameters {params})")
            out[str(k)] = float(v)
        return out

    def resources(self, arch: Arch) -> dict[str, float]:
        """What ``resources(params)`` returns (nothing without a resources function); the measured ones come with
        the evaluation."""
        params = self.params(arch)
        return self._call_resources(params) if self.resource_fn is not None else {}

    def resources_for(self, arch: Arch, names: Collection[str]) -> dict[str, float]:
        """The resources before training (the measured ones are judged once the training function reports them)."""
        return self.resources(arch)

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """A declared space has no training of its own: evaluate through a Study or an objective."""
        raise InvalidSpace(
            f"{self.name}: a declared space is evaluated by your training function: use mlsysopt.nas.Study "
            "(ask/tell) or `mlsysopt nas search --space FILE.py:space --objective FILE.py:train`"
        )

    def __repr__(self) -> str:
        return f"Space({self.name!r}, knobs={list(self.knobs)}, blocks={self.blocks!r})"


def _index(space: str, name: str, values: list[Any], v: Any) -> int:
    for i, x in enumerate(values):
        if (type(x) is type(v) and x == v) or (isinstance(x, float) and isinstance(v, int) and x == v):
            return i
    raise InvalidArchitecture(f"{space}: {name}={v!r} is not one of {values}")
