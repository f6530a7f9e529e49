"""``log.txt`` of a run folder: what the run printed (stdout and stderr, so warnings and errors too), with timings.

While a :class:`RunLog` is started, ``sys.stdout`` and ``sys.stderr`` go through a tee that copies every line into
the log, prefixed by the seconds since the run opened; terminal control sequences are dropped and a progress bar
redrawn in place keeps only its last state. The log is appended to line by line (a killed run keeps what it
printed) and a resumed run appends below a separator. Each run ends with a line giving its status and wall time.

The command line runs each command inside :func:`session`: a run's log then also gets what the command prints
after its folder closed (the summary table, the final error line) and ends when the command does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from mlsysopt import __version__
from mlsysopt.errors import WriteFailed
from mlsysopt.text import mask_secrets

MAX_LOG_BYTES = 32 * 2**20  # a runaway printer cannot fill the disk through the log
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
_BAR = ("━", "╸", "╺", "█")
_lock = threading.RLock()
_active: list[RunLog] = []
_tees: dict[str, _Tee] = {}
_session: dict[str, Any] | None = None


class _Tee:
    """A text stream that writes through to ``inner`` and copies what it wrote into every active log."""

    def __init__(self, inner: TextIO, name: str) -> None:
        self.inner, self.name = inner, name

    def write(self, text: str) -> int:
        n = self.inner.write(text)
        with _lock:
            for log in list(_active):
                log.feed(self.name, text)
        return n

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _install() -> None:
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if not isinstance(current, _Tee):
            tee = _Tee(current, name)
            _tees[name] = tee
            setattr(sys, name, tee)


def _uninstall() -> None:
    for name, tee in list(_tees.items()):
        if getattr(sys, name) is tee:  # someone replaced it since: leave theirs alone (ours just passes through)
            setattr(sys, name, tee.inner)
        del _tees[name]


def _command_line() -> str:
    """The command line of this process, every URL's password masked (it is written into log.txt)."""
    argv = (_session or {}).get("argv")
    if argv is not None:
        return mask_secrets(" ".join(["mlsysopt", *argv]))
    return mask_secrets(" ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)))


class _Capture:
    """Turns printed text into log lines: control sequences dropped, ``\\r`` restarts a line, a progress bar
    redrawn in place kept once (its last state), each line stamped with the seconds since ``t0``."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self._partial: dict[str, str] = {"stdout": "", "stderr": ""}
        self._pending: str | None = None  # the last progress-bar line, held until it stops changing

    def _raw(self, text: str) -> None:
        raise NotImplementedError

    def _stamp(self) -> str:
        return f"[{time.perf_counter() - self.t0:8.1f}s] "

    def _line(self, line: str, stream: str) -> None:
        line = line.rstrip()
        if not line.strip():
            return
        tag = "" if stream == "stdout" else "! "
        if any(b in line for b in _BAR):
            self._pending = self._stamp() + tag + line
            return
        self._release()
        self._raw(self._stamp() + tag + line + "\n")

    def _release(self) -> None:
        if self._pending is not None:
            self._raw(self._pending + "\n")
            self._pending = None

    def feed(self, stream: str, text: str) -> None:
        """Take printed text: complete lines are logged, a carriage return restarts the line."""
        text = _ANSI.sub("", text)
        buf = self._partial.get(stream, "") + text
        *lines, rest = buf.split("\n")
        for line in lines:
            self._line(line.rsplit("\r", 1)[-1], stream)
        self._partial[stream] = rest.rsplit("\r", 1)[-1] if "\r" in rest else rest

    def flush_partial(self) -> None:
        """Log what is left of unfinished lines and a held progress bar."""
        for stream, rest in self._partial.items():
            if rest.strip():
                self._line(rest, stream)
            self._partial[stream] = ""
        self._release()


class _Buffer(_Capture):
    """What a CLI command printed before any run folder opened (a run's log starts with it)."""

    def __init__(self, t0: float) -> None:
        super().__init__(t0)
        self.lines: list[str] = []
        self._size = 0

    def _raw(self, text: str) -> None:
        if self._size < 2**20:
            self.lines.append(text)
            self._size += len(text)


class RunLog(_Capture):
    """The log of one run.

    Args:
        path: ``RUN/log.txt`` (appended to).
        resumed: whether the run continues an earlier one (the header says so).
    """

    def __init__(self, path: Path, resumed: bool = False) -> None:
        super().__init__(_session["t0"] if _session is not None else time.perf_counter())
        self.path, self.resumed = Path(path), resumed
        self._fh: TextIO | None = None
        self._bytes = 0
        self.closed_at: float | None = None

    def start(self) -> RunLog:
        """Open the log, write its header (and what the command printed so far) and start copying."""
        try:
            self._fh = open(self.path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed in end)
            self._bytes = self.path.stat().st_size
        except OSError as exc:
            raise WriteFailed(f"cannot write {self.path}: {exc.strerror or exc}") from None

        when = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        head = "resumed" if self.resumed else "started"
        if self.resumed and self._bytes:
            self._raw("\n")
        self._raw(f"=== {head} {when} · {_command_line()} · mlsysopt {__version__} · pid {os.getpid()} on "
                  f"{socket.gethostname()}\n")  # fmt: skip
        with _lock:
            if _session is not None:
                buffer = _session["buffer"]
                buffer.flush_partial()
                for line in buffer.lines:
                    self._raw(line)
            _active.append(self)
            _install()
        return self

    def _raw(self, text: str) -> None:
        if self._fh is None:
            return
        if self._bytes > MAX_LOG_BYTES:
            return
        self._bytes += len(text.encode("utf-8", errors="replace"))
        if self._bytes > MAX_LOG_BYTES:
            text = f"... log.txt truncated at {MAX_LOG_BYTES // 2**20} MiB\n"
        with contextlib.suppress(OSError, ValueError):
            self._fh.write(text)
            self._fh.flush()

    def note(self, text: str) -> None:
        """A line of the run's own (not printed on the terminal)."""
        self._release()
        self._raw(f"{self._stamp()}-- {text}\n")

    def stop(self, status: str, keep: bool = True) -> None:
        """The run closed: inside a CLI session the log goes on until the command ends, else it ends now."""
        self.closed_at = time.perf_counter()
        self.note(f"run folder closed: {status} after {self.closed_at - self.t0:.1f} s")
        if _session is not None and keep:
            _session["logs"].append((self, status))
            return
        self.end(status)

    def end(self, status: str, error: str | None = None) -> None:
        """Write the last lines and stop copying."""
        self.flush_partial()
        if error:
            self._raw(f"{self._stamp()}! error: {error}\n")
        total = time.perf_counter() - self.t0
        self._raw(f"=== {status} · {total:.1f} s\n")
        with _lock:
            if self in _active:
                _active.remove(self)
            if not _active:
                _uninstall()
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


@contextlib.contextmanager
def session(argv: list[str]) -> Iterator[None]:
    """Run one CLI command: the logs of its runs also keep what it prints after they closed, and its error."""
    global _session
    t0 = time.perf_counter()
    buffer = _Buffer(t0)
    outer, _session = _session, {"argv": list(argv), "logs": [], "t0": t0, "buffer": buffer}
    state = _session
    with _lock:
        _active.append(buffer)
        _install()
    error: str | None = None
    try:
        yield
    except BaseException as exc:
        error = " ".join(str(exc).split()) or type(exc).__name__
        raise
    finally:
        _session = outer
        for log, status in state["logs"]:
            log.end(status if error is None else f"{status}, then the command failed", error)
        with _lock:
            if buffer in _active:
                _active.remove(buffer)
            if not _active:
                _uninstall()
