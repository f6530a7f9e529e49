"""The generated bad-input suite (issue 12): every command of the typer app, every option, every input-file kind.

The harness walks ``mlsysopt.cli.app`` itself, so a new command or option is covered without editing this file.
Each case runs the real command in-process from a *valid* baseline invocation (the command's required arguments:
a small graph, a fresh ``--out``, ...) with one option replaced by a malformed or extreme value, and asserts what
a user must see: exit 2, exactly one ``error:`` line (the last line on stderr), no traceback, and no new file
anywhere (``--out`` included). Values come from a table per type (non-numbers, nan/inf, negative, huge, 1.5 for
integers, empty strings, markup, escape sequences) plus hypothesis-generated junk; file inputs get every kind of
broken file (missing, folder, empty, binary garbage, truncated .npz, deeply nested and huge JSON, wrong top-level
type), hypothesis choosing which ones per option (``derandomize=True``: the same cases every run).

A bad value must be refused *before work starts*: the run folder being created (``RunDir.open``), or for commands
that write plain files the first atomic write (``os.replace``), counts as a failure, so an unchecked option is
caught in milliseconds instead of running a training. Cases that fail inside another system's code are marked
``xfail(strict=True)`` with the reason in :data:`KNOWN`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import typer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cli_helpers import run_inprocess
from mlsysopt.cli import app
from mlsysopt.cli.common import _annotation, harden
from mlsysopt.cli.runs import add_storage_option
from mlsysopt.graph.generate import homogeneous_cluster, layered_dag
from mlsysopt.io import RunDir
from mlsysopt.store.run import RunStore

pytestmark = [pytest.mark.usefixtures("one_torch_thread")]


class ReachedWork(BaseException):
    """Raised where a command starts its real work: the bad value got through validation."""


# ---------------------------------------------------------------------------- the command tree
@dataclass(frozen=True)
class Param:
    command: str  # "graph simulate"
    name: str  # python name
    flag: str | None  # "--devices"; None for an argument
    kind: Any  # int, float, str, Path, bool
    required: bool

    @property
    def id(self) -> str:
        return f"{self.command}:{self.flag or self.name}"


def _walk() -> list[tuple[str, Any]]:
    out, stack = [], [("", harden(add_storage_option(typer.main.get_command(app))))]
    while stack:
        path, cmd = stack.pop()
        subs = getattr(cmd, "commands", None)
        if subs:
            stack.extend((f"{path} {n}".strip(), c) for n, c in subs.items())
        else:
            out.append((path, cmd))
    return sorted(out, key=lambda t: t[0])


COMMANDS = _walk()
PARAMS = [
    Param(path, p.name, p.opts[0] if p.param_type_name == "option" else None, _annotation(p), bool(p.required))
    for path, cmd in COMMANDS
    for p in cmd.params
    if not (getattr(p, "is_bool_flag", False) or p.name == "help")
]

#: Baseline arguments per command, beyond ``--out``: what makes the invocation valid (placeholders filled in).
BASELINE: dict[str, list[str]] = {
    "graph info": ["{graph}"],
    "graph import": ["{graph}"],
    "graph simulate": ["{graph}", "--devices", "2"],
    "costmodel synth": ["layout", "--graphs", "2", "--nodes", "50-60", "--configs", "4"],
    "costmodel collect": ["--graphs", "4"],  # a small plan: drawing one traces every candidate graph's FLOPs
    "costmodel train": ["--data", "{data}", "--epochs", "1"],
    "costmodel evaluate": ["--run", "{missing_run}", "--data", "{data}"],
    "costmodel predict": ["--run", "{missing_run}", "--inputs", "{data}"],
    "costmodel ensemble": ["--member", "{missing_run}", "--member", "{data}", "--data", "{data}"],
    "costmodel latency": ["zoo:cnn"],
    "costmodel latency-train": ["--data", "real:cpu", "--method", "flops"],
    "costmodel collect-latency": ["--models", "2"],
    "placement place": ["{graph}", "--devices", "2", "--policy", "pretrained"],
    "placement compare": ["{graph}", "--devices", "2"],
    "placement adapt": ["{graph}", "--devices", "3", "--remove", "dev0", "--policy", "pretrained"],
    "serving tune": ["--model", "zoo:cnn", "--storage", "{store}"],
    # the default EPNAS without its controller's 20 pretraining steps on the prior (1-2 s per case that gets that
    # far, e.g. --backend, --address, --warm-start): no refusal depends on them; an --knob case replaces this knob
    "nas search": ["--storage", "{store}", "--knob", "prior_steps=0"],
    "nas export": ["{nas_run}"],
    "runs list": ["--storage", "{store}"],
    "runs show": ["nas_run", "--storage", "{store}"],
    "runs export": ["nas_run", "--storage", "{store}"],
    "runs compare": ["nas_run", "serve1", "--storage", "{store}"],
    "runs dashboard": ["--storage", "{store}", "--port", "{port}"],
}
#: Baseline arguments added for one option's cases (``command:--flag``), and a valid value of the option: where the
#: option is only valid with another (``--rounds`` is for the tree modes: with the default GNN mode every value would
#: be refused for the mode alone).
OPTION_BASELINE: dict[str, tuple[list[str], str]] = {"costmodel train:--rounds": (["--mode", "lightgbm"], "50")}
#: Where --out is a file, not a run folder (the value is a file name).
OUT_FILES = {
    "graph import": "out.npz",
    "graph generate": "out.npz",
    "runs export": "out.csv",
    "runs compare": "out.png",
    "placement calibrate": "out.json",
}
#: Commands that write plain files instead of a run folder: their first atomic write is "work".
WRITES_FILES = {"graph import", "graph generate", "costmodel synth", "runs export", "runs compare",
                "costmodel latency-train"}  # fmt: skip
#: Commands whose work is something else: what starts it.
WORK = {"runs dashboard": "optuna_dashboard.run_server", "placement calibrate": "mlsysopt.graph.calibrate.kernels"}
#: Values of one option beyond its type's table (placeholders are inputs): unreachable, unsupported and newer
#: study stores for every command, a study of another system for the warm starts.
SPECIFIC: dict[str, list[str]] = {
    "--storage": ["postgresql://nobody:pw@127.0.0.1:1/db", "mysql://u:pw@h/db", "{newer_store}"],
    "nas search:--warm-start": ["serve1"],
    "serving tune:--warm-start": ["nas_run"],
}
#: Baselines that cannot be valid cheaply (a trained cost model is needed): their cases still check the error
#: contract, but cannot tell an unchecked option from the missing run.
WEAK_BASELINE = {"costmodel evaluate": "needs a trained run", "costmodel predict": "needs a trained run",
                 "costmodel ensemble": "needs trained runs"}  # fmt: skip

#: Option names that are sizes: a huge value must be refused against a limit.
SIZES = {
    "tasks", "devices", "num_tasks", "nodes", "graphs", "configs", "rows", "max_batch", "requests", "hidden",
    "max_blocks", "layers", "segment_size", "configs_per_graph", "workers", "threads", "repeats", "cores",
    "min_tasks", "max_tasks", "min_devices", "max_devices", "add", "types", "input_shape", "episodes_per_update",
    "budget", "seeds", "epochs", "finetune_epochs", "validate_every", "updates", "imitation_problems",
    "teacher_steps", "imitation_epochs", "rounds", "models", "batch", "confirm_top", "confirm_rounds",
    "noise_windows",
}  # fmt: skip
#: Options whose values are files or sources (strings that may name a file).
FILE_LIKE = {"source", "graph_source", "model", "profile", "cluster_spec", "cluster_path", "placement_path",
             "policy", "data", "run", "inputs", "config", "cluster"}  # fmt: skip

HUGE = str(10**12)
JUNK, FILES = "<junk>", "<files>"

#: ``command:option=value`` (or ``=<junk>``: the hypothesis junk, ``=<files>``: the broken-file kinds) -> why it
#: fails today, run as a strict xfail (a fix shows up as XPASS and the entry must go). Empty: every case passes.
KNOWN: dict[str, str] = {}
#: Known failures that are not even run: they would exhaust this machine's memory.
NOT_RUN: set[str] = set()


# ---------------------------------------------------------------------------- fixtures and the harness
@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Valid baseline inputs and one file of every broken kind (shared, never written to by a case)."""
    return make_inputs(tmp_path_factory.mktemp("inputs"))


