"""Whether a run that its study lists as ``running`` still has an owner, told from its run folder alone.

A run holds an exclusive ``flock`` on ``RUN_DIR/.lock`` from before its study opens until after the study's final
status is written, and its ``log.txt`` ends with ``=== STATUS · N s`` once it closed. A study left ``running`` by a
process that is gone (``kill -9``, the machine lost, or a final status write the store refused or did not take within
a stop's grace) is therefore told without writing to the store, which another process may be using:

- the lock is held (by the study's own process): ``running``;
- the lock is free and the log ends with the run's own status: that status, ``done`` shown as ``incomplete`` (the
  run finished; the store lacks its last writes), so a finished run is never listed as ``killed``;
- the lock is free (a ``.lock`` that holds no lock is what ``kill -9`` leaves) and the log has no final status:
  ``killed``; its ``--resume`` takes the lock over, fails the trials left ``running`` and writes the status.

The kernel releases a dead process's ``flock``, so this holds after a reboot or a reused pid too; only a folder on
this machine is read (the caller checks the study's machine).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from mlsysopt.io.rundir import LOCK, LOG

#: Bytes read from the end of ``log.txt`` to find its last ``===`` line (a header or the final status).
TAIL_BYTES = 64 * 1024
#: The statuses a closed run's log ends with that the store would have shown as they are.
ENDED = {"done": "incomplete", "failed": "failed", "interrupted": "interrupted"}
_CLOSED = "-- run folder closed: "  # RunLog.stop's note


def lock_holder_pid(folder: Path) -> int | None:
    """The pid written in ``folder/.lock`` when a process holds its lock; -1 held by an unknown pid; None when free.

    The probe takes a shared lock for an instant and never writes.

    Args:
        folder: A run folder.

    Returns:
        The holder's pid (-1 when the file does not say), or None when no process holds the lock (or there is none).
    """
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            head = os.pread(fd, 32, 0).decode(errors="replace").split("\n", 1)[0].strip()
            return int(head) if head.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def final_status(folder: Path) -> str | None:
    """The status ``folder/log.txt`` says its run closed with (its ``-- run folder closed: STATUS after N s`` note,
    written before the lock is released, or its last ``=== STATUS · N s`` line), None when the log's last run never
    closed or there is no log.

    Args:
        folder: A run folder.

    Returns:
        ``done``, ``failed``, ``interrupted`` (other words as written), or None.
    """
    try:
        with open(folder / LOG, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    status = None
    for line in tail.splitlines():  # the last run of the folder (a header starts each) decides
        if line.startswith(("=== started ", "=== resumed ")):
            status = None
        elif line.startswith("=== ") and " · " in line:
            status = line[4:].split(" · ", 1)[0].split(",", 1)[0].strip()
        elif _CLOSED in line:
            status = line.split(_CLOSED, 1)[1].split(" after ", 1)[0].strip()
    return status or None


def owner_status(run_dir: str, pid: object) -> str | None:
    """What the folder of a run listed ``running`` says: ``running``, the status it ended with, ``killed``; None when
    the folder cannot tell (it is gone or unreadable).

    Args:
        run_dir: The run folder (the study's ``mlsysopt.run_dir``), on this machine.
        pid: The process the study names (``mlsysopt.pid``).

    Returns:
        ``running`` (its process holds the lock), ``incomplete``/``failed``/``interrupted`` (it closed, the store
        missed the status), ``killed`` (nobody holds the lock and the run never closed), or None.
    """
    folder = Path(run_dir)
    if not run_dir or not folder.is_dir():
        return None
    with contextlib.suppress(OSError):
        holder = lock_holder_pid(folder)
        if holder is not None and (holder == pid or holder == -1):
            return "running"
        if holder is not None:  # another run of the folder holds it: this study's process is gone
            return "killed"
        ended = final_status(folder)
        if ended is not None:
            return ENDED.get(ended, "killed")
        return "killed"
    return None
