"""User code in a child process: bounded in time, and whatever it does to its process reported as one error.

A user's factory (``file.py:factory``, ``module:factory``) or objective is arbitrary Python. Run in mlsysopt's own
process it could loop past ``--timeout``, end the command silently with ``sys.exit(0)``, or take it down with
``os.abort()``. :func:`run_isolated` calls it in a fresh interpreter instead (``python -m mlsysopt.runtime.isolated``,
not a fork: no torch thread pool or Ray connection is inherited, and the caller's ``__main__`` is not re-imported)
and turns every way it can end into a result or one :class:`~mlsysopt.errors.UserCodeFailed`:

================================  ===================================================================================
the user code                     what the caller gets
================================  ===================================================================================
returns                           its value (pickled back)
raises an ``MlsysoptError``       the same error class and message (e.g. ``ImportFailed`` from the importer)
raises anything else              ``UserCodeFailed``: the exception and the user's file:line
calls ``sys.exit`` / ``exit()``   ``UserCodeFailed``: "called sys.exit(N) at file:line"
calls ``os._exit(N)``             ``UserCodeFailed``: "exited with code N"
is killed by a signal, crashes    ``UserCodeFailed``: "was killed by SIGABRT" (SIGSEGV, SIGKILL: out of memory?)
runs past ``timeout`` seconds     ``UserCodeFailed``: "did not return within T s"; the child and everything it
                                  started (its process group) are killed
================================  ===================================================================================

The child's ``stdout`` goes to the caller's ``stderr`` (a factory's prints never corrupt ``--json`` output), its
stdin is empty, its :class:`~mlsysopt.errors.MlsysoptWarning` warnings are re-issued in the caller. A Ctrl-C or
SIGTERM of the caller kills the child. The function must be importable by name (a module-level function), its
arguments and result picklable; a user's file is loaded *inside* the function (see
:func:`mlsysopt.graph.importers.source.load_user_attr`), so the caller never imports the user's code itself.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlsysopt.errors import MlsysoptError, MlsysoptWarning, UserCodeFailed

T = TypeVar("T")

#: Seconds user code may run when the command has no ``--timeout`` (environment: ``MLSYSOPT_USER_CODE_TIMEOUT``).
DEFAULT_TIMEOUT = 600.0
TIMEOUT_ENV = "MLSYSOPT_USER_CODE_TIMEOUT"
_REQUEST, _RESULT = "request.pkl", "result.pkl"


def default_timeout() -> float:
    """The bound on user code without a ``--timeout``: ``MLSYSOPT_USER_CODE_TIMEOUT`` seconds, else 600."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < float("inf")):
        raise MlsysoptError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def user_code_timeout(timeout: float | None) -> tuple[float, str]:
    """``(seconds, what sets them)`` for user code under a command's ``--timeout`` (None: the default bound)."""
    if timeout is not None and timeout > 0:
        return min(float(timeout), default_timeout()), f"--timeout {timeout:g}"
    bound = default_timeout()
    return bound, f"the default bound for user code; {TIMEOUT_ENV} changes it"


def run_isolated(
    fn: Callable[..., T],
    *args: Any,
    timeout: float | None = None,
    what: str = "user code",
    bound: str | None = None,
    **kwargs: Any,
) -> T:
    """``fn(*args, **kwargs)`` computed in a fresh Python process, at most ``timeout`` seconds (see module doc).

    Args:
        fn: a module-level function (pickled by name; the child imports its module).
        timeout: seconds before the child is killed; None: :func:`default_timeout`.
        what: how errors name the code, e.g. ``"'./f.py:factory'"``.
        bound: what set ``timeout``, for the error (e.g. ``"--timeout 5"``).
    """
    if timeout is None:
        timeout, bound = user_code_timeout(None)
    timeout = float(timeout)
    with tempfile.TemporaryDirectory(prefix="mlsysopt-user-") as tmp:
        folder = Path(tmp)
        try:
            call = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise MlsysoptError(f"{what}: cannot pass its arguments to a child process ({exc})") from None
        (folder / _REQUEST).write_bytes(pickle.dumps((list(sys.path), call), protocol=pickle.HIGHEST_PROTOCOL))
        code = _wait(folder, timeout, what, bound)
        result = folder / _RESULT
        if not result.is_file():
            raise UserCodeFailed(_no_result(what, code))
        try:
            outcome = pickle.loads(result.read_bytes())
        except Exception as exc:  # the result names a class the caller cannot import
            raise UserCodeFailed(f"{what}: its result cannot be read back ({type(exc).__name__}: {exc})") from None
    for category, message in outcome.get("warnings", []):
        warnings.warn(message, category, stacklevel=2)
    if outcome["status"] == "ok":
        return outcome["value"]
    if outcome["status"] == "exit":
        raise UserCodeFailed(
            f"{what} called sys.exit({outcome['code']!r}){outcome['where']}: nothing was done "
            "(a factory or objective must return, not exit)"
        )
    error = outcome.get("error")
    message = outcome["message"]
    if isinstance(error, type) and issubclass(error, MlsysoptError):
        raise error(message)
    if error is MemoryError:
        raise MlsysoptError(f"{what} ran out of memory{outcome['where']}")
    raise UserCodeFailed(f"{what} raised {message}{outcome['where']}")