#: Imported before any case runs: a case's time limit must never interrupt an import half-way (that leaves a
#: partially initialized module behind for every later case).
HEAVY = (
    "torch",
    "torch_geometric",
    "onnx",
    "onnxruntime",
    "matplotlib.pyplot",
    "mlsysopt.costmodel.experiment",
    "mlsysopt.placement",
    "mlsysopt.serving",
    "mlsysopt.nas",
    "mlsysopt.demo",
)


def make_inputs(d: Path) -> dict[str, Path]:
    """Write the inputs of :func:`inputs` into ``d`` (and import what the commands import)."""
    import importlib

    for name in HEAVY:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    layered_dag(12, num_types=1, seed=0).save(d / "g.npz")
    homogeneous_cluster(2).save(d / "c.json")
    data = d / "data"
    ran = run_inprocess("costmodel", "synth", "layout", "--out", data, "--graphs", "2", "--nodes", "50-60",
                        "--configs", "4")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    ran = run_inprocess("nas", "search", "--space", "nasbench-graph:cora", "--method", "random", "--budget", "3",
                        "--out", d / "nas_run")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    broken = d / "broken"
    broken.mkdir()
    (broken / "folder.npz").mkdir()
    for ext in (".npz", ".json", ".onnx", ".pt"):
        (broken / f"empty{ext}").write_bytes(b"")
        (broken / f"garbage{ext}").write_bytes(bytes(range(256)) * 64)
        (broken / f"nested{ext}").write_text("[" * 100_000 + "]" * 100_000)
        (broken / f"list{ext}").write_text("[1, 2, 3]")
        with open(broken / f"huge{ext}", "wb") as f:  # sparse: 600 MiB on paper, nothing on disk
            f.truncate(600 * 2**20)
    with RunDir(
        d / "serve1", {"command": "serving serve"}, checkpoint=None, sink=RunStore
    ).check():  # a study of another system
        from mlsysopt.store import record_trial

        record_trial({"instances": 1}, 3.0, record={"config": {"instances": 1}}, key=0)
    import socket
    import sqlite3

    newer = sqlite3.connect(d / "newer.db")  # a store written by a newer mlsysopt: its schema is refused
    newer.execute("CREATE TABLE mlsysopt_meta (key VARCHAR(64) PRIMARY KEY, value TEXT)")
    newer.execute("INSERT INTO mlsysopt_meta VALUES ('schema_version', '999')")
    newer.commit()
    newer.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    whole = (d / "g.npz").read_bytes()
    (broken / "truncated.npz").write_bytes(whole[: len(whole) // 2])
    with zipfile.ZipFile(broken / "notgraph.npz", "w") as z:
        z.writestr("x.npy", b"\x93NUMPY")
    return {"graph": d / "g.npz", "cluster": d / "c.json", "data": data, "broken": broken,
            "missing_run": d / "no-such-run", "nas_run": d / "nas_run", "store": d, "newer_store": d / "newer.db",
            "port": port}  # fmt: skip


def _argv(command: str, inputs: dict[str, Path], case: Path, override: tuple[Param, str] | None) -> list[str]:
    base = [a.format(**{k: str(v) for k, v in inputs.items()}) for a in BASELINE.get(command, [])]
    args = [*command.split(), *base]
    params = [p for p in PARAMS if p.command == command]
    if any(p.flag == "--out" for p in params):
        args += ["--out", str(case / OUT_FILES.get(command, "out"))]
    if override is None:
        return args
    param, value = override
    args += OPTION_BASELINE.get(param.id, ([], ""))[0]
    if param.flag is None:  # an argument: replace the baseline's positional of that slot
        positional = [p for p in params if p.flag is None]
        slot = positional.index(param)
        start = len(command.split())
        args[start + slot] = value
        return args
    if param.flag in args:  # replace the baseline's value
        i = args.index(param.flag)
        args[i + 1] = value
        return args
    return [*args, param.flag, value]


#: A case that has not been refused after this long is treated as having started its work.
CASE_SECONDS = 30
#: Address space a case may add to the process: an unbounded allocation fails here, never takes the machine down.
CASE_MEMORY = 2 * 2**30


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def _memory_cap(extra: int) -> Iterator[None]:
    """RLIMIT_AS at the current address space + ``extra`` for the duration of one case (Linux)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _address_space() + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def _time_limit(seconds: int, argv: list[str]) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise ReachedWork(f"{' '.join(argv)}: not refused within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(*folders: Path) -> set[str]:
    return {str(p) for f in folders for p in f.rglob("*")}


def _sentinel(command: str) -> str:
    """What starts a command's work (a case that reaches it was not refused)."""
    if command in WORK:
        return WORK[command]
    return "os.replace" if command in WRITES_FILES else "mlsysopt.io.rundir.RunDir.open"


def check_refused(param: Param, value: str, inputs: dict[str, Path]) -> None:
    """Run the baseline with ``param`` = ``value``: it must be refused before any work, in one error line."""
    with tempfile.TemporaryDirectory(dir=inputs["graph"].parent) as tmp:
        case = Path(tmp)
        check_argv_refused(param.command, _argv(param.command, inputs, case, (param, value)), case, inputs)


def check_argv_refused(command: str, argv: list[str], case: Path, inputs: dict[str, Path], *needles: str) -> None:
    """Run ``argv`` in ``case``: refused before any work, in one error line holding every one of ``needles``."""
    before = _snapshot(case, inputs["broken"])
    sentinel = _sentinel(command)

    def reached(*a: Any, **k: Any) -> None:
        raise ReachedWork(f"{' '.join(argv)}: the bad value reached the work ({sentinel})")

    with mock.patch(sentinel, reached), _time_limit(CASE_SECONDS, argv), _memory_cap(CASE_MEMORY):
        ran = run_inprocess(*argv, cwd=case)
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    what = f"{' '.join(argv)!r} -> exit {ran.returncode}, stderr {ran.stderr[-600:]!r}"
    assert ran.returncode == 2, what
    assert len(errors) == 1 and lines[-1] == errors[0], what
    assert "Traceback" not in ran.stderr + ran.stdout, what
    assert "\x1b" not in ran.stderr and "\U0001f525" not in ran.stderr, what  # no escape codes, no emoji
    assert _snapshot(case, inputs["broken"]) == before, f"{what}: left files behind"
    for needle in needles:
        assert needle in errors[0], (needle, what)


# ---------------------------------------------------------------------------- values by type
INT_BAD = ["abc", "1.5", "", "nan", "0x10", str(2**64), "-1", "[/red]:fire:"]
FLOAT_BAD = ["abc", "", "nan", "inf", "-inf", "1e309", "-1", "[/red]:fire:"]
STR_BAD = ["", "[/red]x:fire:", "\x1b[2Jx", "nan", "-1"]


def values_for(p: Param) -> list[str]:
    """The table of malformed and extreme values for ``p``'s type (and size, for size options)."""
    if p.kind is int:
        values = list(INT_BAD)
    elif p.kind is float:
        values = list(FLOAT_BAD)
    elif p.kind is Path:
        values = [""]
    else:
        values = list(STR_BAD)
    if p.name in SIZES:
        values.append(HUGE)
    return values + SPECIFIC.get(p.flag or "", []) + SPECIFIC.get(p.id, [])


def junk(p: Param) -> st.SearchStrategy[str]:
    """Hypothesis junk of the wrong shape for ``p``: letters for numbers, control characters and markup for text."""
    if p.kind in (int, float):
        return st.from_regex(r"[a-df-z]{1,6}", fullmatch=True)  # never a number ('e' excluded: 'e5'-like)
    return st.text(st.sampled_from("[]/:\x1b\x07\r\u202e"), min_size=1, max_size=8)


def _key(p: Param, value: str) -> str:
    return f"{p.id}={value.encode('unicode_escape').decode()}"


VALUE_PARAMS = [p for p in PARAMS if p.flag != "--out"]
FILE_PARAMS = [p for p in PARAMS if (p.kind is Path and p.flag != "--out") or p.name in FILE_LIKE]


@pytest.mark.parametrize("param", VALUE_PARAMS, ids=lambda p: p.id)
def test_every_option_refuses_malformed_and_extreme_values(param: Param, inputs: dict[str, Path]) -> None:
    for value in values_for(param):
        if _key(param, value) not in KNOWN:
            check_refused(param, value.format(**{k: str(v) for k, v in inputs.items()}), inputs)
    if _key(param, JUNK) not in KNOWN:
        refuse_junk(param, inputs)


def refuse_junk(param: Param, inputs: dict[str, Path]) -> None:
    """Two hypothesis-generated values of the wrong shape for ``param`` (the same two every run)."""

    @settings(max_examples=2, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(junk(param))
    def generated(value: str) -> None:
        check_refused(param, value, inputs)

    generated()


KINDS = ["missing", "folder", "empty", "garbage", "truncated", "nested", "huge", "list", "notgraph"]


def kind_path(kind: str, param: Param, inputs: dict[str, Path]) -> str:
    b = inputs["broken"]
    ext = (
        ".json"
        if param.name in ("cluster_spec", "cluster_path", "placement_path", "config", "profile")
        else (".pt" if param.name in ("policy", "run") else ".npz")
    )
    if param.name == "model":
        ext = ".onnx"
    return str({
        "missing": b / f"missing{ext}",
        "folder": b / "folder.npz" if ext == ".npz" else b,
        "empty": b / f"empty{ext}",
        "garbage": b / f"garbage{ext}",
        "truncated": b / "truncated.npz" if ext == ".npz" else b / f"garbage{ext}",
        "nested": b / f"nested{ext}",
        "huge": b / f"huge{ext}",
        "list": b / f"list{ext}",
        "notgraph": b / "notgraph.npz" if ext == ".npz" else b / f"list{ext}",
    }[kind])  # fmt: skip


@pytest.mark.parametrize("param", [p for p in FILE_PARAMS if _key(p, FILES) not in KNOWN], ids=lambda p: p.id)
def test_every_file_input_refuses_every_kind_of_broken_file(param: Param, inputs: dict[str, Path]) -> None:
    refuse_broken_files(param, inputs)


def refuse_broken_files(param: Param, inputs: dict[str, Path]) -> None:
    """Five kinds of broken file for ``param``, chosen by hypothesis (the same five every run)."""

    @settings(max_examples=5, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.sampled_from(KINDS))
    def broken(kind: str) -> None:
        check_refused(param, kind_path(kind, param, inputs), inputs)

    broken()


def _known(key: str) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[key], run=key not in NOT_RUN)]
    return pytest.param(key, id=key, marks=marks)


@pytest.mark.parametrize("key", [_known(k) for k in KNOWN])
def test_known_failures_in_other_systems(key: str, inputs: dict[str, Path]) -> None:
    """Each known failure, on its own: strict, so a fix shows up as XPASS and the entry must go."""
    pid, _, value = key.partition("=")
    param = next(p for p in PARAMS if p.id == pid)
    if value == JUNK:
        refuse_junk(param, inputs)
    elif value == FILES:
        refuse_broken_files(param, inputs)
    else:
        check_refused(param, value.encode().decode("unicode_escape"), inputs)


@pytest.mark.parametrize(
    "command", [c for c, _ in COMMANDS if any(p.flag == "--out" for p in PARAMS if p.command == c)]
)
def test_an_out_that_is_an_existing_file_or_folder_of_the_wrong_kind(command: str, inputs: dict[str, Path]) -> None:
    out = next(p for p in PARAMS if p.command == command and p.flag == "--out")
    wrong = inputs["broken"] if command in OUT_FILES else inputs["broken"] / "garbage.json"  # folder vs file
    check_refused(out, str(wrong), inputs)


@pytest.mark.parametrize("command", [c for c, _ in COMMANDS if c not in WEAK_BASELINE])
def test_every_baseline_is_valid_up_to_the_work(command: str, inputs: dict[str, Path]) -> None:
    """Without an override the baseline must reach the work (or finish): else the cases above would prove nothing."""
    check_reaches_work(command, inputs, None)


@pytest.mark.parametrize("pid", OPTION_BASELINE)
def test_every_option_baseline_is_valid_up_to_the_work(pid: str, inputs: dict[str, Path]) -> None:
    """An option's own baseline, with a valid value of the option, reaches the work too."""
    param = next(p for p in PARAMS if p.id == pid)
    check_reaches_work(param.command, inputs, (param, OPTION_BASELINE[pid][1]))


def check_reaches_work(command: str, inputs: dict[str, Path], override: tuple[Param, str] | None) -> None:
    """The baseline of ``command`` (with ``override``) reaches the work or finishes with exit 0."""
    with tempfile.TemporaryDirectory(dir=inputs["graph"].parent) as tmp:
        argv = _argv(command, inputs, Path(tmp), override)
        sentinel = _sentinel(command)

        def reached(*a: Any, **k: Any) -> None:
            raise ReachedWork(sentinel)

        try:
            with mock.patch(sentinel, reached):
                ran = run_inprocess(*argv, cwd=Path(tmp))
        except ReachedWork:
            return
        assert ran.returncode == 0, f"{argv}: {ran.stderr[-400:]}"


def test_the_harness_covers_every_command_family() -> None:
    families = {c.split()[0] for c, _ in COMMANDS}
    assert families == {"costmodel", "demo", "graph", "nas", "placement", "runs", "serving"}
    assert len(VALUE_PARAMS) > 100 and len(FILE_PARAMS) >= 10
    ids = {p.id for p in PARAMS}
    assert all(k.partition("=")[0] in ids for k in KNOWN), "a KNOWN entry names an option that no longer exists"
    assert set(OPTION_BASELINE) <= ids, "an OPTION_BASELINE entry names an option that no longer exists"
    assert RunDir.open is not None  # the sentinel's target exists
    assert os.replace is not None


# ---------------------------------------------------------------------------- named cases (issue 25)
USER_PY = """
import os, sys, time

def loop():
    while True:
        time.sleep(0.05)

def exits():
    sys.exit(0)

def aborts():
    os.abort()

def hard_exit():
    os._exit(3)
"""

#: Bad inputs no table of values produces: id -> (argv, needles of the one error line). Placeholders: the
#: :func:`inputs` names plus ``{user}`` (misbehaving factories), ``{lie}`` (an .npz whose header claims 10^11 rows),
#: ``{cycle}``/``{selfloop}``/``{hugefeat}`` (TpuGraphs data roots with one bad train file), ``{dangling}``.
NAMED: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "factory-loops-past-timeout": (
        ["placement", "place", "{user}:loop", "--devices", "2", "--timeout", "2", "--out", "{case}/out"],
        ("did not return within 2 s (--timeout 2)",),
    ),
    "factory-sys-exit": (["graph", "info", "{user}:exits"], ("called sys.exit(0) at", "user.py:9")),
    "factory-os-abort": (["graph", "import", "{user}:aborts", "--out", "{case}/g.npz"], ("killed by SIGABRT",)),
    "factory-os-exit": (
        ["serving", "tune", "--model", "{user}:hard_exit", "--out", "{case}/out"],
        ("exited with code 3 before returning",),
    ),
    "placement-hidden-10000": (
        ["placement", "train", "--hidden", "10000", "--min-tasks", "5", "--max-tasks", "8", "--out", "{case}/out"],
        ("--hidden 10,000 is above the limit of 4,096",),
    ),
    "synth-graphs-1e6": (  # within a day of generation, but 1.5 million files in one folder
        ["costmodel", "synth", "layout", "--graphs", "1000000", "--nodes", "50-60", "--configs", "4", "--out={case}/o"],
        ("--graphs 1,000,000: 1,500,000 graph files", "above the limit of 100,000"),
    ),
    "compare-seeds-100000": (
        ["placement", "compare", "{graph}", "--devices", "2", "--seeds", "100000", "--out={case}/o"],
        ("--seeds 100,000: must be between 1 and 1,000",),
    ),
    "train-epochs-200000": (
        ["costmodel", "train", "--data", "{data}", "--epochs", "200000", "--out", "{case}/out"],
        ("--epochs 200,000 is above the limit of 100,000",),
    ),
    "placement-teacher-steps-20000": (
        ["placement", "train", "--teacher-steps", "20000", "--out", "{case}/out"],
        ("--teacher-steps 20,000 is above the limit of 10,000",),
    ),
    "sim-rate-1e-300": (
        ["serving", "tune", "--engine", "sim", "--rate", "1e-300", "--out", "{case}/out"],
        ("--rate 1e-300 req/s", "at least 1 req/s"),
    ),
    "study-rate-1e-300": (["serving", "study", "--rate", "1e-300,5", "--out", "{case}/out"], ("--rate 1e-300",)),
    "batch-timeout-1e308": (
        ["serving", "serve", "--batch-timeout-ms", "1e308", "--out", "{case}/out"],
        ("batch_timeout_ms=1e+308 is above the limit of 10000 ms",),
    ),
    "batch-timeout-in-a-config-file": (
        ["serving", "serve", "--config", "{slow_config}", "--out", "{case}/out"],
        ("slow_config.json", "batch_timeout_ms=1e+12"),
    ),
    "tpugraphs-cycle": (
        ["costmodel", "train", "--data", "{cycle}", "--epochs", "1", "--out", "{case}/out"],
        ("cycle/train/", ".npz: key 'edge_index' has a cycle"),
    ),
    "tpugraphs-self-loop": (
        ["costmodel", "train", "--data", "{selfloop}", "--epochs", "1", "--out", "{case}/out"],
        ("selfloop/train/", "is a self-loop"),
    ),
    "tpugraphs-feature-3e38": (
        ["costmodel", "train", "--data", "{hugefeat}", "--epochs", "1", "--out", "{case}/out"],
        ("hugefeat/train/", "key 'node_feat' row 0 column 0 is 3e+38"),
    ),
    "npz-header-lies": (["graph", "info", "{lie}"], ("lie.npz: key 'x' claims shape (100000000000, 3)",)),
    "npz-header-lies-small": (
        ["graph", "simulate", "{lie_small}", "--devices", "2", "--out", "{case}/out"],
        ("lie_small.npz: key 'x' claims shape (1000000, 3)", "but holds"),
    ),
    "out-is-a-dangling-symlink": (
        ["graph", "simulate", "{graph}", "--devices", "2", "--random", "--out", "{dangling}"],
        ("is a symbolic link to", "which does not exist"),
    ),
}


