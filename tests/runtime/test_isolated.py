"""User code in a child process: its value back, and every way it can end badly as one error (no torch here)."""

from __future__ import annotations

import textwrap
import time
import warnings
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidOption, MlsysoptWarning, UserCodeFailed
from mlsysopt.graph.importers.source import call_user
from mlsysopt.runtime.isolated import TIMEOUT_ENV, default_timeout, run_isolated, user_code_timeout

USER_PY = textwrap.dedent(
    """
    import os, signal, sys, time, warnings

    def add(a, b=0):
        print("printed by the user's code")
        return {"sum": a + b}

    def loop():
        while True:
            time.sleep(0.05)

    def exits():
        sys.exit(0)

    def aborts():
        os.abort()

    def hard_exit():
        os._exit(3)

    def raises():
        raise ValueError("bad thing")

    def option():
        from mlsysopt.errors import InvalidOption
        raise InvalidOption("--knob 3 is out of range")

    def warns():
        from mlsysopt.errors import MlsysoptWarning
        warnings.warn("a runtime is missing", MlsysoptWarning)
        return 1

    def killed_by_term():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    """
)


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("user")
    (folder / "user.py").write_text(USER_PY)
    return str(folder / "user.py")


def call(user: str, name: str, *args: object, timeout: float = 30, **kwargs: object) -> object:
    return run_isolated(call_user, f"{user}:{name}", *args, timeout=timeout, what=f"'{name}'", **kwargs)


def test_the_value_comes_back_and_prints_go_to_stderr(user: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert call(user, "add", 2, b=3) == {"sum": 5}
    out, err = capfd.readouterr()
    assert "printed by the user's code" in err and "printed by" not in out


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("exits", r"'exits' called sys.exit\(0\) at .*user.py:\d+: nothing was done"),
        ("aborts", "'aborts' was killed by SIGABRT"),
        ("hard_exit", "'hard_exit' exited with code 3 before returning"),
        ("raises", r"'raises' raised ValueError: bad thing at .*user.py:\d+"),
        ("killed_by_term", "'killed_by_term' was killed by SIGTERM"),
    ],
)
def test_every_bad_ending_is_one_error(user: str, name: str, needle: str) -> None:
    with pytest.raises(UserCodeFailed, match=needle):
        call(user, name)


def test_an_mlsysopt_error_keeps_its_class_and_warnings_are_reissued(user: str) -> None:
    with pytest.raises(InvalidOption, match="--knob 3 is out of range"):
        call(user, "option")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert call(user, "warns") == 1
    assert [(w.category, str(w.message)) for w in seen] == [(MlsysoptWarning, "a runtime is missing")]


def test_a_loop_is_stopped_at_the_timeout(user: str) -> None:
    start = time.monotonic()
    with pytest.raises(UserCodeFailed, match=r"'loop' did not return within 1.5 s \(--timeout 1.5\)"):
        call(user, "loop", timeout=1.5, bound="--timeout 1.5")
    assert time.monotonic() - start < 10


def test_the_default_bound_and_the_command_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert default_timeout() == 600
    assert user_code_timeout(5) == (5, "--timeout 5")
    assert user_code_timeout(None)[0] == 600 and TIMEOUT_ENV in user_code_timeout(None)[1]
    monkeypatch.setenv(TIMEOUT_ENV, "30")
    assert user_code_timeout(100)[0] == 30  # the smaller of the two bounds
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(Exception, match=f"{TIMEOUT_ENV}='soon'"):
        default_timeout()


def test_a_missing_user_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no such Python file"):
        run_isolated(call_user, f"{tmp_path}/absent.py:f", timeout=30)
