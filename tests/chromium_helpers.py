"""Headless Chromium for the tests that render pages (the demo report, optuna-dashboard on the study store).

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending in a
NUL byte on fds 3 and 4), so no port, no network and no extra package. ``make test`` installs the Debian package
``chromium`` when it is missing.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
    "--remote-debugging-pipe",
]


class Chromium:
    """A headless Chromium driven over ``--remote-debugging-pipe``; one page target, closed on exit."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        self.timeout = timeout
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds_3_and_4() -> None:  # in the child: its commands on fd 3, its replies on fd 4 (inheritable)
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._err = open(profile / "stderr.txt", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            ["chromium", *FLAGS, f"--user-data-dir={profile / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._err, close_fds=False,
            preexec_fn=fds_3_and_4, start_new_session=True,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.errors: list[str] = []  # console errors, uncaught exceptions and failed loads, as events arrive
        self.call("Runtime.enable", session=True)
        self.call("Log.enable", session=True)

    def _send(self, method: str, params: dict[str, Any] | None, session: bool) -> int:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        return self._id

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"chromium did not answer within {self.timeout:.0f} s")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        msg = json.loads(raw)
        self._note_error(msg)
        return msg

    def _note_error(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in
                                                      params.get("args", [])))  # fmt: skip
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(details.get("exception", {}).get("description") or details))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are dropped)."""
        mid, deadline = self._send(method, params, session), time.monotonic() + self.timeout
        while True:
            msg = self._next(deadline)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def load(self, path: Path, probe: str) -> dict[str, Any]:
        """Open ``path``, wait for its load event, and return what the JavaScript ``probe`` (JSON) reads from it."""
        mid, deadline = self._send("Page.navigate", {"url": path.resolve().as_uri()}, True), time.monotonic() + 60
        loaded = answered = False
        while not (loaded and answered):
            msg = self._next(deadline)
            answered |= msg.get("id") == mid
            loaded |= msg.get("method") == "Page.loadEventFired"
        res = self.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=True)
        return json.loads(res["result"]["value"])

    def close(self) -> None:
        """Close the browser and reap it (its whole process group if it does not exit)."""
        try:
            self.call("Browser.close")
            self.proc.wait(timeout=15)
        except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
            os.close(self._to_chrome)
            os.close(self._from_chrome)
            self._err.close()

    def open_url(self, url: str, ready: str, timeout: float = 60.0) -> Any:
        """Open ``url`` and poll the JavaScript expression ``ready`` until it is truthy; returns its last value."""
        mid, deadline = self._send("Page.navigate", {"url": url}, True), time.monotonic() + timeout
        answered = False
        while not answered:
            answered = self._next(deadline).get("id") == mid
        value: Any = None
        while time.monotonic() < deadline:
            res = self.call("Runtime.evaluate", {"expression": ready, "returnByValue": True}, session=True)
            value = res.get("result", {}).get("value")
            if value:
                return value
            time.sleep(0.25)
        return value
