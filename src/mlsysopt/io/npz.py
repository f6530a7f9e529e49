"""A ``.npz`` file's array headers checked before any array is read, so a lying header is an error naming the file.

``np.load`` allocates what a member's header claims before it reads the data: a header claiming 10^11 rows makes
it raise ``MemoryError`` (a generic "out of memory" that names no file) or allocate gigabytes for a 300-byte member.
:func:`check_npz_headers` reads only the zip directory and each header, and refuses a member whose claimed size
differs from the bytes it holds, or is larger than this machine's memory budget.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.limits import memory_budget


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_npz_headers(path: str | Path, error: type[MlsysoptError] = MlsysoptError) -> None:
    """Raise ``error`` naming ``path`` and the key when an array header lies about its size or is too large.

    An unreadable zip is left to the caller's ``np.load`` (which names it); compressed members are checked by their
    uncompressed size.
    """
    fmt = np.lib.format
    budget = memory_budget()
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile, ValueError):
        return
    with archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[: -len(".npy")]
            try:
                with archive.open(info) as f:
                    version = fmt.read_magic(f)
                    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                    shape, _, dtype = read(f, max_header_size=100_000)
                    header = f.tell()
            except (OSError, ValueError, EOFError, zipfile.BadZipFile, SyntaxError) as exc:
                raise error(f"{path}: key '{key}' has an unreadable array header ({exc})") from None
            if dtype.hasobject:  # pickled objects: np.load refuses them itself (allow_pickle=False)
                continue
            claimed = math.prod(int(s) for s in shape) * dtype.itemsize
            held = info.file_size - header
            if claimed > budget:
                raise error(
                    f"{path}: key '{key}' claims shape {tuple(shape)} of {dtype} ({_gib(claimed)}), above this "
                    f"machine's limit of {_gib(budget)}"
                )
            if claimed != held:
                raise error(
                    f"{path}: key '{key}' claims shape {tuple(shape)} of {dtype} ({claimed:,} bytes) but holds "
                    f"{held:,} bytes: the file is corrupt or was not written by numpy"
                )
