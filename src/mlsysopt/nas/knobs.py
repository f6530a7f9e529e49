"""Every method knob's type and range, declared next to its default and checked whenever a config is built.

A config dataclass declares each knob with :func:`knob` (default, bounds, what the upper bound protects), and
:class:`~mlsysopt.nas.searcher.SearcherConfig` runs :func:`check_config` on creation, so ``EvolutionConfig(
population=0)``, ``get_method("evolution", ..., population=0)`` and ``mlsysopt nas search --knob population=0`` are
refused alike, naming the knob and its range. :func:`parse_knobs` turns ``--knob NAME=VALUE`` strings into typed
values by the config's field types (an integer knob refuses ``1.5`` and ``true``).

Upper bounds keep the work a knob sizes within reach: pools and populations are held in memory (a few hundred bytes
per architecture, plus its encoding), and sampling ``tries`` costs ~50 us each in the driver. They are far above
any useful setting.
"""

from __future__ import annotations

import math
import typing
from dataclasses import Field, field, fields
from typing import Any

from mlsysopt.errors import InvalidOption

#: The most architectures a knob may keep in memory (a population, a beam, a candidate pool): ~1 GB at most.
MAX_POOL = 1_000_000
#: The most random draws per ask: about a minute of sampling in the driver at ~50 us per draw.
MAX_TRIES = 1_000_000
#: The widest controller or predictor layer: an LSTM of 4,096 units already holds ~0.5 GB of weights.
MAX_WIDTH = 4096
#: The most predictor ensemble members and training epochs (each refit costs members x epochs steps).
MAX_MEMBERS = 64
MAX_PRED_EPOCHS = 100_000


def knob(
    default: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
    choices: tuple[str, ...] = (),
) -> Any:
    """A dataclass field with bounds: ``lo <= value <= hi`` (``lo_open``/``hi_open``: strict), or one of ``choices``."""
    meta = {"lo": lo, "hi": hi, "lo_open": lo_open, "hi_open": hi_open, "choices": choices}
    return field(default=default, metadata=meta)


def _range(name: str, meta: Any) -> str:
    """``"warmup >= 0 and warmup <= 1,000,000"``."""
    lo, hi = meta.get("lo"), meta.get("hi")
    left = "" if lo is None else f"{name} {'>' if meta.get('lo_open') else '>='} {lo:,g}"
    right = "" if hi is None else f"{name} {'<' if meta.get('hi_open') else '<='} {hi:,g}"
    return " and ".join(p for p in (left, right) if p)


def _type_name(want: Any) -> str:
    return {int: "an integer", float: "a finite number", bool: "true or false", str: "a name"}.get(want, str(want))


def type_ok(value: Any, want: Any) -> bool:
    """Whether ``value`` fits a knob of type ``want`` (an int for a float knob is fine; a bool never is a number)."""
    if want is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if want is float:
        return isinstance(value, int | float) and math.isfinite(value)
    return not isinstance(want, type) or isinstance(value, want)


def check_value(name: str, value: Any, want: Any, meta: Any) -> None:
    """InvalidOption naming knob ``name`` unless ``value`` has type ``want`` and lies in the range ``meta`` gives."""
    if not type_ok(value, want):
        raise InvalidOption(f"knob {name} must be {_type_name(want)}, got {value!r}")
    choices = meta.get("choices") or ()
    if choices and value not in choices:
        raise InvalidOption(f"unknown {name} {str(value)[:80]!r} (choose from: {', '.join(choices)})")
    lo, hi = meta.get("lo"), meta.get("hi")
    below = lo is not None and (value <= lo if meta.get("lo_open") else value < lo)
    above = hi is not None and (value >= hi if meta.get("hi_open") else value > hi)
    if below or above:
        raise InvalidOption(f"knob {name} is out of range: it needs {_range(name, meta)}, got {value!r}")


def check_config(cfg: Any) -> None:
    """Check every knob of the dataclass ``cfg`` against its type and declared range."""
    hints = typing.get_type_hints(type(cfg))
    for f in fields(cfg):
        check_value(f.name, getattr(cfg, f.name), hints[f.name], f.metadata)


def knob_fields(config_cls: type) -> dict[str, tuple[Any, Field[Any]]]:
    """``{name: (type, field)}`` of a config dataclass."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: (hints[f.name], f) for f in fields(config_cls)}


def _parse(name: str, text: str, want: Any) -> Any:
    """``text`` as a value of type ``want``: integers refuse ``1.5`` and ``true``, floats refuse ``nan``/``inf``."""
    t = text.strip()
    if want is bool:
        low = t.lower()
        if low in ("true", "yes", "1", "on"):
            return True
        if low in ("false", "no", "0", "off"):
            return False
        raise InvalidOption(f"--knob {name}={text}: expected true or false")
    if want is int:
        digits = t[1:] if t[:1] in "+-" else t
        if not digits.isdigit() or len(digits) > 30:
            raise InvalidOption(f"--knob {name}={text}: expected an integer")
        return int(t)
    if want is float:
        try:
            v = float(t)
        except ValueError:
            raise InvalidOption(f"--knob {name}={text}: expected a number") from None
        if not math.isfinite(v):
            raise InvalidOption(f"--knob {name}={text}: expected a finite number")
        return v
    return t


def parse_knobs(config_cls: type, items: list[str], method: str) -> dict[str, Any]:
    """``["population=10", "sample=3"]`` -> ``{"population": 10, "sample": 3}`` typed by ``config_cls``'s fields."""
    known = knob_fields(config_cls)
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise InvalidOption(f"--knob '{item[:80]}': expected NAME=VALUE, e.g. --knob warmup=5")
        if name not in known:
            raise InvalidOption(f"--knob {name[:80]}: method '{method}' has no such knob (it has: {', '.join(known)})")
        if name in out:
            raise InvalidOption(f"--knob {name} is given twice")
        out[name] = _parse(name, text, known[name][0])
    return out
