"""Historical embedding table for GST+E: the last fresh embedding of every (graph, config, segment), on the host.

Each graph owns three preallocated CPU tensors, grown on demand (capacity doubles, so growth is amortised):
``emb (rows, segments, dim)`` float32, ``present (rows, segments)`` bool and ``stamp (rows, segments)`` int64
(the table's ``step`` when the entry was written). A row is allocated the first time a config index is put, so a
layout graph with thousands of configs only pays for the configs actually sampled. ``get`` is one gather.
MalNet graphs use config index 0. Entries are detached float32 copies: the table never holds autograd history or
views of the caller's tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mlsysopt.errors import InvalidCheckpoint, InvalidOption

IndexLike = Sequence[int] | np.ndarray | torch.Tensor | int


def _index(values: IndexLike, what: str) -> np.ndarray:
    arr = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidOption(f"{what} indices must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        raise InvalidOption(f"{what} indices must be >= 0, got {int(arr.min())}")
    return arr


class _GraphRows:
    """Storage of one graph: config index -> row, and the row x segment tensors."""

    def __init__(self, dim: int) -> None:
        self.row_of: dict[int, int] = {}
        self.configs: list[int] = []
        self.used_segments = 0
        self.emb = torch.zeros(0, 0, dim)
        self.present = torch.zeros(0, 0, dtype=torch.bool)
        self.stamp = torch.zeros(0, 0, dtype=torch.int64)

    def reserve(self, rows: int, segments: int) -> None:
        cap_r, cap_s = self.present.shape
        if rows <= cap_r and segments <= cap_s:
            return
        new_r = cap_r if rows <= cap_r else max(rows, 2 * cap_r)
        new_s = cap_s if segments <= cap_s else max(segments, 2 * cap_s)
        for name in ("emb", "present", "stamp"):
            old = getattr(self, name)
            new = old.new_zeros((new_r, new_s, *old.shape[2:]))
            new[:cap_r, :cap_s] = old
            setattr(self, name, new)

    def rows(self, configs: np.ndarray, create: bool) -> np.ndarray:
        out = np.empty(configs.size, dtype=np.int64)
        for i, c in enumerate(configs.tolist()):
            r = self.row_of.get(c, -1)
            if r < 0 and create:
                r = self.row_of[c] = len(self.configs)
                self.configs.append(c)
            out[i] = r
        return out

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (self.emb, self.present, self.stamp))


class HistoryTable:
    """Last fresh embedding per (graph, config, segment), as detached float32 CPU copies; missing rows read as zero."""

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
        """Bytes held by the table's tensors (allocated capacity, not just written entries)."""
        return sum(g.nbytes() for g in self._graphs.values())

    def num_entries(self, graph: str | None = None) -> int:
        """Number of (config, segment) entries written, for one graph or all."""
        gs = self._graphs.values() if graph is None else [self._graphs[graph]] if graph in self._graphs else []
        return sum(int(g.present.sum()) for g in gs)

    def tick(self) -> int:
        """Advance the step counter used by :meth:`age` (call once per optimizer step); returns the new step."""
        self.step += 1
        return self.step

    def reserve(self, graph: str, num_configs: int, num_segments: int) -> None:
        """Preallocate room for ``num_configs`` configs x ``num_segments`` segments (avoids regrowth copies)."""
        self._graphs.setdefault(graph, _GraphRows(self.dim)).reserve(num_configs, num_segments)

    def put(self, graph: str, configs: IndexLike, segment: int | IndexLike, emb: torch.Tensor | np.ndarray) -> None:
        """Store ``emb`` for ``configs`` x ``segment``: (C, dim) for one segment, (C, S, dim) for S segments."""
        cfg = _index(configs, "config")
        segs = _index(segment, "segment")
        t = torch.as_tensor(emb).detach().to(device="cpu", dtype=torch.float32)
        single = segment.ndim == 0 if isinstance(segment, torch.Tensor) else np.ndim(segment) == 0
        want = (cfg.size, self.dim) if single else (cfg.size, segs.size, self.dim)
        if tuple(t.shape) != want:
            raise InvalidOption(f"embedding shape {tuple(t.shape)} does not match {want} (configs, [segments,] dim)")
        if cfg.size == 0 or segs.size == 0:
            return
        if single:
            t = t.unsqueeze(1)
        if np.unique(cfg).size != cfg.size:  # keep the last write of a repeated config (index_copy_ order is undefined)
            _, last_rev = np.unique(cfg[::-1], return_index=True)
            keep = np.sort(cfg.size - 1 - last_rev)
            cfg, t = cfg[keep], t[torch.from_numpy(keep)]
        if np.unique(segs).size != segs.size:
            _, last_rev = np.unique(segs[::-1], return_index=True)
            keep = np.sort(segs.size - 1 - last_rev)
            segs, t = segs[keep], t[:, torch.from_numpy(keep)]
        g = self._graphs.setdefault(graph, _GraphRows(self.dim))
        rows = g.rows(cfg, create=True)
        g.reserve(len(g.configs), int(segs.max()) + 1)
        g.used_segments = max(g.used_segments, int(segs.max()) + 1)
        r = torch.from_numpy(rows)
        # One in-place index_copy_ per segment column: far cheaper than a 2-D advanced-index assignment.
        for j, sg in enumerate(segs.tolist()):
            g.emb[:, sg].index_copy_(0, r, t[:, j])
            g.present[:, sg].index_fill_(0, r, True)
            g.stamp[:, sg].index_fill_(0, r, self.step)

    def _lookup(
        self, graph: str, configs: IndexLike, segments: IndexLike
    ) -> tuple[_GraphRows | None, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Gather indices ``(rows (C, 1), segments (1, S))`` into the graph's tensors and the (C, S) present mask."""
        cfg, segs = _index(configs, "config"), _index(segments, "segment")
        g = self._graphs.get(graph)
        if g is None or g.present.numel() == 0:
            return (
                None,
                (torch.zeros(cfg.size, 1), torch.zeros(1, segs.size)),
                torch.zeros(cfg.size, segs.size, dtype=torch.bool),
            )
        rows = g.rows(cfg, create=False)
        ok_r, ok_s = rows >= 0, segs < g.present.shape[1]
        r = torch.from_numpy(np.where(ok_r, rows, 0))[:, None]
        s = torch.from_numpy(np.where(ok_s, segs, 0))[None, :]
        present = g.present[r, s] & torch.from_numpy(ok_r[:, None] & ok_s[None, :])
        return g, (r, s), present

    def get(
        self, graph: str, configs: IndexLike, segments: IndexLike, device: torch.device | str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(emb (C, S, dim), present (C, S) bool)`` for ``configs`` x ``segments``; missing entries are zero/False."""
        g, idx, present = self._lookup(graph, configs, segments)
        if g is None:
            emb = torch.zeros(*present.shape, self.dim)
        else:
            emb = g.emb[idx]  # a gather: a new tensor, never a view of the table
            if not bool(present.all()):
                # unwritten entries are zero in the table, but unknown configs / segments were gathered from index 0
                emb[~present] = 0.0
        if device is not None:
            emb, present = emb.to(device), present.to(device)
        return emb, present

    def age(self, graph: str, configs: IndexLike, segments: IndexLike) -> torch.Tensor:
        """Steps since each entry was written (``step - stamp``), -1 where missing; shape (C, S) int64."""
        g, idx, present = self._lookup(graph, configs, segments)
        if g is None:
            return torch.full(present.shape, -1, dtype=torch.int64)
        return torch.where(present, self.step - g.stamp[idx], -1)

    def drop(self, graph: str) -> None:
        """Forget one graph's entries."""
        self._graphs.pop(graph, None)

    def clear(self) -> None:
        """Forget every entry and reset the step counter."""
        self._graphs.clear()
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        """Checkpointable contents (plain tensors, ints and strings), trimmed to the written extent."""
        graphs = {}
        for name, g in self._graphs.items():
            r, s = len(g.configs), g.used_segments
            graphs[name] = {
                "configs": torch.tensor(g.configs, dtype=torch.int64),
                "emb": g.emb[:r, :s].clone(),
                "present": g.present[:r, :s].clone(),
                "stamp": g.stamp[:r, :s].clone(),
            }
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
                configs, emb, present, stamp = (entry[k] for k in ("configs", "emb", "present", "stamp"))
                r, s = int(configs.numel()), int(present.shape[1])
                ok = emb.shape == (r, s, dim) and present.shape == (r, s) and stamp.shape == (r, s)
            except (KeyError, TypeError, AttributeError, IndexError) as exc:
                raise InvalidCheckpoint(f"history table entry '{name}' is malformed: {exc!r}") from None
            if not ok or present.dtype != torch.bool:
                raise InvalidCheckpoint(f"history table entry '{name}' has inconsistent shapes or dtypes")
            g = _GraphRows(dim)
            g.rows(configs.to(torch.int64).numpy(), create=True)
            if len(g.configs) != r:
                raise InvalidCheckpoint(f"history table entry '{name}' lists a config twice")
            g.reserve(r, s)
            g.emb[:r, :s] = emb.to(torch.float32)
            g.present[:r, :s] = present
            g.stamp[:r, :s] = stamp.to(torch.int64)
            g.used_segments = s
            loaded[name] = g
        self._graphs, self.step = loaded, step
