"""DeviceCluster: heterogeneous devices, the hardware types they support, and the links between them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import ConstraintViolation, InvalidCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.units import UNIT_SYSTEMS, describe_units
from mlsysopt.io import read_json, write_json_atomic


class DeviceCluster:
    """Devices with a speed and supported hardware types; per-pair bandwidth (bytes/s) and delay (s).

    Sending ``b`` bytes from device ``d1`` to ``d2 != d1`` takes ``delay[d1, d2] + b / bandwidth[d1, d2]``;
    on one device it is free (the diagonal is normalized to bandwidth = inf, delay = 0).
    Instances are immutable in spirit: :meth:`add_device` and :meth:`remove_device` return new clusters.

    ``units`` is the unit system the numbers are in (``dnn``, ``workflow``, ``synthetic``; see
    :mod:`mlsysopt.graph.units`), None when unknown; ``meta`` says where the cluster came from (a preset, ...).

    Args:
        speed: Compute per second of every device (finite, > 0), in the graph's ``compute`` unit.
        supports: Whether device ``d`` can run hardware type ``t``; a 1-D array means a single type.
        bandwidth: Link bandwidth in bytes/s from device ``d1`` to ``d2`` (> 0, may be inf); the diagonal is ignored.
        delay: Link latency in seconds from ``d1`` to ``d2`` (finite, >= 0); the diagonal is ignored.
        names: Distinct device names; None means ``dev0``, ``dev1``, ...
        units: Unit system of the numbers (a key of ``mlsysopt.graph.units.UNIT_SYSTEMS``), or None if unknown.
        meta: Free-form JSON-ready metadata about where the cluster came from.
        overhead: Seconds every task pays on each device besides its compute (an operator's dispatch or a
            kernel's launch; finite, >= 0); None: 0. A task takes ``compute / speed + overhead`` there.

    Shapes:
        speed: (num_devices,) float64
        overhead: (num_devices,) float64 seconds
        supports: (num_devices, num_types) bool
        bandwidth: (num_devices, num_devices) float64 bytes/s
        delay: (num_devices, num_devices) float64 seconds

    Raises:
        InvalidCluster: If there are no devices, shapes disagree, names repeat, a speed, bandwidth or delay is
            out of range, or ``units`` is unknown.
    """

    def __init__(
        self,
        speed: Any,
        supports: Any,
        bandwidth: Any,
        delay: Any,
        names: Sequence[str] | None = None,
        units: str | None = None,
        meta: Mapping[str, Any] | None = None,
        overhead: Any = None,
    ) -> None:
        self.speed = _arr(speed, np.float64, "speed")
        n_dev = self.speed.shape[0] if self.speed.ndim == 1 else 0
        self.overhead = np.zeros(n_dev) if overhead is None else _arr(overhead, np.float64, "overhead").copy()
        sup = _arr(supports, bool, "supports")
        self.supports = sup.reshape(-1, 1) if sup.ndim == 1 else sup
        self.bandwidth = _arr(bandwidth, np.float64, "bandwidth").copy()
        self.delay = _arr(delay, np.float64, "delay").copy()
        d = self.speed.shape[0] if self.speed.ndim == 1 else -1
        self.names = [f"dev{i}" for i in range(max(d, 0))] if names is None else [str(s) for s in names]

        if units is not None and units not in UNIT_SYSTEMS:
            raise InvalidCluster(f"units '{units}' is not one of {', '.join(UNIT_SYSTEMS)}")
        self.units = units
        self.meta = dict(meta or {})
        self.validate()
        np.fill_diagonal(self.bandwidth, np.inf)
        np.fill_diagonal(self.delay, 0.0)
        with np.errstate(divide="ignore"):
            self.inv_bandwidth = 1.0 / self.bandwidth

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise InvalidCluster naming the device or link that is wrong."""
        if self.speed.ndim != 1 or self.speed.size == 0:
            raise InvalidCluster("cluster has no devices")
        d = self.speed.size
        if len(self.names) != d or len(set(self.names)) != d:
            raise InvalidCluster(f"need {d} distinct device names, got {self.names}")
        for i, s in enumerate(self.speed):
            if not np.isfinite(s) or s <= 0:
                raise InvalidCluster(f"device '{self.names[i]}' has speed {s}: speed must be finite and > 0")
        if self.overhead.shape != (d,):
            raise InvalidCluster(f"overhead has shape {self.overhead.shape}, expected ({d},): one per device")
        for i, o in enumerate(self.overhead):
            if not np.isfinite(o) or o < 0:
                raise InvalidCluster(
                    f"device '{self.names[i]}' has overhead {o}: the per-task overhead must be finite and >= 0 seconds"
                )
        if self.supports.ndim != 2 or self.supports.shape[0] != d or self.supports.shape[1] == 0:
            raise InvalidCluster(f"supports has shape {self.supports.shape}, expected ({d}, num_types)")
        for key, mat in (("bandwidth", self.bandwidth), ("delay", self.delay)):
            if mat.shape != (d, d):
                raise InvalidCluster(f"{key} has shape {mat.shape}, expected ({d}, {d})")
        off = ~np.eye(d, dtype=bool)
        bad = off & ~(self.bandwidth > 0)  # catches NaN too
        if bad.any():
            i, j = (int(v[0]) for v in np.nonzero(bad))
            raise InvalidCluster(
                f"link '{self.names[i]}' -> '{self.names[j]}' has bandwidth {self.bandwidth[i, j]}: must be > 0"
            )
        bad = off & ~(np.isfinite(self.delay) & (self.delay >= 0))
        if bad.any():
            i, j = (int(v[0]) for v in np.nonzero(bad))
            what = "disconnected (infinite delay)" if np.isposinf(self.delay[i, j]) else f"delay {self.delay[i, j]}"
            raise InvalidCluster(
                f"link '{self.names[i]}' -> '{self.names[j]}' is {what}: delay must be finite and >= 0"
            )

    # ------------------------------------------------------------------ queries
    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return int(self.speed.size)

    @property
    def num_types(self) -> int:
        """Number of hardware types the ``supports`` matrix covers."""
        return int(self.supports.shape[1])

    def index(self, name: str) -> int:
        """Device id of a device name."""
        try:
            return self.names.index(name)
        except ValueError:
            raise InvalidCluster(f"no device named '{name}' (have: {', '.join(self.names)})") from None

    def comm_time(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (0 on one device)."""
        if src == dst:
            return 0.0
        return float(self.delay[src, dst] + nbytes / self.bandwidth[src, dst])

    def feasible(self, graph: CompGraph) -> np.ndarray:
        """Boolean (tasks, devices) matrix: may task i run on device d (by hardware type)?"""
        t = graph.hw_type
        mask = np.zeros((graph.num_nodes, self.num_devices), dtype=bool)
        known = t < self.num_types
        mask[known] = self.supports[:, t[known]].T
        return mask

    def check_feasible(self, graph: CompGraph) -> np.ndarray:
        """The feasibility matrix, or ConstraintViolation naming a task no device can run."""
        mask = self.feasible(graph)
        none = np.flatnonzero(~mask.any(axis=1))
        if none.size:
            i = int(none[0])
            raise ConstraintViolation(
                f"task '{graph.names[i]}' needs hardware type {int(graph.hw_type[i])}, which no device in the "
                f"cluster supports ({none.size} task(s) affected)"
            )
        return mask

    # ------------------------------------------------------------------ dynamics
    def add_device(
        self,
        speed: float,
        supports: Sequence[bool] | np.ndarray,
        bandwidth: float | Sequence[float],
        delay: float | Sequence[float],
        name: str | None = None,
        overhead: float = 0.0,
    ) -> DeviceCluster:
        """A new cluster with one more device; ``bandwidth``/``delay`` to every existing device (symmetric)."""
        d = self.num_devices
        name = name or _fresh_name(self.names)
        sup = np.asarray(supports, dtype=bool).reshape(1, -1)
        if sup.shape[1] != self.num_types:
            raise InvalidCluster(f"new device '{name}' gives {sup.shape[1]} types, cluster has {self.num_types}")
        bw_col = np.broadcast_to(np.asarray(bandwidth, np.float64), (d,))
        dl_col = np.broadcast_to(np.asarray(delay, np.float64), (d,))
        bw = np.full((d + 1, d + 1), np.inf)
        bw[:d, :d] = self.bandwidth
        bw[d, :d] = bw[:d, d] = bw_col
        dl = np.zeros((d + 1, d + 1))
        dl[:d, :d] = self.delay
        dl[d, :d] = dl[:d, d] = dl_col
        return DeviceCluster(
            np.append(self.speed, speed),
            np.vstack([self.supports, sup]),
            bw,
            dl,
            [*self.names, name],
            self.units,
            self.meta,
            np.append(self.overhead, overhead),
        )

    def remove_device(self, device: int | str) -> DeviceCluster:
        """A new cluster without ``device`` (an id or a name); the last device cannot be removed."""
        i = self.index(device) if isinstance(device, str) else int(device)
        if not 0 <= i < self.num_devices:
            raise InvalidCluster(f"no device {i}: the cluster has {self.num_devices}")
        if self.num_devices == 1:
            raise InvalidCluster(f"cannot remove '{self.names[i]}': it is the last device of the cluster")
        keep = np.flatnonzero(np.arange(self.num_devices) != i)
        return DeviceCluster(
            self.speed[keep],
            self.supports[keep],
            self.bandwidth[np.ix_(keep, keep)],
            self.delay[np.ix_(keep, keep)],
            [self.names[k] for k in keep],
            self.units,
            self.meta,
            self.overhead[keep],
        )

    def __repr__(self) -> str:
        return f"DeviceCluster(devices={self.num_devices}, types={self.num_types})"

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (diagonal entries written as null; ``units``/``meta`` only when known)."""

        def mat(a: np.ndarray) -> list[list[float | None]]:
            return [[None if i == j else float(v) for j, v in enumerate(row)] for i, row in enumerate(a)]

        out: dict[str, Any] = {
            "names": self.names,
            "speed": self.speed.tolist(),
            "supports": self.supports.astype(int).tolist(),
            "bandwidth": mat(self.bandwidth),
            "delay": mat(self.delay),
        }
        if (self.overhead > 0).any():
            out["overhead"] = self.overhead.tolist()
        if self.units is not None:
            out["units"] = describe_units(self.units)
        if self.meta:
            out["meta"] = self.meta
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "cluster") -> DeviceCluster:
        """Build from :meth:`to_dict` output; errors name ``where`` and the key (and entry) that is wrong.

        Numbers must be JSON numbers (a string such as ``"1.5"`` is refused, not read); ``supports`` entries must
        be ``true``/``false`` or ``0``/``1`` (``"no"`` is refused, not read as true).
        """
        if not isinstance(data, dict):
            raise InvalidCluster(f"{where}: expected a JSON object, got {type(data).__name__}")
        for key in ("speed", "supports", "bandwidth", "delay"):
            if key not in data:
                raise InvalidCluster(f"{where}: missing key '{key}'")
        speed = _numbers(data["speed"], where, "speed", depth=1)
        supports = _flags(data["supports"], where)
        bandwidth = _numbers(data["bandwidth"], where, "bandwidth", depth=2, diagonal=math.inf)
        delay = _numbers(data["delay"], where, "delay", depth=2, diagonal=0.0)
        names = data.get("names")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) and n for n in names)):
            raise InvalidCluster(f"{where}: 'names' must be a list of non-empty strings")
        units = data.get("units")
        if isinstance(units, dict):
            units = units.get("system")
        if units is not None and not isinstance(units, str):
            raise InvalidCluster(f"{where}: 'units' must be a unit-system name or an object with 'system'")
        meta = data.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise InvalidCluster(f"{where}: 'meta' must be a JSON object, got {type(meta).__name__}")
        overhead = data.get("overhead")
        if overhead is not None:
            overhead = _numbers(overhead, where, "overhead", depth=1)
        try:
            return cls(speed, supports, bandwidth, delay, names, units, meta, overhead)
        except InvalidCluster as exc:
            raise InvalidCluster(f"{where}: {exc}") from None

    def save(self, path: str | Path) -> Path:
        """Write JSON atomically."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> DeviceCluster:
        """Read a cluster JSON file."""
        path = Path(path)
        return cls.from_dict(read_json(path, InvalidCluster), where=str(path))


def _numbers(value: Any, where: str, key: str, depth: int, diagonal: float | None = None) -> np.ndarray:
    """A JSON list (``depth`` 1) or square list of lists (2) of numbers; null only on a matrix diagonal."""
    rows = value if depth == 2 else [value]
    if not isinstance(value, list) or not all(isinstance(r, list) for r in rows):
        shape = "a list of lists" if depth == 2 else "a list"
        raise InvalidCluster(f"{where}: '{key}' must be {shape} of numbers, got {type(value).__name__}")
    out = []
    for i, row in enumerate(rows):
        vals = []
        for j, v in enumerate(row):
            at = f"'{key}'[{i}][{j}]" if depth == 2 else f"'{key}'[{j}]"
            if v is None and depth == 2 and i == j and diagonal is not None:
                v = diagonal
            elif v is None:
                only = " (only the diagonal may be)" if depth == 2 else ""
                raise InvalidCluster(f"{where}: {at} is null{only}")
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InvalidCluster(f"{where}: {at} is {v!r}: expected a number")
            vals.append(float(v))
        out.append(vals)
    if depth == 2 and len({len(r) for r in out}) > 1:
        raise InvalidCluster(f"{where}: '{key}' rows have different lengths")
    if not out or not out[0]:
        return np.zeros((0,) * depth)
    arr = np.asarray(out, dtype=np.float64)
    return arr[0] if depth == 1 else arr


def _flags(value: Any, where: str) -> np.ndarray:
    """``supports``: a list of lists (or a flat list) of true/false or 0/1."""
    rows = value if isinstance(value, list) and all(isinstance(r, list) for r in value) else [value]
    if not isinstance(value, list):
        raise InvalidCluster(f"{where}: 'supports' must be a list of lists of true/false, got {type(value).__name__}")
    flat = rows is not value
    out = []
    for i, row in enumerate(rows):
        vals = []
        for j, v in enumerate(row):
            if not (isinstance(v, bool) or (isinstance(v, int) and v in (0, 1))):
                at = f"'supports'[{j}]" if flat else f"'supports'[{i}][{j}]"
                raise InvalidCluster(f"{where}: {at} is {v!r}: expected true/false or 0/1")
            vals.append(bool(v))
        out.append(vals)
    if len({len(r) for r in out}) > 1:
        raise InvalidCluster(f"{where}: 'supports' rows have different lengths")
    if not out or not out[0]:
        return np.zeros((0, 0), dtype=bool)
    arr = np.asarray(out, dtype=bool)
    return arr[0] if flat else arr


def _arr(value: Any, dtype: Any, key: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidCluster(f"'{key}' cannot be read as numbers: {exc}") from None


def _fresh_name(names: list[str]) -> str:
    k = len(names)
    while f"dev{k}" in names:
        k += 1
    return f"dev{k}"
