"""Every code block of the README and of the documentation pages runs as written, and each command's time is printed.

What runs: the ````` ```bash ````` and ````` ```python ````` blocks of ``README.md`` and of every page a user copies
from (``docs/*.md``, ``docs/guides/*.md``; not the generated reference), found at any indentation (a block inside a
list item counts).

* every ``bash`` block runs one command (a line; ``\\`` continues it) after another; every ``python`` block runs as
  a file (``python block.py``: a block that starts a process needs its ``if __name__ == "__main__":`` guard, as
  the user's script would); a ``python`` block whose first line is ``# NAME.py`` (or ``# NAME.py: what it is``) is
  that file, written (not run) into the folder of every section of its page, so that later blocks can use it
  (``./mymodel.py:tiny_vit``);
* one parametrized case per ``##`` section of a page: its blocks run in order in one scratch folder and share what
  earlier ones wrote (``runs/vit-prof/profile_32.json`` from ``serving profile`` feeds ``serving tune --engine
  sim``); the cases spread over the ``pytest -n`` workers;
* a command or Python block that appears twice (the README's and a page's) runs once, where it comes first
  (README, then the pages by name), unless a later block of its own section reads what it writes.

The text stays as a user reads it: no test markers in the pages. What the test changes lives in this file:

* :data:`SMALL`: options appended to the commands a pattern matches, giving them tiny budgets (Typer takes the last
  value of an option given twice, so the appended value wins and the command is otherwise the one shown);
* :data:`PY_REPLACE`: text replaced in Python blocks for the same reason;
* :data:`SKIP`: commands (or Python blocks) not run, each with why (the set-up itself, commands for several
  machines, a server that runs until Ctrl-C, a 25-minute measured collection, a command another test runs as shown).

Each entry must still match something (a stale entry fails ``test_the_substitutions_still_match_the_pages``), and a
command that fails, or runs past ``MLSYSOPT_README_COMMAND_LIMIT`` seconds (default 300), fails its case naming the
page and line. ``mlsysopt`` commands, Python blocks and ``python -c`` lines run in the test's process (no interpreter
start per block, imports cached, one torch thread: fast); other lines run in ``bash`` with this environment's
``python`` and ``mlsysopt`` first on ``PATH``. ``MLSYSOPT_README_AS_WRITTEN=1`` drops the substitutions and runs
every line and block in a process of its own, as a user does: how the run times quoted in the pages are measured.

Each command's wall time (and CPU time) is recorded; at the end of the session conftest.py prints the table, written
to ``runs/readme-times.txt`` (or ``MLSYSOPT_README_TIMES``). The other tests here keep the pages honest too: the
README stays under 300 lines with every link resolving, and docs/architecture.md's development map names every module.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import runpy
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_inprocess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMES = Path(os.environ.get("MLSYSOPT_README_TIMES", ROOT / "runs" / "readme-times.txt"))
#: `make test` runs this module at normal priority, in the Ray group's session: its commands measure real serving (a
#: tune whose SLO must hold), beside the other tests' workers at `nice` 10 (see the Makefile)
pytestmark = pytest.mark.pages
AS_WRITTEN = os.environ.get("MLSYSOPT_README_AS_WRITTEN", "").strip() in ("1", "true", "yes")
#: Seconds one command (or Python block) may run; none as written (the pages' own budgets).
LIMIT = None if AS_WRITTEN else float(os.environ.get("MLSYSOPT_README_COMMAND_LIMIT", "300"))


def pages() -> list[Path]:
    """The README, then the documentation pages a user copies commands from (not the generated reference)."""
    docs = ROOT / "docs"
    return [README, *sorted(docs.glob("*.md")), *sorted((docs / "guides").glob("*.md"))]


# ---------------------------------------------------------------------------------------------- what the test changes
#: (pattern searched in a command, options appended to it). Every matching entry applies, in this order, so a later
#: (more specific) entry's value of an option wins.
SMALL: list[tuple[str, str]] = [
    # placement: a 20-evaluation search, one seed, in this process
    (r"^mlsysopt placement (place|compare|adapt) ", "--budget 20"),
    (r"^mlsysopt placement calibrate ", "--reps 5"),
    (r"^mlsysopt placement (compare|adapt) ", "--seeds 1 --workers 1"),
    # the page's own short list (tests/test_cli_placement.py compares every method); a recipe at its smallest size:
    # the portfolio's 19 saga schedulers cost what the graph's size does
    (r"^mlsysopt placement compare (?!.*--methods)", "--methods heft,saga_best,local_search,giph"),
    (r"^mlsysopt placement (place|compare|adapt) (montage|genome) ", "--num-tasks 60"),
    (
        r"^mlsysopt placement train ",
        "--imitation-problems 2 --teacher-steps 2 --imitation-epochs 1 --updates 1 "
        "--episodes-per-update 1 --max-tasks 12 --workers 1",
    ),
    (r"^mlsysopt placement train .*--resume", "--updates 2"),
    # serving on the real engine: a 2-measurement search of a narrowed space, short windows, one confirmation round.
    # Windows of 40 requests (0.2 s at 200 req/s): with 10 (50 ms) a stall of the loaded test box marked a window
    # saturated, and the tune of the ONNX quickstart said "SLO missed" at p99 4.9 ms (2026-12-06)
    (r"^mlsysopt serving profile ", "--rows 1,2,4 --intra 1,2 --inter 1 --repeats 2 --no-calibrate"),
    (
        r"^mlsysopt serving tune (?!.*--engine sim)",
        "--budget 2 --confirm-top 1 --confirm-rounds 1 --noise-windows 2 --requests 40 --instances 1 --max-batch 1,4",
    ),
    (r"^mlsysopt serving tune .*--model zoo:resnet", "--model zoo:cnn"),
    (r"^mlsysopt serving tune (?!.*--engine sim)(?!.*throughput).*--slo-ms", "--slo-ms 1000"),  # a loaded test box
    (r"^mlsysopt serving tune .*--model \S+ .*--rate 100 .*--objective throughput", "--rate 400"),
    # a .py model is exported to ONNX first (seconds for the tiny ViT); tests/serving/test_export.py serves .py models
    (r"^mlsysopt serving tune .*--model \./mymodel.py:tiny_vit", "--model zoo:cnn"),
    (r"^mlsysopt serving tune .*--engine sim", "--budget 4 --requests 40"),
    (r"^mlsysopt serving serve ", "--requests 20"),
    (r"^mlsysopt serving serve .*--model zoo:resnet", "--model zoo:cnn --rate 50"),
    (r"^mlsysopt serving serve .*--model tiny_vit.onnx", "--rate 100"),
    (r"^mlsysopt serving study ", "--seeds 1 --cap 0.02 --requests 10"),
    (r"^mlsysopt serving study .*--tuners rrl,tpe,gp,random", "--tuners rrl,random --workers 1"),
    (r"^mlsysopt serving study .*--tuners rrl_warm,rrl,gp_warm,gp", "--tuners rrl_warm,gp_warm"),  # GP: tests/serving
    # NAS: digits trains 2 candidates for one epoch; the tables are looked up
    (r"^mlsysopt nas search .*--space digits", "--budget 2 --epochs 1 --workers 1"),
    # the method the page's budget picks (20-59: bananas, 60 or more: epnas_cold), which a budget of 2 would change
    # (nas/defaults.py)
    (r"^mlsysopt nas search (?!.*--method)(?=.*--budget [2-5]\d\b).*--space digits", "--method bananas"),
    (r"^mlsysopt nas search (?!.*--method)(?=.*--budget (\d{3,}|[6-9]\d)\b).*--space digits", "--method epnas_cold"),
    (r"^mlsysopt nas search .*--space digits .*--resume", "--budget 3"),
    (r"^mlsysopt nas search .*--latency-model", "--knob candidates=16"),  # each candidate's latency: an ONNX export
    # a table's transfer prior takes ~10 s to fit (once per session; tests/nas fit and check it): run the search cold
    # 12: the cold predictor's 10 warm-up evaluations, then ranked rounds (each ranks thousands of candidates)
    (r"^mlsysopt nas search .*--space nasbench-graph", "--budget 12 --workers 1 --method epnas_cold"),
    (r"^mlsysopt nas search .*--space nasbench-graph.*--budget 40", "--budget 4 --method epnas_cold"),
    # cost models: tiny synthetic data, one epoch
    (r"^mlsysopt costmodel synth layout ", "--graphs train=4,valid=2,test=2 --nodes 500-1000 --configs 8"),
    (r"^mlsysopt costmodel train (?!.*--mode (lightgbm|xgboost|trees))", "--epochs 1 --finetune-epochs 1"),
    (r"^mlsysopt costmodel train .*--mode (lightgbm|xgboost|trees)", "--rounds 50"),  # of 400 (validation picks)
    (r"^mlsysopt costmodel latency .*--measure", "--no-measure"),  # tests/costmodel/test_oracle.py measures
]

#: Python blocks: text -> the text the test runs instead (each must occur in some block).
PY_REPLACE: dict[str, str] = {
    "seeds=2, giph=giph": "seeds=1, giph=giph",
    "n_requests=200, seed=0": "n_requests=60, seed=0",
    "n_requests=100, seed=0": "n_requests=30, seed=0",
    "segment_size=100, epochs=2,": "segment_size=100, epochs=1,",
    "EPNASConfig(warmup=5)": 'EPNASConfig(warmup=5, prior="none")',
    "cons, budget=30, seed=0,": "cons, budget=12, seed=0,",  # 5 warm-up evaluations, then ranked rounds
    '{"epochs": 2, "max_blocks": 1}': '{"epochs": 1, "max_blocks": 1}',
}

#: text of a command (or Python block) -> why it is not run here
SKIP: dict[str, str] = {
    "make demo": "the set-up itself: CI runs make test, which runs this test",
    "make test": "the set-up itself",
    "make docs": "tests/test_docs.py builds the site",
    "mkdocs serve": "a server that runs until Ctrl-C",
    "python3 -m venv": "the set-up itself",
    ".venv/bin/": "the set-up itself (the venv of a checkout)",
    "ray start": "commands for several machines (tests/runtime start a real 2-node Ray cluster on loopback)",
    "RAY_AUTH_TOKEN": "commands for several machines",
    "--address 10.0.0.5": "commands for several machines",
    "runs dashboard": "a server that runs until Ctrl-C (tests/store test the dashboard)",
    "--engine rayserve": "a Ray Serve tune takes minutes; tests/serving/test_rayserve_tune.py tunes and deploys it",
    "serve run serve_config.yaml": "blocks until Ctrl-C; tests/serving/test_rayserve_tune.py runs it",
    "costmodel collect --out data/real": "a 25-minute measured collection; tests/test_cli_costmodel.py runs collect",
    "costmodel collect --out data/mine": "an example with your own files; tests/test_cli_costmodel.py runs --source",
    "--op-costs builtin --random": "needs an ONNX file; tests/costmodel/test_oracle.py runs it",
    "--cost-model builtin": "a real tune; tests/costmodel/test_oracle.py and test_latency_oracle.py run --cost-model",
    "--graphs-per-step 2 --out runs/gst-dp": "2 training processes; tests/costmodel/test_costmodel_distributed.py",
    "--space my_nas.py:space": "tests/nas/test_user_objective.py runs this page's my_nas.py search, export and reload",
    "nas export runs/mlp ": "exports the search above (tests/nas/test_user_objective.py)",
}


# ---------------------------------------------------------------------------------------------------------- parsing
@dataclass
class Block:
    """One fenced block: its page, ``##`` section, language, text and first line number."""

    page: str
    section: str
    lang: str
    text: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"

    @property
    def file_name(self) -> str | None:
        """``NAME.py`` when the block's first line is ``# NAME.py`` (or ``# NAME.py: what it is``): a file for later
        blocks, not run."""
        first = self.text.splitlines()[0] if self.text.strip() else ""
        m = re.fullmatch(r"#\s*([\w.-]+\.py)(?:\s*|[:,;\s—–-].*)", first)
        return m.group(1) if m and self.lang == "python" else None


