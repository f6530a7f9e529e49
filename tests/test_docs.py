"""The documentation site builds with ``mkdocs build --strict`` and holds what its pages promise.

Strict means no broken link, no missing anchor, no unresolved API reference and no griffe warning on a docstring;
the hook (``docs/hooks.py``) also stops the build when the generated CLI reference lacks its commands. Then the built
site must have every page of the nav, the API pages must list known public names, the CLI page known commands, the
"which method" tables the figures of the benchmark JSON files, and the benchmark figures must be copied. Runs only
where the ``docs`` extra is installed (``make install`` installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

for _module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_typer2"):
    pytest.importorskip(_module)

import yaml  # noqa: E402  (after the skips: PyYAML comes with mkdocs)

#: one worker builds the site once for every test here (`make test` runs pytest-xdist with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("docs_site")  # one worker builds the site once for the module

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "results"
#: the guides' plots from real runs of their commands (docs/gen_run_figures.py), with a run.json each
RUN_ASSETS = ROOT / "docs" / "assets" / "guide-runs"

#: page -> names its built HTML must contain
MUST_LIST = {
    "reference/api/placement": ["GiPH", "HEFT", "PlacementProblem", "apply_device_map"],
    "reference/api/serving": ["RRL", "SimulatedEngine", "Space", "Workload"],
    "reference/api/costmodel": ["TrainConfig", "LatencyOracle", "train"],
    "reference/api/nas": ["EPNAS", "Constraints", "run_search", "Study"],
    "reference/api/graph": ["CompGraph", "DeviceCluster", "simulate"],
    "reference/api/store": ["RunStore", "record_trial"],
    "reference/api/io": ["RunDir", "write_json_atomic"],
    "reference/api/errors": ["MlsysoptError", "InvalidGraph", "StoreError"],
    "reference/cli": ["mlsysopt placement place", "mlsysopt serving tune", "mlsysopt nas search", "--engine"],
}


def _nav_pages(nav) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return out


def _page(site: Path, page: str) -> str:
    path = site / ("index.html" if page == "index" else f"{page}/index.html")
    assert path.is_file(), f"{page}: not built"
    return path.read_text()


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = [page.removesuffix(".md") for page in _nav_pages(nav)]
    assert len(pages) >= 20
    for page in pages:
        html = _page(site, page)
        assert "<h1" in html, f"{page}: no title"


@pytest.mark.parametrize("page", sorted(MUST_LIST))
def test_reference_pages_list_known_names(site: Path, page: str) -> None:
    html = _page(site, page)
    missing = [name for name in MUST_LIST[page] if name not in html]
    assert not missing, f"{page} lacks {missing}"


def test_methods_tables_carry_the_benchmark_figures(site: Path) -> None:
    html = _page(site, "methods")
    placement = json.loads((BENCH / "placement.json").read_text())
    default = placement["default_method"]
    ratio = placement["semantics"]["ordered"]["geomean_ratio_to_heft"][default]
    assert f"{ratio:.3f}×" in html
    nas = json.loads((BENCH / "nas34.json").read_text())
    default = nas["default_method"]["100"]
    text = html.replace("<code>", "").replace("</code>", "")
    assert f"{default} {nas['val_regret']['100'][default]:.4f}" in text
    assert "methods-table" not in html  # the marker was replaced


def test_benchmark_figures_are_embedded_and_every_image_exists(site: Path) -> None:
    html = _page(site, "benchmarks")
    for png in ("placement.png", "gst_full.memory.png"):
        assert f'src="results/{png}"' in html, f"benchmarks: {png} not embedded"
    for png in ("nas_regret.png", "serving_heldout.png", "oracle_predicted_vs_measured.png"):  # docs/gen_figures.py
        assert f'src="../figures/{png}"' in html, f"benchmarks: figures/{png} not embedded"
        assert (site / "figures" / png).stat().st_size > 10_000
    images = 0
    for page in site.rglob("index.html"):
        for src in re.findall(r'<img[^>]*\ssrc="([^"]+)"', page.read_text()):
            if not src.startswith(("http:", "https:", "data:")):
                images += 1
                assert (page.parent / src).resolve().is_file(), f"{page.relative_to(site)}: missing image {src}"
    assert images >= 8


def test_each_guide_shows_the_plots_of_a_real_run_of_its_command(site: Path) -> None:
    """Every plot docs/gen_run_figures.py kept is embedded in its guide, captioned with the command that wrote it."""
    runs = sorted(RUN_ASSETS.glob("*/run.json"))
    assert {meta.parent.name for meta in runs} >= {"graphs", "placement", "serving", "costmodel", "nas"}
    for meta_path in runs:
        meta = json.loads(meta_path.read_text())
        assert meta["real_run"] is True and meta["date"] and meta["inputs"], meta_path
        guide = meta["guide"].removesuffix(".md")
        html = _page(site, guide).replace("&amp;", "&")
        for file, plot in meta["plots"].items():
            src = f"../../assets/guide-runs/{meta_path.parent.name}/{file}"
            assert f'src="{src}"' in html, f"{guide}: {file} of the {meta_path.parent.name} run not embedded"
            assert (site / guide / src).resolve().stat().st_size > 10_000
            writer = plot.get("written_by") or plot["drawn_by"]
            assert writer in html, f"{guide}: the caption of {file} does not name {writer}"


#: What the Chromium test reads from a rendered page of the site (returned as JSON by Runtime.evaluate).
RENDERED = """JSON.stringify((() => {
  const shown = el => { if (!el) return false; const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.display !== 'none' && s.visibility !== 'hidden'; };
  return {
    title: document.querySelector('article h1') ? document.querySelector('article h1').innerText : '',
    theme_js: typeof window.document$ !== 'undefined',
    header_shown: shown(document.querySelector('header.md-header')),
    nav_links: document.querySelectorAll('nav.md-nav--primary a.md-nav__link').length,
    images: [...document.querySelectorAll('article img')].map(i => ({src: i.getAttribute('src'),
      complete: i.complete, natural: i.naturalWidth})),
    tables: document.querySelectorAll('article table').length,
  };
})())"""


GUIDE = "guides/placement"
GUIDES = ("guides/graphs", GUIDE, "guides/serving", "guides/costmodel", "guides/nas")


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (make test installs it)")
def test_the_built_site_renders_in_chromium_with_every_figure_decoded(site: Path, tmp_path: Path) -> None:
    """A reader's browser, not just the HTML: Material's theme script runs, the header and the nav show, and every
    figure of the benchmarks page and of every guide (its run's plots included) decodes, and no page logs an error
    (a script's exception, a resource that fails to load: file:// as `make docs` leaves it; no server, no
    network -- so no web fonts either)."""
    from chromium_helpers import Chromium

    browser = Chromium(tmp_path)
    errors: dict[str, list[str]] = {}
    pages = {}
    try:
        for page in ("benchmarks", *GUIDES):
            browser.errors.clear()
            pages[page] = browser.load(site / page / "index.html", RENDERED)
            errors[page] = list(browser.errors)
    finally:
        browser.close()
    assert not any(errors.values()), f"console errors (a failed load, an uncaught exception): {errors}"
    for page, seen in pages.items():
        assert seen["theme_js"] and seen["header_shown"] and seen["title"], (page, seen)
        assert seen["nav_links"] >= 20, (page, seen["nav_links"])
        broken = [i["src"] for i in seen["images"] if not (i["complete"] and i["natural"] > 0)]
        assert not broken, f"{page}: figures that do not decode: {broken}"
    assert len(pages["benchmarks"]["images"]) >= 5 and pages[GUIDE]["tables"] >= 1
    assert all(len(pages[guide]["images"]) >= 1 for guide in GUIDES)
