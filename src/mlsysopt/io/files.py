"""Atomic file writes and safe torch checkpoints, shared by every package.

Every output goes through :func:`write_atomic`: a temp file beside the target, then a rename, so a reader (or a
resumed run) never sees half a file. Temp files are named ``.NAME.XXXX.tmp``; :func:`remove_stale_temps` clears
the ones a killed process left behind. Files get the permissions of the caller's umask, like ``open()`` would.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from mlsysopt.errors import WriteFailed

TEMP_SUFFIX = ".tmp"
_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0)
        os.umask(_UMASK)
    return _UMASK


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it into place (never a half file).

    Raises :class:`~mlsysopt.errors.WriteFailed` naming ``path`` (not the temp file) when the disk is full,
    read-only or not writable.

    Args:
        path: The file to write; missing parent folders are created.
        data: The content; ``str`` is encoded as UTF-8.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        WriteFailed: If the folder cannot be created or the file cannot be written or renamed.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return path


@contextlib.contextmanager
def open_atomic(path: str | Path) -> Iterator[TextIO]:
    """A text file to write ``path`` through, streamed: it is a temp file beside ``path`` renamed into place when
    the block ends without an exception (removed otherwise), so a reader never sees a half file.

    Args:
        path: The file to write; missing parent folders are created.

    Yields:
        The open temp file (UTF-8 text).

    Raises:
        WriteFailed: If the folder cannot be created or the file cannot be written or renamed.
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the ``.NAME.XXXX.tmp`` files a killed writer left in ``folder``; returns what was removed.

    Args:
        folder: The folder to clean (not recursive); a missing folder removes nothing.

    Returns:
        The paths of the removed temp files.
    """
    removed = []
    for p in Path(folder).glob(f".*{TEMP_SUFFIX}"):
        if p.is_file():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def save_torch_atomic(path: str | Path, obj: Any) -> Path:
    """``torch.save`` ``obj`` to ``path`` via a temp file and a rename (never a half-written checkpoint).

    Args:
        path: The checkpoint file to write; missing parent folders are created.
        obj: What to save; keep it to tensors and plain data so that :func:`load_torch` can read it back.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        WriteFailed: If the file cannot be written.
    """
    import torch  # deferred: torch loads only when a checkpoint is saved

    buf = io.BytesIO()
    torch.save(obj, buf)
    return write_atomic(path, buf.getvalue())


def load_torch(path: str | Path, error: type[Exception]) -> Any:
    """``torch.load`` (weights only, onto the CPU), raising ``error`` that says why a file is missing or unreadable.

    torch's own message for a file that is not weights-only advises loading it unsafely; that advice is never
    passed on: such a file is refused as not a mlsysopt checkpoint.

    Args:
        path: The checkpoint file.
        error: The exception class to raise (typically an :class:`~mlsysopt.errors.MlsysoptError` subclass).

    Returns:
        The loaded object, its tensors on the CPU.

    Raises:
        error: If the file is missing, not in torch's zip format, holds non-weights objects, or cannot be read.
    """

    import torch  # deferred: torch loads only when a checkpoint is loaded

    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: no such checkpoint file")
    if not zipfile.is_zipfile(path):
        raise error(f"{path}: not a readable checkpoint (the file is not in torch's format)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        why = "it holds objects other than tensors and plain data, so mlsysopt did not write it"
        raise error(f"{path}: not a readable checkpoint ({why})") from None
    except Exception as exc:  # torch raises many types for a truncated or foreign file
        raise error(f"{path}: not a readable checkpoint ({type(exc).__name__}: {safe_first_line(exc)})") from None


#: Phrases of library messages that advise turning a safety check off; such messages are never shown.
_UNSAFE_ADVICE = ("weights_only=False", "allow_pickle", "unsafe", "trust_remote_code")


def safe_first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of a library's error message, unless it advises loading data unsafely.

    Args:
        exc: The exception whose message to show.
        limit: Most characters kept of the first line.

    Returns:
        The (truncated) first line, or a neutral sentence when the message mentions an unsafe option.
    """
    text = (str(exc).strip().splitlines() or [""])[0][:limit]
    if any(p in str(exc) for p in _UNSAFE_ADVICE):
        return "the file is not in the expected format"
    return text
