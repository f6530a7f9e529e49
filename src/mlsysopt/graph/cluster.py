"""DeviceCluster: heterogeneous devices, the hardware types they support, and the links between them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import ConstraintViolation, InvalidCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.io import read_json, write_json_atomic


class DeviceCluster:
    """Devices with a speed and supported hardware types; per-pair bandwidth (bytes/s) and delay (s).

    Sending ``b`` bytes from device ``d1`` to ``d2 != d1`` takes ``delay[d1, d2] + b / bandwidth[d1, d2]``;
    on one device it is free (the diagonal is normalized to bandwidth = inf, delay = 0).
    Instances are immutable in spirit: :meth:`add_device` and :meth:`remove_device` return new clusters.
    """

    def __init__(
        self,
        speed: Any,
        supports: Any,
        bandwidth: Any,
        delay: Any,
        names: Sequence[str] | None = None,
    ) -> None:
        self.speed = _arr(speed, np.float64, "speed")
        sup = _arr(supports, bool, "supports")
        self.supports = sup.reshape(-1, 1) if sup.ndim == 1 else sup
        self.bandwidth = _arr(bandwidth, np.float64, "bandwidth").copy()
        self.delay = _arr(delay, np.float64, "delay").copy()
        d = self.speed.shape[0] if self.speed.ndim == 1 else -1
        self.names = [f"dev{i}" for i in range(max(d, 0))] if names is None else [str(s) for s in names]
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
        return DeviceCluster(np.append(self.speed, speed), np.vstack([self.supports, sup]), bw, dl, [*self.names, name])

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
        )

    def __repr__(self) -> str:
        return f"DeviceCluster(devices={self.num_devices}, types={self.num_types})"

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (diagonal entries written as null)."""

        def mat(a: np.ndarray) -> list[list[float | None]]:
            return [[None if i == j else float(v) for j, v in enumerate(row)] for i, row in enumerate(a)]

        return {
            "names": self.names,
            "speed": self.speed.tolist(),
            "supports": self.supports.astype(int).tolist(),
            "bandwidth": mat(self.bandwidth),
            "delay": mat(self.delay),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "cluster") -> DeviceCluster:
        """Build from :meth:`to_dict` output; errors name ``where`` and the missing key."""
        if not isinstance(data, dict):
            raise InvalidCluster(f"{where}: expected a JSON object, got {type(data).__name__}")
        for key in ("speed", "supports", "bandwidth", "delay"):
            if key not in data:
                raise InvalidCluster(f"{where}: missing key '{key}'")

        def mat(rows: Any, fill: float, key: str) -> np.ndarray:
            out = np.array([[fill if v is None else v for v in row] for row in rows], dtype=np.float64)
            for i, row in enumerate(rows):
                for j, v in enumerate(row):
                    if v is None and i != j:
                        raise InvalidCluster(f"{where}: '{key}'[{i}][{j}] is null (only the diagonal may be)")
            return out

        try:
            return cls(
                data["speed"],
                data["supports"],
                mat(data["bandwidth"], np.inf, "bandwidth"),
                mat(data["delay"], 0.0, "delay"),
                data.get("names"),
            )
        except InvalidCluster as exc:
            raise InvalidCluster(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise InvalidCluster(f"{where}: malformed matrix ({exc})") from None

    def save(self, path: str | Path) -> Path:
        """Write JSON atomically."""
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> DeviceCluster:
        """Read a cluster JSON file."""
        path = Path(path)
        return cls.from_dict(read_json(path, InvalidCluster), where=str(path))


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
