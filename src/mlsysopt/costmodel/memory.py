"""Peak TENSOR memory of a block of PyTorch work (a training step), from PyTorch's own accounting, not process RSS.

How it is measured:

* **CUDA** — ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was allocated on
  entry: the caching allocator's count of live tensor bytes.
* **CPU** — a ``TorchDispatchMode`` sees every ATen op (forward, autograd backward and optimizer kernels all
  dispatch through it). For each output tensor it records the byte size of the tensor's *storage* once and
  attaches a ``weakref.finalize`` to the storage, which subtracts those bytes when PyTorch frees it. An output that
  shares a storage with one of the op's inputs (a view, an in-place result) is not an allocation and is skipped.
  The running sum is the bytes of live tensors allocated inside the block; its maximum is the peak. Inputs copied
  onto the compute device inside the block (``.to(device, copy=True)``, ``.clone()``) count; numpy arrays and
  tensors that merely wrap them (``torch.from_numpy``) do not, nor do tensors that already existed on entry
  (parameters, optimizer state from earlier steps). Allocations an op makes and frees internally (C++ scratch
  space) are not seen. On a SAGE forward+backward this agrees with the profiler's ``profile_memory`` allocator
  events to within kilobytes, at far less cost.

The host's own footprint (the dataset's numpy arrays, Python objects) is reported separately by :func:`host_rss_mb`.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_MB = float(1 << 20)


def _tensors(x: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """Every tensor in an ATen op's arguments or result (tensors, lists/tuples of them, kwargs dicts), into ``out``:
    what ``torch.utils._pytree.tree_flatten`` would find, at a fraction of its cost on every op of a step."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, list | tuple):
        for y in x:
            _tensors(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _tensors(y, out)
    return out


class _StorageTracker(TorchDispatchMode):
    """Counts live bytes of storages first seen as an op's output while the mode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.paused = False
        self._seen: dict[int, int] = {}
        self._lock = threading.Lock()

    def _freed(self, key: int, nbytes: int) -> None:
        with self._lock:
            if self._seen.pop(key, None) is not None:
                self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        # An output sharing a storage with an input is a view or an in-place result, not an allocation.
        inputs = {t.untyped_storage()._cdata for t in _tensors((args, kwargs), []) if t.device.type != "meta"}
        for t in _tensors(out, []):
            if t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs:
                continue
            nbytes = storage.nbytes()
            with self._lock:
                if key in self._seen:
                    continue
                self._seen[key] = nbytes
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._freed, key, nbytes)
        return out


class PeakMemory:
    """Context manager: ``with PeakMemory(device) as pm: step()`` then ``pm.peak_mb`` (tensor bytes, MiB).

    ``peak_mb`` is the most memory held at once by tensors allocated inside the block; ``end_mb`` is what they
    still hold at exit (e.g. gradients kept for the optimizer). See the module docstring for the accounting.
    ``enabled=False`` measures nothing (peak 0) at no cost; ``paused()`` leaves out a sub-block's allocations.

    Args:
        device: Torch device measured (CUDA: the allocator's statistics; CPU: tensors allocated in the block).
        enabled: Whether to measure at all (False: ``peak_mb`` and ``end_mb`` stay 0).
    """

    def __init__(self, device: str | torch.device = "cpu", enabled: bool = True) -> None:
        self.device = torch.device(device)
        self.enabled = enabled
        self.peak_mb = 0.0
        self.end_mb = 0.0
        self._tracker: _StorageTracker | None = None
        self._base = 0

    def __enter__(self) -> PeakMemory:
        if not self.enabled:
            return self
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            self._tracker = _StorageTracker()
            self._tracker.__enter__()
        return self

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Do not count tensors allocated inside this block (CPU accounting; e.g. a loader's own tensors)."""
        tracker = self._tracker
        if tracker is None:
            yield
            return
        before, tracker.paused = tracker.paused, True
        try:
            yield
        finally:
            tracker.paused = before

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / _MB
            self.end_mb = (torch.cuda.memory_allocated(self.device) - self._base) / _MB
            return
        assert self._tracker is not None
        self._tracker.__exit__(*exc)
        self.peak_mb = self._tracker.peak / _MB
        self.end_mb = self._tracker.live / _MB


def host_rss_mb() -> float:
    """Resident set size of this process in MiB (the host's copy of everything, not just tensors).

    Returns:
        float: Resident set size in MiB (the peak RSS where ``/proc/self/statm`` is unavailable).
    """
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / _MB
    except (OSError, ValueError, IndexError):
        import resource  # deferred: resource exists only on Unix; the fallback where /proc is missing

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # peak, in KiB on Linux