def _wait(folder: Path, timeout: float, what: str, bound: str | None) -> int:
    """Start the child, wait for it (killing its process group on timeout or interrupt); its exit code."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlsysopt.runtime.isolated", str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=sys.__stderr__ if sys.__stderr__ is not None else subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a timeout kills what it started too
    )
    start = time.monotonic()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        by = f" ({bound})" if bound else ""
        raise UserCodeFailed(
            f"{what} did not return within {timeout:g} s{by}; it was stopped after {time.monotonic() - start:.0f} s"
        ) from None
    except BaseException:  # Ctrl-C, SIGTERM: the child goes with the command
        _kill(proc)
        raise


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _no_result(what: str, code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        why = {
            "SIGABRT": " (os.abort(), or a crash in native code)",
            "SIGSEGV": " (a crash in native code)",
            "SIGKILL": " (out of memory, or killed from outside)",
        }.get(name, "")
        return f"{what} was killed by {name}{why}: nothing was done"
    return f"{what} exited with code {code} before returning (os._exit?): nothing was done"


# ---------------------------------------------------------------------------- the child
def _where(tb: Any) -> str:
    """`` at FILE:LINE`` of the innermost frame outside mlsysopt and the interpreter's own libraries."""
    skip = [str(Path(__file__).resolve().parents[1])]
    skip += [os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    for frame in reversed(traceback.extract_tb(tb)):
        name = os.path.realpath(frame.filename)
        if not any(name.startswith(s + os.sep) for s in skip) and not frame.filename.startswith("<"):
            return f" at {frame.filename}:{frame.lineno}"
    return ""


def _child(folder: Path) -> None:
    path, call = pickle.loads((folder / _REQUEST).read_bytes())
    sys.path[:] = path
    caught: list[tuple[type[Warning], str]] = []
    outcome: dict[str, Any]

    default_show = warnings.showwarning

    def show(message: Any, category: type[Warning], *rest: Any, **kw: Any) -> None:
        if issubclass(category, MlsysoptWarning):
            caught.append((category, str(message)))
        else:
            default_show(message, category, *rest, **kw)

    warnings.simplefilter("always", MlsysoptWarning)
    warnings.showwarning = show
    try:
        fn, args, kwargs = pickle.loads(call)
        outcome = {"status": "ok", "value": fn(*args, **kwargs)}
    except SystemExit as exc:
        outcome = {"status": "exit", "code": exc.code, "where": _where(exc.__traceback__)}
    except BaseException as exc:
        error = type(exc) if isinstance(exc, (MlsysoptError, MemoryError)) else None
        text = str(exc) if error is not None else f"{type(exc).__name__}: {exc}"
        outcome = {"status": "raise", "error": error, "message": text, "where": _where(exc.__traceback__)}
    outcome["warnings"] = caught
    try:
        blob = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        blob = pickle.dumps(
            {"status": "raise", "error": None, "message": f"an unpicklable result ({exc})", "where": "",
             "warnings": caught},
        )  # fmt: skip
    tmp = folder / f".{_RESULT}.tmp"
    tmp.write_bytes(blob)
    os.replace(tmp, folder / _RESULT)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no atexit handlers or lingering threads of the user's code can hold the child


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
