"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

* API pages: a bare ``::: mlsysopt.PACKAGE`` line gets the package's public names (its ``__all__``) as the members
  to render. The package roots export their names lazily (``mlsysopt.lazy``), which a static reader of the source
  does not see, so the list is read from the package itself when the site is built and never goes stale.
* The CLI reference (``reference/cli.md``): mkdocs-typer2 runs ``typer mlsysopt.cli.command utils docs`` in a
  subprocess, so the venv's ``bin`` goes first on ``PATH``; a page that came out without the commands (the plugin
  drops a failed run silently) stops the build.
* API pages: the docstrings' Sphinx roles (``:class:`~a.B` ``) are shown as plain code (``B``).
* ``<!-- methods-table -->`` on a page becomes the "which method should I use" tables, built from the benchmark
  JSON files by ``docs/gen_methods.py``.
* ``figures/*.png``: the figures ``docs/gen_figures.py`` draws from the benchmark JSON files, added to the site as
  generated files (pages link them like any image; they are not kept in the repository).
* ``<!-- run-figure NAME -->`` on a page becomes the plots of a real run of the guide's command
  (``docs/assets/guide-runs/NAME/``, written by ``docs/gen_run_figures.py``) with a caption naming the command, its
  date and its inputs, read from the ``run.json`` beside them.
* ``benchmarks/results/*.png``: the plots the benchmark scripts wrote next to their JSON (``benchmarks/results/``,
  outside the docs folder), added to the site under the same path: a page links them as from the repository root.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent
#: the benchmark result files (JSON and the scripts' PNG plots); the site reads its figures and tables from them
BENCH = DOCS.parent / "benchmarks" / "results"
_BARE_DIRECTIVE = re.compile(r"^::: (mlsysopt(?:\.\w+)*)[ \t]*$", re.MULTILINE)
METHODS_MARKER = "<!-- methods-table -->"
RUN_FIGURE = re.compile(r"^<!-- run-figure ([\w-]+) -->[ \t]*$", re.MULTILINE)
#: what the generated CLI reference must contain (one command of each system)
CLI_MUST_LIST = ("mlsysopt placement place", "mlsysopt serving tune", "mlsysopt costmodel train", "mlsysopt nas search")


def _members(module_name: str) -> list[str] | None:
    names = getattr(importlib.import_module(module_name), "__all__", None)
    return sorted(names) if names else None


def _expand(match: re.Match[str], text: str) -> str:
    name = match.group(1)
    following = text[match.end() :].lstrip("\n")
    if following.startswith("    "):  # options given on the page: keep them
        return match.group(0)
    members = _members(name)
    if not members:
        return match.group(0)
    listed = ", ".join(members)
    return f"::: {name}\n    options:\n      members: [{listed}]\n"


def _sibling(name: str):
    """A module of this folder (MkDocs loads the hook by path: the folder is not importable)."""
    spec = importlib.util.spec_from_file_location(f"mlsysopt_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files, config):
    if not BENCH.is_dir():
        raise PluginError(f"no benchmark results folder {BENCH}: the site's figures and tables are read from it")
    for png in sorted(BENCH.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/results/{png.name}", abs_src_path=str(png)))
    for name, png in _sibling("gen_figures").render(BENCH).items():
        files.append(File.generated(config, f"figures/{name}", content=png))
    return files


def _run_figure(match: re.Match[str], page_uri: str) -> str:
    """A run-figure marker as the run's plots and one caption (from the run's ``run.json``)."""
    name = match.group(1)
    meta_path = DOCS / "assets" / "guide-runs" / name / "run.json"
    if not meta_path.is_file():
        raise PluginError(f"{page_uri}: no {meta_path} (run python docs/gen_run_figures.py {name})")
    meta = json.loads(meta_path.read_text())
    folder = posixpath.relpath(f"assets/guide-runs/{name}", posixpath.dirname(page_uri) or ".")
    images = "".join(f"![{plot['alt']}]({folder}/{file})\n\n" for file, plot in meta["plots"].items())
    by_writer: dict[str, list[str]] = {}
    for file, plot in meta["plots"].items():
        by_writer.setdefault(plot.get("written_by", ""), []).append(file)
    parts = [
        f"{' and '.join(f'`{f}`' for f in files)} as `{writer}` wrote {'them' if len(files) > 1 else 'it'}"
        for writer, files in by_writer.items()
        if writer
    ]
    parts += [
        f"`{file}` drawn by `{plot['drawn_by']}` from {plot['drawn_from']}"
        for file, plot in meta["plots"].items()
        if "drawn_by" in plot
    ]
    commands = [c["command"] for c in meta["commands"]]
    earlier = [c for c in commands if c not in by_writer]
    after = f" (the run's other commands: {', '.join(f'`{c}`' for c in earlier)})" if earlier else ""
    small = "".join(
        f"; small budget: `{c['small_budget_options']}` appended to `{c['command'].split(' --')[0]}`"
        for c in meta["commands"]
        if c.get("small_budget_options")
    )
    return (
        f"{images}*{'; '.join(parts)}{after}: a real run on {meta['date']} ({meta['seconds']:.0f} s{small}). "
        f"Inputs: {meta['inputs']}.*\n"
    )


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = RUN_FIGURE.sub(lambda m: _run_figure(m, page.file.src_uri), markdown)
    if page.file.src_uri.startswith("reference/api/"):
        markdown = _BARE_DIRECTIVE.sub(lambda m: _expand(m, markdown), markdown)
    if METHODS_MARKER in markdown:
        markdown = markdown.replace(METHODS_MARKER, _sibling("gen_methods").methods_markdown(BENCH))
    return markdown


def on_config(config):
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + path
    return config


def _role(match: re.Match[str]) -> str:
    target = match.group(1)
    return f"<code>{target[1:].rsplit('.', 1)[-1] if target.startswith('~') else target}</code>"


def on_page_content(html: str, page, config, files) -> str:
    if page.file.src_uri.startswith("reference/api/"):
        # the docstrings use Sphinx roles (:class:`~a.B`) and literal-block colons ("::"): shown as plain code
        html = re.sub(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj):<code>([^<]*)</code>", _role, html)
        html = html.replace("::</p>", ":</p>")
    if page.file.src_uri == "reference/cli.md":
        # the plugin renders typer's ```console fences as inline code: make them code blocks
        html = re.sub(r"<p><code>console\n(.*?)</code></p>", r"<pre><code>\1</code></pre>", html, flags=re.S)
        missing = [name for name in CLI_MUST_LIST if name not in html]
        if missing:
            raise PluginError(
                f"the CLI reference was generated without {', '.join(missing)} (typer utils docs failed?)"
            )
    return html