def _lying_npz(src: Path, dst: Path, key: str, shape: tuple[int, ...]) -> None:
    """``src`` with the array header of ``key`` claiming ``shape`` (its data unchanged)."""
    import io

    import numpy as np

    fmt = np.lib.format
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == f"{key}.npy":
                f = io.BytesIO(data)
                version = fmt.read_magic(f)
                _, fortran, dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(f)
                header = io.BytesIO()
                fmt.write_array_header_1_0(header, {"descr": fmt.dtype_to_descr(dtype), "fortran_order": fortran,
                                                    "shape": shape})  # fmt: skip
                data = header.getvalue() + data[f.tell() :]
            zout.writestr(info.filename, data)


def _bad_tpugraphs(data: Path, dst: Path, change: Any) -> Path:
    """A copy of the data root ``data`` whose first train file is changed by ``change(arrays)``."""
    import shutil

    import numpy as np

    from mlsysopt.costmodel.data.tpugraphs import save_npz

    shutil.copytree(data, dst)
    first = sorted((dst / "train").glob("*.npz"))[0]
    with np.load(first) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    save_npz(first, arrays)
    return dst


@pytest.fixture(scope="module")
def named(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The inputs of :data:`NAMED` (written once, never written to by a case)."""
    import numpy as np

    d = tmp_path_factory.mktemp("named")
    (d / "user.py").write_text(USER_PY)
    _lying_npz(inputs["graph"], d / "lie.npz", "x", (10**11, 3))
    _lying_npz(inputs["graph"], d / "lie_small.npz", "x", (10**6, 3))
    (d / "slow_config.json").write_text('{"max_batch": 4, "batch_timeout_ms": 1e12}')

    def cycle(a: dict) -> None:
        a["edge_index"] = np.concatenate([a["edge_index"], a["edge_index"][:1, ::-1]])

    def selfloop(a: dict) -> None:
        a["edge_index"] = np.concatenate([a["edge_index"], [[3, 3]]])

    def hugefeat(a: dict) -> None:
        a["node_feat"][0, 0] = 3e38

    for name, change in (("cycle", cycle), ("selfloop", selfloop), ("hugefeat", hugefeat)):
        _bad_tpugraphs(inputs["data"], d / name, change)
    (d / "dangling").symlink_to(d / "no-such-folder")
    return {**{k: d / k for k in ("cycle", "selfloop", "hugefeat", "dangling")}, "user": d / "user.py",
            "lie": d / "lie.npz", "lie_small": d / "lie_small.npz", "slow_config": d / "slow_config.json"}  # fmt: skip


@pytest.mark.parametrize("case", NAMED)
def test_named_bad_inputs_are_refused_naming_what_was_wrong(
    case: str, inputs: dict[str, Path], named: dict[str, Path]
) -> None:
    template, needles = NAMED[case]
    with tempfile.TemporaryDirectory(dir=inputs["graph"].parent) as tmp:
        values = {k: str(v) for k, v in {**inputs, **named, "case": Path(tmp)}.items()}
        argv = [a.format(**values) for a in template]
        command = " ".join(argv[:2]) if argv[0] != "demo" else "demo"
        check_argv_refused(command, argv, Path(tmp), inputs, *needles)
