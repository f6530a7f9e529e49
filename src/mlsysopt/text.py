"""Small text helpers for messages and tables that every package prints (no dependencies)."""

from __future__ import annotations

import re

# user:password@ after a URL scheme (the password up to the last '@' before the host), and password= query options
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*):(?P<secret>[^\s/]*)@(?=[^\s@]*(?:\s|$|[/?#:]))"
)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&](?:password|passwd|pwd)=)[^&\s#]*", re.IGNORECASE)


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``"1 core"``, ``"2 cores"``, ``"1,000 tasks"`` (``many``: an irregular plural, e.g. ``"search(es)"``)."""
    count = f"{n:,}" if isinstance(n, int) or float(n).is_integer() else f"{n:g}"
    return f"{count} {word if n == 1 else (many or word + 's')}"


def mask_secrets(text: str) -> str:
    """``text`` with the password of every URL in it masked: ``postgresql://me:s3cret@host/db`` ->
    ``postgresql://me:***@host/db`` (and ``?password=...`` -> ``?password=***``).

    The one function every message, log line, settings file and store attribute that may hold a storage URL goes
    through, so that no secret is ever printed or written.

    Args:
        text: any text (a URL, a command line, an error message).

    Returns:
        The same text with passwords replaced by ``***``.
    """
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:***@", str(text))
    return _QUERY_PASSWORD.sub(lambda m: f"{m.group('head')}***", text)
