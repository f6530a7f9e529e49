"""The search-space interface shared by every NAS method: architectures, evaluations, spaces.

An architecture is a tuple of option indices, one per decision, in the order a controller decodes them.
Every space is *progressive*: ``decisions(b)`` is a prefix of ``decisions(b + 1)``, so an architecture with
``b`` blocks grows into one with ``b + 1`` blocks by appending the new block's decisions (:meth:`SearchSpace.extend`).
A space lists its decisions as ``head`` decisions (made once) followed by ``block`` decisions (repeated per block).
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidArchitecture

_MAX_TRIES = 10_000


def _plain_int(c: Any) -> Any:
    """A numpy (or other integral) integer as a plain int; anything else (including bool) unchanged."""
    return int(c) if isinstance(c, numbers.Integral) and not isinstance(c, bool) else c


@dataclass(frozen=True)
class Arch:
    """One option index per decision; `blocks` = how many blocks these decisions describe.

    Args:
        choices: One option index per decision, ``0 <= choices[i] < space.decisions(blocks)[i]`` (numpy integers
            become ints).
        blocks: Number of blocks these decisions describe.
    """

    choices: tuple[int, ...]
    blocks: int

    def __post_init__(self) -> None:
        # numpy integers from a Generator become plain ints, so archs hash, compare and serialise alike.
        if not all(type(c) is int for c in self.choices):  # the common case needs no conversion
            conv = tuple(_plain_int(c) for c in self.choices)
            object.__setattr__(self, "choices", conv)
        elif type(self.choices) is not tuple:
            object.__setattr__(self, "choices", tuple(self.choices))
        if (
            type(self.blocks) is not int
            and isinstance(self.blocks, numbers.Integral)
            and not isinstance(self.blocks, bool)
        ):
            object.__setattr__(self, "blocks", int(self.blocks))  # (an int is one already: the ABC check is slow)

    def to_dict(self) -> dict[str, Any]:
        """``{"choices": [...], "blocks": b}``, JSON-ready."""
        return {"choices": list(self.choices), "blocks": self.blocks}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Arch:
        """Inverse of :meth:`to_dict`."""
        return cls(tuple(d["choices"]), d["blocks"])


def _json_float(v: Any) -> float | None:
    """A JSON-safe float: ``None`` for NaN/inf (strict JSON has neither)."""
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


@dataclass
class Evaluation:
    """The outcome of evaluating one architecture; ``perf`` (validation, higher is better) is all a search sees.

    Args:
        arch: The evaluated architecture.
        perf: Validation performance, higher is better (NaN when the evaluation failed).
        test_perf: Test performance, for reports only (None when unknown).
        resources: Resource values by name (e.g. ``params``, ``flops``, ``latency_ms``).
        cost_s: Seconds the evaluation took (or would have taken, for a table).
        ok: Whether the evaluation succeeded.
        error: Why it failed (None when ``ok``).
        extra: Space-specific details, JSON-ready.
        trained: What a training space keeps of the trained model (``state_dict``, ``preprocessing``); None otherwise.
    """

    arch: Arch
    perf: float
    test_perf: float | None
    resources: dict[str, float]
    cost_s: float
    ok: bool = True
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: What a training space keeps of the trained model (``state_dict``, ``preprocessing``): the search driver keeps
    #: the best one's in its checkpoint for ``nas export``; never part of :meth:`to_dict` or of equality.
    trained: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (without ``trained``); non-finite floats become ``None``."""
        return {
            "arch": self.arch.to_dict(),
            "perf": _json_float(self.perf),
            "test_perf": _json_float(self.test_perf),
            "resources": {k: _json_float(v) for k, v in self.resources.items()},
            "cost_s": _json_float(self.cost_s),
            "ok": self.ok,
            "error": self.error,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evaluation:
        """Inverse of :meth:`to_dict` (``None`` performance comes back as NaN)."""
        nan = float("nan")
        return cls(
            arch=Arch.from_dict(d["arch"]),
            perf=nan if d.get("perf") is None else float(d["perf"]),
            test_perf=None if d.get("test_perf") is None else float(d["test_perf"]),
            resources={k: nan if v is None else float(v) for k, v in (d.get("resources") or {}).items()},
            cost_s=nan if d.get("cost_s") is None else float(d["cost_s"]),
            ok=bool(d.get("ok", True)),
            error=d.get("error"),
            extra=dict(d.get("extra") or {}),
        )


class SearchSpace(ABC):
    """A progressive NAS search space: decisions, sampling, encoding, cheap resources and evaluation.

    Subclasses set ``name``, ``min_blocks``, ``max_blocks``, ``resource_names`` (and ``costly_resources``, the
    ones a search should ask for only when needed and as late as possible), and the decision lists
    ``head_options``/``head_names`` (once) and ``block_options``/``block_names`` (per block, ``{i}`` = block number).

    The base class takes no constructor arguments; subclasses define their own and set the class attributes listed
    above.
    """

    name: str
    min_blocks: int = 1
    max_blocks: int
    resource_names: tuple[str, ...]
    costly_resources: tuple[str, ...] = ()  # resources that take real time to get (e.g. a timed latency)
    head_options: tuple[int, ...] = ()
    head_names: tuple[str, ...] = ()
    block_options: tuple[int, ...]
    block_names: tuple[str, ...]
    #: Whether an architecture of fewer blocks is a different one that only it stands for (a declared space's
    #: ``Blocks(min=1, max=3)``: one to three layers). The methods that do not grow architectures stage by stage
    #: then draw and mutate the block count too (:meth:`sample`, :meth:`mutate`, ``neighbours(depth=True)``). False
    #: where every architecture is a ``max_blocks`` one (NAS-Bench-Graph: fewer blocks stand for padded cells).
    depth_is_a_choice: bool = False

    # ------------------------------------------------------------------ decisions
    def decisions(self, blocks: int) -> list[int]:
        """Number of options per decision for ``blocks`` blocks; a prefix of ``decisions(blocks + 1)``."""
        self._check_blocks(blocks)
        return list(self.head_options) + list(self.block_options) * blocks

    def decision_names(self, blocks: int) -> list[str]:
        """Names of the decisions, e.g. ``["link", "op1"]`` or ``["b1.op_a", "b1.op_b", "b1.width"]``."""
        self._check_blocks(blocks)
        per_block = [n.format(i=i) for i in range(1, blocks + 1) for n in self.block_names]
        return list(self.head_names) + per_block

    def option_labels(self, blocks: int) -> list[list[Any]]:
        """What each option of each decision stands for (numbers, strings, bools or None), decision by decision as
        :meth:`decision_names`: how the study store names a trial's parameters. Default: the option indices."""
        return [list(range(n)) for n in self.decisions(blocks)]

    def _check_blocks(self, blocks: Any) -> None:
        if type(blocks) is not int and (not isinstance(blocks, numbers.Integral) or isinstance(blocks, bool)):
            raise InvalidArchitecture(f"{self.name}: blocks must be an integer, got {blocks!r}")
        if not self.min_blocks <= blocks <= self.max_blocks:
            raise InvalidArchitecture(
                f"{self.name}: blocks must be in {self.min_blocks}..{self.max_blocks}, got {blocks}"
            )

    # ------------------------------------------------------------------ validity
    def check(self, arch: Arch) -> None:
        """Raise InvalidArchitecture if ``arch`` is malformed (choice count, range) or not in the space."""
        if not isinstance(arch, Arch):
            raise InvalidArchitecture(f"{self.name}: expected an Arch, got {type(arch).__name__}")
        self._check_blocks(arch.blocks)
        opts = self.decisions(arch.blocks)
        if len(arch.choices) != len(opts):
            raise InvalidArchitecture(
                f"{self.name}: an architecture with {arch.blocks} block(s) has {len(opts)} decisions "
                f"({', '.join(self.decision_names(arch.blocks))}), got {len(arch.choices)} choices"
            )
        for i, (c, n) in enumerate(zip(arch.choices, opts, strict=True)):
            if type(c) is not int or not 0 <= c < n:  # Arch turns numpy integers into ints; bool is not int
                name = self.decision_names(arch.blocks)[i]
                if not isinstance(c, int) or isinstance(c, bool):
                    raise InvalidArchitecture(f"{self.name}: choice for '{name}' must be an integer, got {c!r}")
                if not 0 <= c < n:
                    raise InvalidArchitecture(f"{self.name}: choice for '{name}' is {c}, must be in 0..{n - 1}")
        self._check_semantics(arch)

    def _check_semantics(self, arch: Arch) -> None:  # noqa: B027 (optional hook)
        """Space-specific validity beyond shape and range (e.g. present in a table); raise InvalidArchitecture."""

    def is_valid(self, arch: Arch) -> bool:
        """Whether :meth:`check` passes."""
        try:
            self.check(arch)
        except InvalidArchitecture:
            return False
        return True

    # ------------------------------------------------------------------ sampling
    def sample(self, rng: np.random.Generator, blocks: int | None = None) -> Arch:
        """A uniformly random valid architecture (uniform per decision, rejecting invalid ones) of ``blocks`` blocks;
        None: ``max_blocks``, or a block count drawn uniformly first where :attr:`depth_is_a_choice` (as a user
        draws a layer count before the layers)."""
        if blocks is None:
            deep = self.depth_is_a_choice and self.min_blocks < self.max_blocks
            blocks = int(rng.integers(self.min_blocks, self.max_blocks + 1)) if deep else self.max_blocks
        opts = self.decisions(blocks)
        for _ in range(_MAX_TRIES):
            arch = Arch(tuple(int(rng.integers(n)) for n in opts), blocks)
            if self.is_valid(arch):
                return arch
        raise InvalidArchitecture(f"{self.name}: found no valid architecture with {blocks} block(s)")

    def extend(self, arch: Arch, rng: np.random.Generator) -> Arch:
        """``arch`` with one more block whose decisions are drawn at random."""
        self.check(arch)
        if arch.blocks >= self.max_blocks:
            raise InvalidArchitecture(f"{self.name}: cannot extend an architecture that already has max_blocks blocks")
        new = self.decisions(arch.blocks + 1)[len(arch.choices) :]
        for _ in range(_MAX_TRIES):
            grown = Arch(arch.choices + tuple(int(rng.integers(n)) for n in new), arch.blocks + 1)
            if self.is_valid(grown):
                return grown
        raise InvalidArchitecture(f"{self.name}: found no valid extension of {arch}")

    def neighbours(self, arch: Arch, depth: bool = False) -> list[Arch]:
        """Every architecture one decision away from ``arch`` (same blocks; validity is the caller's to check); with
        ``depth`` where :attr:`depth_is_a_choice`, also ``arch`` without its last block and with it repeated."""
        opts = self.decisions(arch.blocks)
        out = []
        for i, n in enumerate(opts):
            for c in range(n):
                if c != arch.choices[i]:
                    out.append(Arch((*arch.choices[:i], c, *arch.choices[i + 1 :]), arch.blocks))
        if depth and self.depth_is_a_choice:
            per = len(self.block_options)
            if arch.blocks > self.min_blocks:
                out.append(Arch(arch.choices[: len(arch.choices) - per], arch.blocks - 1))
            if arch.blocks < self.max_blocks:
                out.append(Arch(arch.choices + arch.choices[len(arch.choices) - per :], arch.blocks + 1))
        return out

    def mutate(self, arch: Arch, rng: np.random.Generator) -> Arch:
        """``arch`` with one decision changed to another option, uniformly (a random architecture when none can
        change). Where :attr:`depth_is_a_choice`, the block count is one more decision: a block dropped from the
        end or one of random decisions appended (validity is the caller's to check)."""
        opts = self.decisions(arch.blocks)
        movable = [i for i, k in enumerate(opts) if k > 1]
        if self.depth_is_a_choice and self.min_blocks < self.max_blocks:
            movable.append(-1)  # the block count
        if not movable:
            return self.sample(rng)
        i = int(rng.choice(movable))
        if i == -1:
            grow = arch.blocks == self.min_blocks or (arch.blocks < self.max_blocks and rng.random() < 0.5)
            if grow:
                return self.extend(arch, rng)
            return Arch(arch.choices[: len(self.decisions(arch.blocks - 1))], arch.blocks - 1)
        new = int(rng.integers(opts[i] - 1))
        choices = list(arch.choices)
        choices[i] = new + (new >= choices[i])  # a different option, uniformly
        return Arch(tuple(choices), arch.blocks)

    # ------------------------------------------------------------------ encoding
    def encode_length(self) -> int:
        """Length of every :meth:`encode` vector (one-hot per decision of a max_blocks architecture)."""
        return sum(self.decisions(self.max_blocks))

    def _pad_choice(self, index: int) -> int | None:
        """Option implied for decision ``index`` when an architecture has fewer blocks (None: zeros)."""
        return None

    def encode(self, arch: Arch) -> np.ndarray:
        """Fixed-length float32 vector: one-hot per decision, decisions beyond ``arch.blocks`` padded."""
        self.check(arch)
        opts = self.decisions(self.max_blocks)
        vec = np.zeros(sum(opts), dtype=np.float32)
        offset = 0
        for i, n in enumerate(opts):
            c = arch.choices[i] if i < len(arch.choices) else self._pad_choice(i)
            if c is not None:
                vec[offset + c] = 1.0
            offset += n
        return vec

    # ------------------------------------------------------------------ space-specific
    @abstractmethod
    def decode(self, arch: Arch) -> dict[str, Any]:
        """Human-readable, JSON-ready description of ``arch``."""

    @abstractmethod
    def resources(self, arch: Arch) -> dict[str, float]:
        """Every resource figure (no training), used to filter candidates by constraints before evaluating."""

    def resources_for(self, arch: Arch, names: Collection[str]) -> dict[str, float]:
        """At least the resources in ``names``; a space skips its ``costly_resources`` nobody asked for."""
        return self.resources(arch)

    @abstractmethod
    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """Evaluate ``arch`` (may train; must work in another process after pickling the space)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
