"""One strict JSON writer and one guarded JSON reader for every file mlsysopt writes or reads.

Written JSON is always standard: NaN and ±inf become ``null``, numpy scalars and arrays become Python values,
tuples and paths become lists and strings. Read JSON is bounded before it is parsed (size) and after (nesting
depth), so a huge or deeply nested file is one clear error, never a ``MemoryError`` or ``RecursionError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.io.files import write_atomic

#: Largest JSON input read (bytes): well above any cluster, workflow or settings file, far below memory.
MAX_JSON_BYTES = 512 * 2**20
#: Deepest nesting accepted in a JSON input (WfFormat, the deepest format read, needs about 6).
MAX_JSON_DEPTH = 64


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: NaN/inf -> None, numpy -> Python, tuple -> list, Path -> str.

    Args:
        value: Nested mappings, lists, tuples, scalars, paths, numpy scalars and arrays; mapping keys become ``str``.

    Returns:
        The same data made of dict, list, str, int, float (finite), bool and None only.

    Raises:
        TypeError: If ``value`` holds an object of any other type.
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)

    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return to_jsonable(float(value))
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``value`` (see :func:`to_jsonable`).

    Args:
        value: The data to serialize.
        indent: Spaces per nesting level; None writes one line.

    Returns:
        Standard JSON text (no NaN or Infinity).

    Raises:
        TypeError: If ``value`` holds an object :func:`to_jsonable` cannot convert.
    """
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented strict JSON, atomically.

    Args:
        path: The file to write; missing parent folders are created.
        data: The data to serialize (see :func:`to_jsonable`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        WriteFailed: If the file cannot be written.
        TypeError: If ``data`` holds an object that is not JSON-serializable.
    """
    return write_atomic(path, dumps(data) + "\n")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d + 1)
            stack.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


def loads_json(
    text: str,
    error: type[MlsysoptError] = MlsysoptError,
    where: str = "JSON input",
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """Parse strict JSON text; ``error`` names ``where`` and the line and column of a syntax error.

    Args:
        text: The JSON text.
        error: The :class:`~mlsysopt.errors.MlsysoptError` subclass to raise.
        where: What to name in error messages (e.g. a file path).
        max_depth: Deepest nesting accepted.

    Returns:
        The parsed value.

    Raises:
        error: If the text is not valid JSON, uses NaN/Infinity, or is nested deeper than ``max_depth``.
    """
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise error(f"{where}: JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # NaN/Infinity, or an integer with too many digits
        raise error(f"{where}: not valid JSON ({exc})") from None
    if _depth(data) > max_depth:
        raise error(f"{where}: JSON nested deeper than {max_depth} levels")
    return data


def read_json(
    path: str | Path,
    error: type[MlsysoptError] = MlsysoptError,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    expect: type | None = dict,
) -> Any:
    """Read a JSON file, raising ``error`` naming ``path`` when it is missing, too big, not UTF-8 or not JSON.

    ``expect`` is the type of the top-level value (``dict`` by default; ``None`` accepts any).

    Args:
        path: The JSON file.
        error: The :class:`~mlsysopt.errors.MlsysoptError` subclass to raise.
        max_bytes: Largest file size read, in bytes.
        max_depth: Deepest nesting accepted.
        expect: Required type of the top-level value, or None for any.

    Returns:
        The parsed value.

    Raises:
        error: If the file is missing, a folder, too big, not UTF-8, not valid JSON, too deep, or of another
            top-level type than ``expect``.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise error(f"{path} is a folder, not a JSON file")
        if size > max_bytes:
            raise error(f"{path}: {size / 2**20:,.0f} MiB is more than the {max_bytes / 2**20:,.0f} MiB read limit")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a text file (not UTF-8), so not JSON") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or exc})") from None
    data = loads_json(text, error, str(path), max_depth)
    if expect is not None and not isinstance(data, expect):
        want = {dict: "an object {...}", list: "a list [...]"}.get(expect, expect.__name__)
        raise error(f"{path}: expected {want} at the top level, found {type(data).__name__}")
    return data
