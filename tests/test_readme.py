"""Every code block of the README runs as written, and the run time of each command is measured and printed.

The convention (README.md, "Development", says the same):

* every ````` ```bash ````` block runs, one command (a line; ``\\`` continues it) after another, in README order;
  every ````` ```python ````` block runs as a file (``python block.py``, so a missing ``if __name__ ==
  "__main__":`` guard fails as it would for a user); a Python block whose first line is ``# NAME.py`` (or
  ``# NAME.py: what it is``) is that file,
  written (not run) into the folder of every section, so later blocks can use it (``./mymodel.py:tiny_vit``);
* blocks run in one scratch folder per ``##`` section (a section's blocks share what earlier ones wrote:
  ``runs/prof/profile_32.json`` from ``serving profile`` feeds ``serving tune --engine sim``); sections run in
  parallel under ``pytest -n``;
* an HTML comment right before a block changes how this test runs it, and only it:
  ``<!-- readme-test: replace "--budget 30" "--budget 2" -->`` runs the block with that text replaced (it must
  occur: a stale marker fails), ``<!-- readme-test: skip "why" -->`` does not run the block (a synopsis, commands
  for several machines), ``<!-- readme-test: drop "runs dashboard" -->`` does not run the commands holding that
  text (a server that runs until Ctrl-C). Markers are how the README says where a small budget is substituted;
  a block without one runs exactly as written, and blocks added later are picked up without editing this file;
* ``MLSYSOPT_README_AS_WRITTEN=1`` ignores the ``replace`` markers (skips and drops stay): every command runs with
  the README's own budgets, which is how the README's run times are measured (about 25 minutes on 2 cores);
* otherwise (CI) every command and Python block is stopped after ``MLSYSOPT_README_COMMAND_LIMIT`` seconds
  (default 300) and fails naming its README line: a block added without a marker for its long commands costs the
  suite five minutes, not the command's full run, and the failure says which marker to add.

Each command's wall time is recorded; at the end of the session conftest.py prints the table (and it is written to
``runs/readme-times.txt``). ``mlsysopt`` commands run in the test's process (no interpreter start per command,
imports cached: fast); with ``MLSYSOPT_README_AS_WRITTEN=1``, and for every other line (``python -c ...``, a
redirect), in ``bash`` with this environment's ``python`` and ``mlsysopt`` first on ``PATH``, as a user runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_inprocess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMES = ROOT / "runs" / "readme-times.txt"
AS_WRITTEN = os.environ.get("MLSYSOPT_README_AS_WRITTEN", "").strip() in ("1", "true", "yes")
_MARKER = re.compile(r"^<!--\s*readme-test:(.*?)-->\s*$")
#: Seconds one command (or Python block) may run in the CI mode; none as written (the README's own budgets).
LIMIT = None if AS_WRITTEN else float(os.environ.get("MLSYSOPT_README_COMMAND_LIMIT", "300"))
_DIRECTIVE = re.compile(r'(replace|skip|drop)\s+"((?:[^"\\]|\\.)*)"(?:\s+"((?:[^"\\]|\\.)*)")?')


@dataclass
class Block:
    """One fenced block: its section, language, text, first line number and the markers before it."""

    section: str
    lang: str
    text: str
    line: int
    replace: list[tuple[str, str]] = field(default_factory=list)
    skip: str | None = None
    drop: list[str] = field(default_factory=list)  # commands containing one of these are not run

    @property
    def file_name(self) -> str | None:
        """``NAME.py`` when the block's first line is ``# NAME.py`` (or ``# NAME.py: what it is``): a file for later
        blocks, not run."""
        first = self.text.splitlines()[0] if self.text.strip() else ""
        m = re.fullmatch(r"#\s*([\w.-]+\.py)(?:\s*|[:,;\s(—–-].*)", first)
        return m.group(1) if m and self.lang == "python" else None

    def runnable_text(self) -> str:
        """The text to run: as written, or with the ``replace`` markers applied (each must occur)."""
        text = self.text
        if AS_WRITTEN:
            return text
        for old, new in self.replace:
            assert old in text, f"README line {self.line}: the readme-test marker replaces {old!r}, not in the block"
            text = text.replace(old, new)
        return text


def parse_readme(text: str) -> list[Block]:
    """The ``bash`` and ``python`` blocks of ``text`` with their ``##`` section and ``readme-test`` markers."""
    blocks: list[Block] = []
    section, pending_replace, pending_skip, pending_drop = "(top)", [], None, []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        marker = _MARKER.match(line.strip())
        if marker:
            for kind, a, b in _DIRECTIVE.findall(marker.group(1)):
                a, b = a.replace('\\"', '"'), b.replace('\\"', '"')
                if kind == "replace":
                    pending_replace.append((a, b))
                elif kind == "drop":
                    pending_drop.append(a)
                else:
                    pending_skip = a or "marked skip"
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            lang, start, body = fence.group(1), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if lang in ("bash", "python"):
                text = "\n".join(body) + "\n"
                blocks.append(Block(section, lang, text, start + 1, pending_replace, pending_skip, pending_drop))
            pending_replace, pending_skip, pending_drop = [], None, []
        i += 1
    return blocks


BLOCKS = parse_readme(README.read_text())
FILES = {b.file_name: b.text for b in BLOCKS if b.file_name}
SECTIONS = list(dict.fromkeys(b.section for b in BLOCKS if not b.file_name))


