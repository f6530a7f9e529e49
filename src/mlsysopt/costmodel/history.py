"""Historical embedding table for GST+E: the last fresh unit of every (graph, row), on the host.

A *row* is an integer key the trainer derives from (configuration, segment): with ``history_key="signature"``
(the default) ``offsets[s] + signature(c, s)``, so every configuration that agrees on segment ``s``'s configurable
nodes shares one row (a segment without configurable nodes has one row for all configurations); with
``"config"`` (the reference's TpuGraphs key, kept for the ablation) ``c * S + s``. A *unit* is what the model sums
over segments: a segment embedding (``dim = embed_dim``) or, with the scalar readout, the segment's score (1).

Each graph owns a slot map (row -> slot, -1 when never written) and preallocated CPU tensors grown on demand
(capacity doubles): ``emb (slots, dim)`` float32 and ``stamp (slots,)`` int64, the table's ``step`` when the row was
written. So a graph only pays for the rows actually written, and ``get`` is one gather. Entries are detached
float32 copies: the table never holds autograd history or views of the caller's tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mlsysopt.errors import InvalidCheckpoint, InvalidOption

IndexLike = Sequence[int] | np.ndarray | torch.Tensor


def _rows(values: IndexLike) -> np.ndarray:
    arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidOption(f"row indices must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise InvalidOption(f"row indices must be >= 0, got {int(arr.min())}")
    return arr


class _GraphRows:
    """Storage of one graph: row -> slot, and the slot tensors."""

    def __init__(self, dim: int) -> None:
        self.slot = np.full(0, -1, np.int64)
        self.used = 0
        self.emb = torch.zeros(0, dim)
        self.stamp = torch.zeros(0, dtype=torch.int64)

    def slots(self, rows: np.ndarray, create: bool) -> np.ndarray:
        if rows.size and rows.max() >= self.slot.size:
            if not create:
                out = np.full(rows.size, -1, np.int64)
                ok = rows < self.slot.size
                out[ok] = self.slot[rows[ok]]
                return out
            grown = np.full(max(int(rows.max()) + 1, 2 * self.slot.size), -1, np.int64)
            grown[: self.slot.size] = self.slot
            self.slot = grown
        out = self.slot[rows] if rows.size else np.zeros(0, np.int64)
        if create and (out < 0).any():
            new = np.unique(rows[out < 0])
            self.slot[new] = np.arange(self.used, self.used + new.size)
            self.used += new.size
            if self.used > self.emb.shape[0]:
                cap = max(self.used, 2 * self.emb.shape[0])
                emb, stamp = self.emb.new_zeros((cap, self.emb.shape[1])), self.stamp.new_zeros(cap)
                emb[: self.emb.shape[0]], stamp[: self.stamp.shape[0]] = self.emb, self.stamp
                self.emb, self.stamp = emb, stamp
            out = self.slot[rows]
        return out

    def nbytes(self) -> int:
        return self.slot.nbytes + sum(t.element_size() * t.nelement() for t in (self.emb, self.stamp))


class HistoryTable:
    """Last fresh unit per (graph, row), as detached float32 CPU copies; missing rows read as zero.

    Args:
        dim: Width of one stored unit, >= 1.

    Raises:
        InvalidOption: If ``dim`` is not an integer >= 1.
    """

    def __init__(self, dim: int) -> None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise InvalidOption(f"history table dim must be an integer >= 1, got {dim!r}")
        self.dim = int(dim)
        self.step = 0
        self._graphs: dict[str, _GraphRows] = {}

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, graph: str) -> bool:
        return graph in self._graphs

    @property
    def graphs(self) -> list[str]:
        """Names of the graphs with at least one entry."""
        return list(self._graphs)

    @property
    def nbytes(self) -> int:
        """Bytes held by the table (allocated capacity and slot maps, not just written rows)."""
        return sum(g.nbytes() for g in self._graphs.values())

    def num_entries(self, graph: str | None = None) -> int:
        """Number of rows written, for one graph or all."""
        gs = self._graphs.values() if graph is None else [self._graphs[graph]] if graph in self._graphs else []
        return sum(g.used for g in gs)

    def tick(self) -> int:
        """Advance the step counter used by :meth:`age` (call once per optimizer step); returns the new step."""
        self.step += 1
        return self.step

    def put(self, graph: str, rows: IndexLike, units: torch.Tensor | np.ndarray) -> None:
        """Store ``units`` (N, dim) for ``rows`` (N,); of repeated rows the last one wins."""
        r = _rows(rows)
        t = torch.as_tensor(units).detach().to(device="cpu", dtype=torch.float32)
        if tuple(t.shape) != (r.size, self.dim):
            raise InvalidOption(f"units of shape {tuple(t.shape)} do not match ({r.size}, {self.dim}) (rows, dim)")
        if r.size == 0:
            return
        if np.unique(r).size != r.size:  # keep the last write of a repeated row (index_copy_ order is undefined)
            _, last_rev = np.unique(r[::-1], return_index=True)
            keep = np.sort(r.size - 1 - last_rev)
            r, t = r[keep], t[torch.from_numpy(keep)]
        g = self._graphs.setdefault(graph, _GraphRows(self.dim))
        idx = torch.from_numpy(g.slots(r, create=True))
        g.emb.index_copy_(0, idx, t)
        g.stamp.index_fill_(0, idx, self.step)

    def get(
        self, graph: str, rows: IndexLike, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(units (N, dim), present (N,) bool)``; missing rows are zero / False."""
        r = _rows(rows)
        g = self._graphs.get(graph)
        if g is None:
            emb, present = torch.zeros(r.size, self.dim), torch.zeros(r.size, dtype=torch.bool)
        else:
            slot = g.slots(r, create=False)
            present = torch.from_numpy(slot >= 0)
            emb = g.emb[torch.from_numpy(np.maximum(slot, 0))]  # a gather: a new tensor, never a view
            if not bool(present.all()):
                emb[~present] = 0.0
        if device is not None:
            emb, present = emb.to(device), present.to(device)
        return emb, present

    def age(self, graph: str, rows: IndexLike) -> np.ndarray:
        """Steps since each row was written (``step - stamp``), -1 where missing; shape (N,) int64."""
        r = _rows(rows)
        g = self._graphs.get(graph)
        if g is None:
            return np.full(r.size, -1, np.int64)
        slot = g.slots(r, create=False)
        stamp = g.stamp.numpy()[np.maximum(slot, 0)] if g.used else np.zeros(r.size, np.int64)
        return np.where(slot >= 0, self.step - stamp, -1)

    def export(self, graph: str) -> tuple[np.ndarray, torch.Tensor]:
        """``(rows, units)`` of every row written for ``graph`` (what :meth:`put` takes back)."""
        g = self._graphs.get(graph)
        if g is None:
            return np.zeros(0, np.int64), torch.zeros(0, self.dim)
        rows = np.flatnonzero(g.slot >= 0)
        return rows, g.emb[torch.from_numpy(g.slot[rows])].clone()

    def drop(self, graph: str) -> None:
        """Forget one graph's entries."""
        self._graphs.pop(graph, None)

    def clear(self) -> None:
        """Forget every entry and reset the step counter."""
        self._graphs.clear()
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        """Checkpointable contents (plain tensors, ints and strings), trimmed to the written rows."""
        graphs = {}
        for name, g in self._graphs.items():
            rows = np.flatnonzero(g.slot >= 0)
            slot = torch.from_numpy(g.slot[rows])
            graphs[name] = {"rows": torch.from_numpy(rows), "emb": g.emb[slot].clone(), "stamp": g.stamp[slot].clone()}
        return {"dim": self.dim, "step": self.step, "graphs": graphs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the contents with a :meth:`state_dict`; a mismatched or malformed one raises InvalidCheckpoint."""
        try:
            dim, step, graphs = int(state["dim"]), int(state["step"]), state["graphs"]
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidCheckpoint(f"history table state is malformed: {exc!r}") from None
        if dim != self.dim:
            raise InvalidCheckpoint(f"history table has dim {dim}, this model needs {self.dim}")
        loaded: dict[str, _GraphRows] = {}
        for name, entry in graphs.items():
            try:
                rows, emb, stamp = (entry[k] for k in ("rows", "emb", "stamp"))
                r = int(rows.numel())
                ok = tuple(emb.shape) == (r, dim) and tuple(stamp.shape) == (r,)
                rows_np = rows.to(torch.int64).numpy()
            except (KeyError, TypeError, AttributeError, IndexError) as exc:
                raise InvalidCheckpoint(f"history table entry '{name}' is malformed: {exc!r}") from None
            if not ok or (r and (rows_np.min() < 0 or np.unique(rows_np).size != r)):
                raise InvalidCheckpoint(f"history table entry '{name}' has inconsistent rows, shapes or dtypes")
            g = _GraphRows(dim)
            idx = torch.from_numpy(g.slots(rows_np, create=True))
            g.emb.index_copy_(0, idx, emb.to(torch.float32))
            g.stamp.index_copy_(0, idx, stamp.to(torch.int64))
            loaded[name] = g
        self._graphs, self.step = loaded, step
