"""The demo page rendered in headless Chromium: the summary is displayed and every image is decoded.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending in a
NUL byte on fds 3 and 4), so no port, no network and no extra package. ``make test`` installs the Debian package
``chromium`` when it is missing. The page is built from the faster demo sections (cnn, montage, nas, costmodel:
real section results, so the summary reads what the builders really write; placement and serving are covered by
their CLI demo tests) and rendered from a folder that holds ``index.html`` alone, so it must be complete on its own.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mlsysopt.demo import run_demo
from mlsysopt.report.html import Section, write_index

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (make test installs it)"),
]

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

#: What the test reads from the rendered page (returned as JSON by Runtime.evaluate).
PROBE = """JSON.stringify((() => {
  const shown = el => { if (!el) return false; const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility === 'visible'; };
  const summary = document.getElementById('summary');
  const first = document.querySelector('main section');
  return {
    summary_shown: shown(summary),
    summary_first: first !== null && first === summary,
    summary_top: summary ? summary.getBoundingClientRect().top : null,
    viewport: window.innerHeight,
    summary_rows: summary ? summary.querySelectorAll('tr').length - 1 : 0,
    summary_text: summary ? summary.innerText : '',
    glossary_shown: shown(document.getElementById('glossary')),
    footer: document.querySelector('footer') ? document.querySelector('footer').innerText : '',
    images: [...document.images].map(i => ({file: i.dataset.file, complete: i.complete, natural: i.naturalWidth,
      natural_h: i.naturalHeight, shown: shown(i), data_uri: i.getAttribute('src').startsWith('data:image/')})),
  };
})())"""


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
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = False) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are dropped)."""
        mid, deadline = self._send(method, params, session), time.monotonic() + self.timeout
        while True:
            msg = self._next(deadline)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def load(self, path: Path) -> dict[str, Any]:
        """Open ``path``, wait for its load event, and return what :data:`PROBE` reads from it."""
        mid, deadline = self._send("Page.navigate", {"url": path.resolve().as_uri()}, True), time.monotonic() + 60
        loaded = answered = False
        while not (loaded and answered):
            msg = self._next(deadline)
            answered |= msg.get("id") == mid
            loaded |= msg.get("method") == "Page.loadEventFired"
        res = self.call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=True)
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


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    chrome = Chromium(tmp_path_factory.mktemp("chromium"))
    yield chrome
    chrome.close()


def test_demo_page_shows_summary_and_every_image(tmp_path: Path, browser: Chromium) -> None:
    result = run_demo(tmp_path / "demo", seed=0, only=["cnn", "montage", "nas", "costmodel"])
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "demo" / "index.html", alone / "index.html")  # nothing beside it: must be complete
    page = browser.load(alone / "index.html")
    assert page["summary_shown"] and page["summary_first"], page
    assert page["summary_top"] < page["viewport"]  # on the first screen
    # cnn 1, montage 1, nas 2 (cora regret, digits accuracy), costmodel 2 (OPA, memory); none unreadable
    assert page["summary_rows"] == 6
    assert "summary unavailable" not in page["summary_text"]
    for word in (
        "makespan",
        "random placement",
        "regret on nasbench-graph:cora",
        "EPNAS",
        "held-out OPA",
        "GST+EFD",
        "peak training-step memory",
        "better than the baseline?",
        "SYNTHETIC",
    ):
        assert word in page["summary_text"], word
    assert page["glossary_shown"]
    assert "SLR" in (alone / "index.html").read_text()
    images = page["images"]
    pngs = sorted(p.relative_to(tmp_path / "demo").as_posix() for p in (tmp_path / "demo").rglob("*.png"))
    assert sorted(i["file"] for i in images) == pngs and len(pngs) == 10  # cnn 2, montage 2, nas 4, costmodel 2
    for img in images:
        assert img["data_uri"] and img["complete"] and img["shown"], img
        assert img["natural"] > 0 and img["natural_h"] > 0, img
    footer = page["footer"]
    for word in ("mlsysopt", "git commit", "machine", "CPUs", "Python", "torch", "section timings (s)", "costmodel"):
        assert word in footer, footer
    assert set(result["timings_s"]) == {"cnn", "montage", "nas", "costmodel"}


def test_a_broken_image_is_caught(tmp_path: Path, browser: Chromium) -> None:
    """The same check fails on an image the browser cannot decode (so the test above can fail)."""
    from mlsysopt.report.figures import new_figure, save_figure

    fig = new_figure(2, 1)
    fig.add_subplot().plot([0, 1], [0, 1])
    save_figure(fig, tmp_path / "good.png")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 8)
    sections = [Section("Summary", table=[["a", 1]], columns=["x", "y"], anchor="summary"),
                Section("Plots", images=["good.png", "bad.png"], captions=["good", "bad"])]  # fmt: skip
    page = browser.load(write_index(tmp_path, "t", sections))
    by_file = {i["file"]: i for i in page["images"]}
    assert by_file["good.png"]["natural"] > 0
    assert by_file["bad.png"]["natural"] == 0
    assert page["summary_shown"] and page["summary_rows"] == 1
