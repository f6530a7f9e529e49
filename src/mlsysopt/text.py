"""Small text helpers for messages and tables that every package prints (no dependencies)."""

from __future__ import annotations


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``"1 core"``, ``"2 cores"``, ``"1,000 tasks"`` (``many``: an irregular plural, e.g. ``"search(es)"``)."""
    count = f"{n:,}" if isinstance(n, int) or float(n).is_integer() else f"{n:g}"
    return f"{count} {word if n == 1 else (many or word + 's')}"
