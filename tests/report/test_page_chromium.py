"""The demo page rendered in headless Chromium: the summary is displayed and every image is decoded.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending in a
NUL byte on fds 3 and 4), so no port, no network and no extra package. ``make test`` installs the Debian package
``chromium`` when it is missing. The page is built from the faster demo sections (cnn, montage, nas, costmodel:
real section results, so the summary reads what the builders really write; placement and serving are covered by
their CLI demo tests) and rendered from a folder that holds ``index.html`` alone, so it must be complete on its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chromium_helpers import Chromium
from mlsysopt.demo import run_demo
from mlsysopt.report.html import Section, write_index

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (make test installs it)"),
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


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    chrome = Chromium(tmp_path_factory.mktemp("chromium"))
    yield chrome
    chrome.close()


@pytest.mark.usefixtures("small_costmodel_demo")
def test_demo_page_shows_summary_and_every_image(tmp_path: Path, browser: Chromium) -> None:
    result = run_demo(tmp_path / "demo", seed=0, only=["cnn", "montage", "nas", "costmodel"])
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tmp_path / "demo" / "index.html", alone / "index.html")  # nothing beside it: must be complete
    browser.errors.clear()
    page = browser.load(alone / "index.html", PROBE)
    assert not browser.errors, f"the page logged errors: {browser.errors}"
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
    page = browser.load(write_index(tmp_path, "t", sections), PROBE)
    by_file = {i["file"]: i for i in page["images"]}
    assert by_file["good.png"]["natural"] > 0
    assert by_file["bad.png"]["natural"] == 0
    assert page["summary_shown"] and page["summary_rows"] == 1