def parse_page(text: str, page: str = "README.md") -> list[Block]:
    """The ``bash`` and ``python`` blocks of ``text`` (at any indentation) with their ``##`` section."""
    blocks: list[Block] = []
    section = "(top)"
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        fence = re.match(r"^(\s*)(`{3,})(\w*)\s*$", line)
        if fence:
            indent, ticks, lang = fence.group(1), fence.group(2), fence.group(3)
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(ticks):
                body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            if lang in ("bash", "python"):
                blocks.append(Block(page, section, lang, "\n".join(body) + "\n", start + 1))
        i += 1
    return blocks


def commands(bash: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, blank and comment-only lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", bash)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def small(cmd: str) -> str:
    """``cmd`` with the options of every :data:`SMALL` entry that matches it appended (before a ``# comment`` or a
    redirect); as written under ``MLSYSOPT_README_AS_WRITTEN``."""
    if AS_WRITTEN:
        return cmd
    head, sep, tail = _split_tail(cmd)
    for pattern, extra in SMALL:
        if re.search(pattern, cmd):
            head = f"{head} {extra}"
    return f"{head}{sep}{tail}"


def _split_tail(cmd: str) -> tuple[str, str, str]:
    """``cmd`` as (the command with its options, separator, the redirect or comment after them)."""
    m = re.search(r"\s+(#|>>?|\|)", cmd)
    if not m or cmd.startswith("python -c"):
        return cmd, "", ""
    return cmd[: m.start()], " ", cmd[m.start() :].lstrip()


def skipped(text: str) -> str | None:
    """Why ``text`` (a command or a Python block) is not run, or None."""
    for needle, why in SKIP.items():
        if needle in text:
            return why
    return None


def _outputs(cmd: str) -> list[str]:
    """What a command writes that a later block could read: ``--out`` folders, redirect targets, quoted file names
    of a ``python -c``."""
    outs = re.findall(r"--(?:out|cluster-out)[ =](\S+)", cmd) + re.findall(r">>?\s*(\S+)", cmd)
    outs += re.findall(r"'([\w./-]+\.\w+)'", cmd) if cmd.startswith("python") else []
    return outs


def _reads(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` (or a file inside it): ``runs/lgb-layout`` does not name ``runs/lgb``."""
    return re.search(rf"(?<![\w./-]){re.escape(path)}(?![\w.-])", text) is not None


@dataclass
class Step:
    """One thing to run: a command of a bash block, or a whole Python block."""

    block: Block
    text: str  # the command, or the block's code, as written
    skip: str | None = None  # why it does not run

    @property
    def runnable(self) -> str:
        if self.block.lang == "bash":
            return small(self.text)
        if AS_WRITTEN:
            return self.text
        text = self.text
        for old, new in PY_REPLACE.items():
            text = text.replace(old, new)
        return text


def _collect() -> tuple[dict[str, list[Step]], dict[str, dict[str, str]]]:
    """Every section's steps, in page order, and every page's files (``# NAME.py`` blocks)."""
    groups: dict[str, list[Step]] = {}
    files: dict[str, dict[str, str]] = {}
    for path in pages():
        page = path.relative_to(ROOT).as_posix()
        for block in parse_page(path.read_text(), page):
            if block.file_name:
                files.setdefault(page, {})[block.file_name] = block.text
                continue
            texts = commands(block.text) if block.lang == "bash" else [block.text]
            steps = groups.setdefault(f"{page}: {block.section}", [])
            steps += [Step(block, t, skipped(t)) for t in texts]
    seen: set[str] = set()
    for steps in groups.values():
        for k, step in enumerate(steps):
            key = " ".join(step.text.split(" #")[0].split())  # the command without its comment
            if step.skip:
                continue
            if key in seen:
                later = "\n".join(s.text for s in steps[k + 1 :])
                if not any(_reads(later, out) for out in _outputs(step.text)):
                    step.skip = "run once, where it first appears"
            seen.add(key)
    return groups, files


GROUPS, FILES = _collect()
CASES = [name for name, steps in GROUPS.items() if any(not s.skip for s in steps)]


# ---------------------------------------------------------------------------------------------------------- running
class TooLong(BaseException):
    """A command ran past :data:`LIMIT` (a BaseException: the CLI's own error handling must not catch it)."""


def _too_long(where: str) -> str:
    return (f"{where} ran past {LIMIT:.0f} s in the docs test (MLSYSOPT_README_COMMAND_LIMIT): give it a small "
            "budget in tests/test_readme.py (SMALL or PY_REPLACE), or SKIP it with why")  # fmt: skip


@contextlib.contextmanager
def _bounded(where: str) -> Iterator[None]:
    """Raise :class:`TooLong` in this (the main) thread after :data:`LIMIT` seconds of an in-process step."""
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


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _subprocess(argv: list[str], folder: Path, where: str) -> tuple[int, str, str]:
    """``argv`` in ``folder`` with :func:`_env`, stopped after :data:`LIMIT` seconds (a failure naming ``where``)."""
    try:
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=LIMIT, env=_env())
    except subprocess.TimeoutExpired:
        pytest.fail(_too_long(where), pytrace=False)
    return done.returncode, done.stdout, done.stderr


def _python_inprocess(code: str, folder: Path, where: str, script: Path | None) -> tuple[int, str, str]:
    """Run ``code`` as ``python script`` (or ``python -c code``) would, in this process: ``__name__ == "__main__"``,
    the folder first on ``sys.path`` and current; the modules it imported from the folder are forgotten after."""
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_path, old_argv = os.getcwd(), list(sys.path), list(sys.argv)
    loaded = set(sys.modules)
    code_rc = 0
    try:
        os.chdir(folder)
        sys.path.insert(0, str(folder))
        sys.argv = [script.name if script else "-c"]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _bounded(where):
            try:
                if script is not None:
                    runpy.run_path(str(script), run_name="__main__")
                else:
                    exec(compile(code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            except SystemExit as exc:
                code_rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:
                traceback.print_exc()
                code_rc = 1
    except TooLong as exc:
        pytest.fail(str(exc), pytrace=False)
    finally:
        os.chdir(old_cwd)
        sys.path[:], sys.argv[:] = old_path, old_argv
        here = folder.resolve()
        for name in set(sys.modules) - loaded:  # only the block's own imports can come from the folder
            file = getattr(sys.modules[name], "__file__", None)
            if file and Path(file).resolve().is_relative_to(here):
                del sys.modules[name]
    return code_rc, out.getvalue(), err.getvalue()


def _mlsysopt_inprocess(words: list[str], folder: Path, where: str, to: str | None) -> tuple[int, str, str]:
    try:
        with _bounded(where):
            ran = run_inprocess(*words[1:], cwd=folder)
    except TooLong as exc:
        pytest.fail(str(exc), pytrace=False)
    if to is not None and ran.returncode == 0:
        (folder / to).write_text(ran.stdout)
    return ran.returncode, ran.stdout, ran.stderr


def _cpu() -> float:
    """CPU seconds of this process and its finished children so far."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _record(group: str, what: str, seconds: float, substituted: bool, cpu: float = 0.0) -> None:
    TIMES.parent.mkdir(exist_ok=True)
    row = {"section": group, "command": what, "s": round(seconds, 1), "cpu": round(cpu, 1), "sub": substituted}
    with TIMES.open("a") as f:
        f.write(json.dumps(row) + "\n")


def run_step(step: Step, folder: Path, group: str = "") -> None:
    """Run one step in ``folder`` (see the module docstring); fail with the output of the command that failed."""
    block, text = step.block, step.runnable
    substituted = text != step.text
    start, cpu = time.perf_counter(), _cpu()
    if block.lang == "python":
        where = f"{block.where} (python block)"
        script = folder / f"block_{Path(block.page).stem}_{block.line}.py"
        script.write_text(text)
        if AS_WRITTEN:
            code, out, err = _subprocess([sys.executable, script.name], folder, where)
        else:
            code, out, err = _python_inprocess(text, folder, where, script)
        _record(group, f"python block at {block.where}", time.perf_counter() - start, substituted, _cpu() - cpu)
        assert code == 0, f"{where}, run as a file, exited {code}:\n{out[-1500:]}\n{err[-3000:]}"
        return
    where = f"{block.where}: `{text}`"
    words = shlex.split(text, comments=True)
    to = None
    if len(words) > 2 and words[-2] == ">" and words[0] == "mlsysopt":
        words, to = words[:-2], words[-1]
    shell = any(op in words for op in (">", ">>", "<", "|", "&&", "||", ";")) or "$(" in text or "`" in text
    if AS_WRITTEN or shell:
        code, out, err = _subprocess(["bash", "-c", f"set -euo pipefail; {text}"], folder, where)
    elif words[0] == "mlsysopt":
        code, out, err = _mlsysopt_inprocess(words, folder, where, to)
    elif words[:2] == ["python", "-c"] and len(words) == 3:
        code, out, err = _python_inprocess(words[2], folder, where, None)
    else:
        code, out, err = _subprocess(["bash", "-c", f"set -euo pipefail; {text}"], folder, where)
    _record(group, text.split(" #")[0].strip(), time.perf_counter() - start, substituted, _cpu() - cpu)
    assert code == 0, f"{where} exited {code}:\n{out[-1500:]}\n{err[-3000:]}"


# ------------------------------------------------------------------------------------------------------------ tests
def test_the_pages_have_runnable_blocks_and_no_test_markers() -> None:
    readme = README.read_text()
    assert len(readme.splitlines()) <= 300, "the README is a front page: at most 300 lines (the rest goes to docs/)"
    for path in pages():
        assert "readme-test" not in path.read_text(), f"{path.name}: test markers belong in tests/test_readme.py"
    steps = [s for group in GROUPS.values() for s in group if not s.skip]
    langs = [s.block.lang for s in steps]
    assert langs.count("bash") >= 40 and langs.count("python") >= 8
    assert "mymodel.py" in FILES["README.md"] and "my_nas.py" in FILES["docs/bring-your-own.md"]
    assert GROUPS["README.md: Quickstart: a PyTorch model"][0].text.startswith("mlsysopt graph info")


def test_the_parser_reads_indented_blocks_sections_and_files() -> None:
    text = (
        "# T\n## S\n```bash\nx --budget 30 \\\n   --out r  # c\n# only a comment\n\nd\n```\n"
        "- item\n\n  ```python\n  # my_nas.py: MLPs\n  x = 1\n  ```\n"
    )
    bash, py = parse_page(text, "p.md")
    assert (bash.section, bash.lang, bash.line) == ("S", "bash", 4)
    assert commands(bash.text) == ["x --budget 30 --out r  # c", "d"]
    assert py.file_name == "my_nas.py" and py.text == "# my_nas.py: MLPs\nx = 1\n"
    assert _reads("--run runs/lgb --x", "runs/lgb") and _reads("cat runs/lgb/result.json", "runs/lgb")
    assert not _reads("--member runs/lgb-layout", "runs/lgb") and not _reads("runs/lgb.csv", "runs/lgb")
    files = parse_page("```python\n# mymodel.py\n```\n```python\n# a.pyx\n```\n")
    assert [b.file_name for b in files] == ["mymodel.py", None]


@pytest.mark.skipif(AS_WRITTEN, reason="the substitutions are off")
def test_the_substitutions_still_match_the_pages() -> None:
    """A stale entry (its command gone from the pages) fails here, so the tables shrink with the pages."""
    every = [s for group in GROUPS.values() for s in group]
    cmds = [s.text for s in every if s.block.lang == "bash"]
    pys = [s.text for s in every if s.block.lang == "python"]
    stale = [p for p, _ in SMALL if not any(re.search(p, c) for c in cmds)]
    stale += [old for old in PY_REPLACE if not any(old in t for t in pys)]
    stale += [needle for needle in SKIP if not any(needle in s.text for s in every)]
    assert not stale, f"entries of tests/test_readme.py that match nothing in the pages: {stale}"
    smaller = "mlsysopt placement compare g --out r --methods m --budget 20 --seeds 1 --workers 1 # why"
    assert small("mlsysopt placement compare g --out r --methods m  # why") == smaller
    assert small("mlsysopt runs export x --format csv > x.csv") == "mlsysopt runs export x --format csv > x.csv"


def test_a_command_past_the_limit_fails_naming_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "LIMIT", 0.3)
    monkeypatch.setattr(sys.modules[__name__], "run_inprocess", lambda *a, **k: time.sleep(5))
    slow = (
        ("bash", "sleep 5"),
        ("bash", "mlsysopt nas search --budget 9999"),
        ("python", "import time; time.sleep(5)\n"),
    )
    for lang, text in slow:
        start = time.perf_counter()
        with pytest.raises(pytest.fail.Exception, match=r"p.md line 7.* ran past 0 s .*SMALL or PY_REPLACE"):
            run_step(Step(Block("p.md", "S", lang, text, 7), text), tmp_path)
        assert time.perf_counter() - start < 3


def test_a_failing_command_or_block_fails_with_its_output(tmp_path: Path) -> None:
    for lang, text, needle in (("bash", "mlsysopt graph info nope.onnx", "nope.onnx"),
                               ("python", "raise ValueError('boom')\n", "ValueError: boom"),
                               ("bash", "python -c \"import sys; sys.exit(3)\"", "exited 3")):  # fmt: skip
        with pytest.raises(AssertionError, match=needle):
            run_step(Step(Block("p.md", "S", lang, text, 7), text), tmp_path)


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_resolve() -> None:
    """The README is read on GitHub: every relative link names a file of the repository, and an anchor a heading."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", README.read_text())
    assert len(links) >= 15
    for target, anchor in links:
        if target.startswith(("http:", "https:")):
            continue
        path = ROOT / target
        assert path.exists(), f"README links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
            assert anchor in {_github_anchor(h) for h in headings}, f"README links to {target}#{anchor}: no heading"


def test_the_development_map_lists_every_module() -> None:
    """docs/architecture.md's map names every module of src/mlsysopt, in its folder, and nothing that is gone."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    tree = text[text.index("## The development map") :].split("```")[1]
    listed, folder = set(), None
    for line in tree.splitlines():
        words = line.split()
        if not words:
            continue
        if not line.startswith(" " * 4) and words[0].endswith("/"):
            head = words.pop(0)
            folder = "" if head == "src/mlsysopt/" else (head if line.startswith("  ") else None)
        if folder is not None:
            listed |= {f"{folder}{w}" for w in words if w.endswith(".py")}
    src = ROOT / "src" / "mlsysopt"
    actual = {p.relative_to(src).as_posix() for p in src.rglob("*.py") if p.name != "__init__.py"}
    assert not actual - listed, f"docs/architecture.md's development map misses {sorted(actual - listed)}"
    assert not listed - actual, (
        f"docs/architecture.md's development map lists modules now gone: {sorted(listed - actual)}"
    )


@pytest.mark.parametrize("group", CASES)
def test_the_docs_run_as_written(group: str, tmp_path: Path, one_torch_thread: None) -> None:
    """Every step of one ``##`` section of a page, in order, in one folder (see the module docstring). The steps run
    in this process with one torch thread: two test workers share the machine's cores (two threads each made a
    loaded 2-core box 7x slower)."""
    page = group.split(": ", 1)[0]
    for name, text in {**FILES.get("README.md", {}), **FILES.get(page, {})}.items():
        (tmp_path / name).write_text(text)
    for step in GROUPS[group]:
        if not step.skip:
            run_step(step, tmp_path, group)