def commands(bash: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, blank and comment-only lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", bash)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]


class TooLong(BaseException):
    """A README command ran past :data:`LIMIT` (a BaseException: the CLI's own error handling must not catch it)."""


def _too_long(where: str) -> str:
    return (f"{where} ran past {LIMIT:.0f} s in the README test (MLSYSOPT_README_COMMAND_LIMIT): give its long "
            'commands a small budget with a <!-- readme-test: replace "A" "B" --> marker right before the block '
            '(or skip "why"), see README "Development"')  # fmt: skip


@contextlib.contextmanager
def _bounded(where: str) -> Iterator[None]:
    """Raise :class:`TooLong` in this (the main) thread after :data:`LIMIT` seconds of an in-process command."""
    if LIMIT is None:
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise TooLong(_too_long(where))

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _subprocess(argv: list[str], folder: Path, where: str) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``folder`` with :func:`_env`, stopped after :data:`LIMIT` seconds (a failure naming ``where``)."""
    try:
        return subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=LIMIT, env=_env())
    except subprocess.TimeoutExpired:
        pytest.fail(_too_long(where), pytrace=False)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _record(section: str, what: str, seconds: float, substituted: bool) -> None:
    TIMES.parent.mkdir(exist_ok=True)
    with TIMES.open("a") as f:
        f.write(json.dumps({"section": section, "command": what, "s": round(seconds, 1), "sub": substituted}) + "\n")


def run_block(block: Block, folder: Path) -> None:
    """Run one block in ``folder`` (see the module docstring); fail with the output of the command that failed."""
    text = block.runnable_text()
    if block.lang == "python":
        substituted = text != block.text
        script = folder / f"readme_block_{block.line}.py"
        script.write_text(text)
        start = time.perf_counter()
        proc = _subprocess([sys.executable, script.name], folder, f"README line {block.line} (python block)")
        _record(block.section, f"python block at README line {block.line}", time.perf_counter() - start, substituted)
        assert proc.returncode == 0, f"README line {block.line} (python, run as a file):\n{proc.stderr[-3000:]}"
        return
    original = commands(block.text)
    for gone in block.drop:
        assert any(gone in c for c in original), f"README line {block.line}: the marker drops {gone!r}, not a command"
    for k, cmd in enumerate(commands(text)):
        if any(gone in cmd for gone in block.drop):
            continue
        substituted = k >= len(original) or cmd != original[k]
        start = time.perf_counter()
        words = shlex.split(cmd, comments=True)
        shell = any(op in words for op in (">", ">>", "<", "|", "&&", "||", ";")) or "$(" in cmd or "`" in cmd
        where = f"README line {block.line}: `{cmd}`"
        if words and words[0] == "mlsysopt" and not shell and not AS_WRITTEN:
            try:
                with _bounded(where):
                    ran = run_inprocess(*words[1:], cwd=folder)
            except TooLong as exc:
                pytest.fail(str(exc), pytrace=False)
            code, out, err = ran.returncode, ran.stdout, ran.stderr
        else:
            proc = _subprocess(["bash", "-c", f"set -euo pipefail; {cmd}"], folder, where)
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        _record(block.section, cmd.split("#")[0].strip(), time.perf_counter() - start, substituted)
        assert code == 0, f"README line {block.line}: `{cmd}` exited {code}:\n{out[-1500:]}\n{err[-3000:]}"


def test_the_readme_has_runnable_blocks_and_its_markers_parse() -> None:
    runnable = [b for b in BLOCKS if not b.file_name and not b.skip]
    langs = [b.lang for b in runnable]
    assert langs.count("bash") >= 5 and langs.count("python") >= 5
    assert "mymodel.py" in FILES
    marker = '<!-- readme-test: replace "--budget 30" "--budget 2"; replace "a \\"b\\"" "c" -->'
    sample = f"{marker}\n```bash\nx --budget 30\n```\n"
    (block,) = parse_readme("## S\n" + sample)
    assert block.section == "S" and block.replace == [("--budget 30", "--budget 2"), ('a "b"', "c")]
    assert commands("a \\\n   b  # c\n# only a comment\n\nd\n") == ["a b  # c", "d"]
    (server,) = parse_readme('<!-- readme-test: drop "runs dashboard" -->\n```bash\nmlsysopt runs dashboard\n```\n')
    assert server.drop == ["runs dashboard"] and not server.replace and server.skip is None
    files = parse_readme(
        "```python\n# my_nas.py: MLPs\nx = 1\n```\n```python\n# mymodel.py\n```\n```python\n# a.pyx\n```\n"
    )
    assert [b.file_name for b in files] == ["my_nas.py", "mymodel.py", None]


def test_a_command_past_the_limit_fails_naming_its_line_and_the_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 0.3)
    monkeypatch.setattr(sys.modules[__name__], "run_inprocess", lambda *a, **k: time.sleep(5))
    for text in ("sleep 5\n", "mlsysopt nas search --budget 9999\n"):
        start = time.perf_counter()
        with pytest.raises(pytest.fail.Exception, match=r"README line 7: .* ran past 0 s .*readme-test: replace"):
            run_block(Block("S", "bash", text, 7), tmp_path)
        assert time.perf_counter() - start < 3


@pytest.mark.parametrize("section", SECTIONS)
def test_readme_section_runs_as_written(section: str, tmp_path: Path) -> None:
    """Every block of one ``##`` section, in order, in one folder (see the module docstring)."""
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    ran = 0
    for block in [b for b in BLOCKS if b.section == section and not b.file_name]:
        if block.skip:
            continue
        run_block(block, tmp_path)
        ran += 1
    if ran == 0:
        pytest.skip(f"every block of '{section}' is marked skip in the README")
