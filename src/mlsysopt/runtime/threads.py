"""Thread settings for small-tensor work: torch's intra-op threads cost more than they give there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the caller's setting.

    Args:
        n: torch intra-op threads inside the ``with`` block (>= 1).
    """
    import torch  # deferred: torch loads only when its thread count is set

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
